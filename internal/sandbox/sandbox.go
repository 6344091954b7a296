// Package sandbox owns sandboxes: it creates them (OCI bundle, runtime
// process, agent connection), keeps warm pools of them per runtime, runs code
// in them and makes sure each is destroyed exactly once, including the leftovers
// of a daemon that was killed.
package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/agentclient"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/oci"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/runtime"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cgroupParent groups every sandbox's cgroup, so leftovers are easy to find.
const cgroupParent = "codecell"

// Sandbox is one running container with its agent.
type Sandbox struct {
	ID      string
	Runtime string
	Ready   agent.Ready
	Created time.Time
	Limits  Limits             // as created
	Display *agent.DisplayInfo // started at creation (a template's), or nil

	rt        *runtime.Runtime
	ctr       *runtime.Container
	client    *agentclient.Client
	bundle    string
	cgroup    string
	uses      atomic.Int64 // runs started in it
	gate      atomic.Pointer[egress.Gate]
	layers    []*packages.Layer // mounted
	release   func()            // ends the layers' use, on Destroy
	destroyed sync.Once
	log       *slog.Logger
}

// Spec is what a new sandbox looks like, apart from its id.
type Spec struct {
	Options oci.Options // Hostname, CgroupsPath and Args are filled per sandbox
	Preload []string
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "cc-" + hex.EncodeToString(b)
}

// create starts a sandbox and waits until its agent is ready.
func create(ctx context.Context, rt *runtime.Runtime, dataDir string, spec Spec, log *slog.Logger) (_ *Sandbox, retErr error) {
	id := newID()
	bundle := filepath.Join(dataDir, "bundles", id)
	sb := &Sandbox{ID: id, Runtime: rt.Name(), rt: rt, bundle: bundle, cgroup: cgroupParent + "/" + id,
		Created: time.Now(), log: log.With("sandbox", id, "runtime", rt.Name())}
	defer func() {
		if retErr != nil {
			sb.Destroy(context.WithoutCancel(ctx))
		}
	}()
	if err := os.MkdirAll(bundle, 0o711); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	// The net dir is empty until the host opens this sandbox's egress gate.
	if err := os.Mkdir(sb.netDir(), 0o755); err != nil {
		return nil, fmt.Errorf("create net dir: %w", err)
	}
	opts := spec.Options
	opts.Hostname = "sandbox"
	opts.CgroupsPath = "/" + sb.cgroup
	opts.Mounts = append(append([]specs.Mount(nil), opts.Mounts...),
		specs.Mount{Destination: oci.NetDir, Type: "bind", Source: sb.netDir(), Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	opts.Args = []string{oci.AgentPath, "agent", "--preload", strings.Join(spec.Preload, ","),
		"--proxy-listen", oci.ProxyListen, "--proxy-socket", oci.ProxySocket}
	if rt.Name() == runtime.GVisor {
		opts.Args = append(opts.Args, "--gvisor")
	}
	s := oci.Build(opts)
	rt.Adjust(s)
	cfg, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		return nil, fmt.Errorf("write spec: %w", err)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	stderr, err := os.Create(filepath.Join(bundle, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	ctr, err := rt.Run(id, bundle, inR, outW, stderr)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	sb.ctr = ctr
	sb.client = agentclient.New(inW, outR)
	ready, err := sb.client.WaitReady(ctx)
	if err != nil {
		return nil, fmt.Errorf("start %s sandbox: %w%s", rt.Name(), err, sb.stderrTail())
	}
	sb.Ready = ready
	return sb, nil
}

// stderrTail is the end of what the runtime and agent printed, for errors.
func (sb *Sandbox) stderrTail() string {
	b, _ := os.ReadFile(filepath.Join(sb.bundle, "stderr.log"))
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// Destroy kills the container and removes everything it had on the host.
// It is safe to call more than once.
func (sb *Sandbox) Destroy(ctx context.Context) {
	sb.destroyed.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if sb.client != nil {
			// EOF on its stdin makes the agent exit, which ends the container
			// cleanly; delete --force is for one that does not.
			sb.client.Close()
			if sb.ctr != nil {
				select {
				case <-sb.ctr.Done():
				case <-time.After(2 * time.Second):
				}
			}
		}
		if err := sb.rt.Kill(ctx, sb.ID); err != nil {
			sb.log.Warn("kill sandbox", "err", err)
		}
		if sb.ctr != nil {
			select {
			case <-sb.ctr.Done():
			case <-ctx.Done():
				sb.log.Warn("sandbox runtime process did not exit")
			}
		}
		sb.CloseNetwork()
		removeCgroup(sb.cgroup)
		os.RemoveAll(sb.bundle)
		if sb.release != nil {
			sb.release()
		}
	})
}

// Exec runs one program and classifies how it ended.
func (sb *Sandbox) Exec(ctx context.Context, req *agent.ExecRequest, onOutput func(string, []byte)) (*Result, error) {
	sb.uses.Add(1)
	ooms := oomKills(sb.cgroup)
	res, err := sb.client.Exec(ctx, req, onOutput)
	if errors.Is(err, agentclient.ErrAgentGone) {
		// The run took the whole sandbox down: the agent died (gVisor lets a
		// process of the same uid kill init, and has no pids limit on guest
		// processes) or memory ran out and the runtime itself was killed. That is the run's outcome, not a server
		// fault; the pool replaces the sandbox.
		status, why := StatusKilled, "its init process died"
		if oomKills(sb.cgroup) > ooms {
			status, why = StatusOOM, "the sandbox ran out of memory"
		}
		return &Result{Status: status, ExecResult: agent.ExecResult{ExitCode: 137, Signal: "SIGKILL",
			Stderr: []byte("codecell: sandbox destroyed during the run: " + why + "\n")}}, nil
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
	}
	// Only a SIGKILL can be the OOM killer's; other runs skip the second read.
	oomKilled := res.Signal == "SIGKILL" && oomKills(sb.cgroup) > ooms
	return &Result{ExecResult: *res, Status: classify(res, oomKilled)}, nil
}

// File reads, writes, lists or deletes under the sandbox's /workspace.
func (sb *Sandbox) File(ctx context.Context, req *agent.FileRequest, onData func([]byte)) (*agent.FileResult, error) {
	res, err := sb.client.File(ctx, req, onData)
	if errors.Is(err, agentclient.ErrAgentGone) {
		return nil, fmt.Errorf("sandbox %s is gone: %w", sb.ID, errdefs.ErrUnavailable)
	}
	return res, err
}

// StartDisplay starts the sandbox's X server; later processes get DISPLAY.
func (sb *Sandbox) StartDisplay(ctx context.Context, screen string) (*agent.DisplayInfo, error) {
	return sb.client.StartDisplay(ctx, screen)
}

// Screenshot is a PNG of the sandbox's screen, or of a region of it.
func (sb *Sandbox) Screenshot(ctx context.Context, req *agent.ScreenshotRequest) ([]byte, error) {
	return sb.client.Screenshot(ctx, req)
}

// Input injects mouse and keyboard input into the sandbox's display.
func (sb *Sandbox) Input(ctx context.Context, req *agent.InputRequest) ([]byte, error) {
	return sb.client.Input(ctx, req)
}

// Processes counts what the sandbox's code started that still runs.
func (sb *Sandbox) Processes(ctx context.Context) (int, error) { return sb.client.Processes(ctx) }

// SetLimits changes the sandbox's memory (bytes), CPU (cores) and pids
// limits while it runs; a zero leaves that limit as it is.
func (sb *Sandbox) SetLimits(memoryBytes int64, cpus float64, pids int64) error {
	return setLimits(sb.cgroup, memoryBytes, cpus, pids)
}

// Scrub readies a stateless sandbox for its next run, or starts a session's
// next episode: every process but the agent's own killed (kernels included),
// files and IPC objects gone.
func (sb *Sandbox) Scrub(ctx context.Context) error { return sb.client.Scrub(ctx) }

// Alive reports whether the agent is still running.
func (sb *Sandbox) Alive() bool {
	select {
	case <-sb.client.Gone():
		return false
	default:
		return true
	}
}

// Run statuses, as the API reports them.
const (
	StatusOK      = "ok"
	StatusError   = "error"
	StatusTimeout = "timeout"
	StatusOOM     = "oom"
	StatusKilled  = "killed"
)

// Result is a finished run with its status.
type Result struct {
	agent.ExecResult
	Status  string
	Network *egress.Stats // the run's egress, when it had network access
}

func classify(r *agent.ExecResult, oomKilled bool) string {
	switch {
	case r.TimedOut:
		return StatusTimeout
	case r.Signal == "SIGKILL" && oomKilled:
		return StatusOOM
	case r.Signal != "":
		return StatusKilled
	case r.ExitCode != 0:
		return StatusError
	}
	return StatusOK
}
