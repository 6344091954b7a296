//go:build !linux

package agent

import (
	"errors"
	"io"
)

// Run is only meaningful inside a Linux sandbox.
func Run(in io.Reader, out io.Writer, opts Options) error {
	return errors.New("the codecell agent runs only on Linux")
}
