// Package runtime drives OCI runtimes (runc, and gVisor's runsc) through their
// command-line interface. Both speak the same verbs; a driver is the binary
// plus the global flags that differ, so one spec builder serves both.
package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/codecell/codecell/internal/errdefs"
)

// Names of the supported runtimes, as users spell them.
const (
	Runc   = "runc"
	GVisor = "gvisor"
)

// Runtime is one installed OCI runtime.
type Runtime struct {
	name   string
	binary string
	global []string
	run    []string // flags of `run`
	// AdjustSpec lets a runtime drop what it provides by other means.
	adjust func(*specs.Spec)
}

// New returns the driver for name with its state under stateDir. It fails
// with ErrUnavailable when the binary is not installed.
func New(name, stateDir string) (*Runtime, error) {
	var r *Runtime
	switch name {
	case Runc:
		// Every sandbox's root maps to the same host uid, whose kernel
		// keyring quota (kernel.keys.maxkeys, 200) a session keyring per
		// container would use up at ~200 sandboxes; the seccomp profile
		// denies keyctl, so the sandbox could not use one anyway.
		r = &Runtime{name: Runc, binary: "runc", run: []string{"--no-new-keyring"}}
	case GVisor:
		r = &Runtime{name: GVisor, binary: "runsc",
			// gVisor has its own network stack; "none" leaves it only loopback.
			// Seccomp from the spec is applied inside the sandbox on request.
			// host-uds=open lets a sandbox connect to the one host socket
			// bound into it, its egress proxy gate.
			global: []string{"--network=none", "--host-uds=open"},
			adjust: func(s *specs.Spec) {
				// The sentry runs its own user namespace; a spec user namespace
				// with mappings is not supported by this runsc.
				ns := s.Linux.Namespaces[:0]
				for _, n := range s.Linux.Namespaces {
					if n.Type != specs.UserNamespace {
						ns = append(ns, n)
					}
				}
				s.Linux.Namespaces = ns
				s.Linux.UIDMappings, s.Linux.GIDMappings = nil, nil
			},
		}
	default:
		return nil, fmt.Errorf("unknown runtime %q (supported: %s, %s): %w", name, Runc, GVisor, errdefs.ErrInvalid)
	}
	bin, err := exec.LookPath(r.binary)
	if err != nil {
		return nil, fmt.Errorf("runtime %s needs %s, which is not installed (apt-get install %s): %w", name, r.binary, r.binary, errdefs.ErrUnavailable)
	}
	r.binary = bin
	root := filepath.Join(stateDir, name)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	r.global = append([]string{"--root", root}, r.global...)
	return r, nil
}

// Name is the user-facing name ("runc" or "gvisor").
func (r *Runtime) Name() string { return r.name }

// Adjust applies the runtime's changes to a spec built for runc.
func (r *Runtime) Adjust(s *specs.Spec) {
	if r.adjust != nil {
		r.adjust(s)
	}
}

func (r *Runtime) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.binary, append(append([]string(nil), r.global...), args...)...)
}

// Container is one running `RUNTIME run`.
type Container struct {
	ID   string
	done chan struct{}
}

// Run starts the container in bundle in the foreground, its init's stdio
// connected to the given files. The runtime process is killed if we die, so
// the agent sees EOF and the container ends with us.
func (r *Runtime) Run(id, bundle string, stdin io.Reader, stdout, stderr io.Writer) (*Container, error) {
	args := append(append(append([]string(nil), r.global...), "run"), r.run...)
	cmd := exec.Command(r.binary, append(args, "--bundle", bundle, id)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s run %s: %w", r.name, id, err)
	}
	c := &Container{ID: id, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Done is closed when the container has exited.
func (c *Container) Done() <-chan struct{} { return c.done }

// Kill stops the container at once and removes its state and cgroup.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	out, err := r.command(ctx, "delete", "--force", id).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("not exist")) && !bytes.Contains(out, []byte("not found")) {
		return fmt.Errorf("%s delete %s: %v: %s", r.name, id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// List returns the ids of containers in this runtime's state directory.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	out, err := r.command(ctx, "list", "--format", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("%s list: %w", r.name, err)
	}
	var states []struct {
		ID string `json:"id"`
	}
	if s := strings.TrimSpace(string(out)); s != "" && s != "null" {
		if err := json.Unmarshal([]byte(s), &states); err != nil {
			return nil, fmt.Errorf("%s list: %w", r.name, err)
		}
	}
	ids := make([]string, len(states))
	for i, s := range states {
		ids[i] = s.ID
	}
	return ids, nil
}
