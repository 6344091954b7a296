// Package cli implements codecell's subcommands on top of the other
// packages; cmd/codecell only dispatches to it.
package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/codecell/codecell/internal/config"
)

// Env is the process's world, passed in so commands are testable.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// UsageError is a mistake in the command line.
type UsageError struct{ error }

// loadConfig parses the shared settings plus a command's own flags.
func loadConfig(name string, args []string, env Env, extra func(*flag.FlagSet)) (config.Config, *flag.FlagSet, error) {
	cfg := config.Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if err := cfg.Flags(fs, env.Getenv); err != nil {
		return cfg, fs, UsageError{err}
	}
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return cfg, fs, err
		}
		return cfg, fs, UsageError{err}
	}
	cfg.Finish()
	if err := cfg.LoadTemplates(); err != nil {
		return cfg, fs, UsageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fs, UsageError{err}
	}
	return cfg, fs, nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(strings.ToUpper(level)))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

func usageErrorf(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }
