package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// drainGrace is how long output is still read after the run's main process
// exited, for a background child that still holds the pipe. Past it the run
// is reported; the scrub deals with the straggler.
const drainGrace = 50 * time.Millisecond

// capture reads one output stream, keeping the first limit bytes and
// draining (and counting) the rest so the writer never blocks on a full pipe.
type capture struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int
	truncated bool
	done      chan struct{}
}

func (c *capture) read(f *os.File, emit func([]byte)) {
	defer close(c.done)
	p := make([]byte, 32*1024)
	for {
		n, err := f.Read(p)
		c.add(p[:n], emit)
		if err != nil {
			return
		}
	}
}

// add keeps what fits under the limit of b, and passes that on to emit.
func (c *capture) add(b []byte, emit func([]byte)) {
	if len(b) == 0 {
		return
	}
	c.mu.Lock()
	keep := min(len(b), max(c.limit-c.buf.Len(), 0))
	c.buf.Write(b[:keep])
	if keep < len(b) {
		c.truncated = true
	}
	c.mu.Unlock()
	if emit != nil && keep > 0 {
		emit(append([]byte(nil), b[:keep]...))
	}
}

func (c *capture) result() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf.Bytes()...), c.truncated
}

// writeFiles places the request's files under /workspace, refusing paths
// that leave it.
func writeFiles(files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(workspace, name)
		if !strings.HasPrefix(p, workspace+"/") {
			return fmt.Errorf("file %q is outside /workspace", name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("file %q: %w", name, err)
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return fmt.Errorf("file %q: %w", name, err)
		}
	}
	return nil
}

func envList(base []string, extra map[string]string) []string {
	env := append([]string(nil), base...)
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// run executes one request and reports how it ended.
func (a *Agent) run(req *ExecRequest, emit func(stream string, data []byte)) (*ExecResult, error) {
	if req.Display != "" {
		if _, err := a.startDisplay(req.Display); err != nil {
			return nil, err
		}
	}
	if req.Kernel {
		return a.cell(req, emit)
	}
	if err := writeFiles(req.Files); err != nil {
		return nil, err
	}
	env := a.envFor(req)

	pipes, err := openPipes(3) // [stream][read, write]
	if err != nil {
		return nil, err
	}
	stdio := [3]*os.File{pipes[0][0], pipes[1][1], pipes[2][1]}

	start := time.Now()
	var pid int
	var exit <-chan exitInfo
	var reported <-chan exitInfo
	switch req.Language {
	case "python":
		if a.zygote == nil || !a.zygote.alive() {
			err = fmt.Errorf("python is not available in this sandbox")
			break
		}
		body, _ := json.Marshal(map[string]any{"code": req.Code, "env": envMap(env), "cwd": workspace, "allowed_imports": req.AllowedImports})
		var run *spawnedRun
		if run, err = a.zygote.run(stdio, body); err == nil {
			pid, exit, reported = run.pid, run.exit, readStatus(run.status)
		}
	case "bash":
		pid, exit, err = a.spawn("/bin/bash", []string{"bash", "-c", req.Code}, env, stdio[:])
	case "javascript":
		pid, exit, err = a.spawn(a.node, []string{"node", "-e", req.Code}, env, stdio[:])
	default:
		err = fmt.Errorf("unknown language %q", req.Language)
	}
	// Our copies of the child's ends must go, or EOF never comes.
	pipes[0][0].Close()
	pipes[1][1].Close()
	pipes[2][1].Close()
	if err != nil {
		pipes[0][1].Close()
		pipes[1][0].Close()
		pipes[2][0].Close()
		return nil, err
	}

	go func() {
		pipes[0][1].Write(req.Stdin)
		pipes[0][1].Close()
	}()
	var outs [2]*capture
	for i, name := range []string{"stdout", "stderr"} {
		c := &capture{limit: req.OutputCap, done: make(chan struct{})}
		outs[i] = c
		var fn func([]byte)
		if req.Stream {
			fn = func(b []byte) { emit(name, b) }
		}
		go c.read(pipes[i+1][0], fn)
	}

	dl := newDeadline(req)
	defer dl.stop()
	timedOut := false
	var info exitInfo
	select {
	case info = <-exit:
	case info = <-reported:
		a.noteExiting(exit)
	case <-dl.C:
		timedOut = !dl.cancelled
		syscall.Kill(-pid, syscall.SIGKILL)
		info = <-exit
	}
	duration := time.Since(start)
	// The run's group may have children still writing; they are killed with
	// the group once the main process is gone, then we read what is left.
	syscall.Kill(-pid, syscall.SIGKILL)
	deadline := time.Now().Add(drainGrace)
	for i, c := range outs {
		pipes[i+1][0].SetReadDeadline(deadline)
		<-c.done
		pipes[i+1][0].Close()
	}

	res := &ExecResult{TimedOut: timedOut, DurationMs: float64(duration.Microseconds()) / 1000}
	res.Stdout, res.StdoutTruncated = outs[0].result()
	res.Stderr, res.StderrTruncated = outs[1].result()
	ru := info.rusage
	res.CPUMs = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
	res.MaxRSSKB = ru.Maxrss
	switch ws := info.status; {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	}
	return res, nil
}

// deadline fires at a request's time-out, or earlier if the host cancels it.
type deadline struct {
	C         chan struct{}
	once      sync.Once
	timer     *time.Timer
	done      chan struct{}
	cancelled bool // set before C closes, when the cause was a cancel
}

func newDeadline(req *ExecRequest) *deadline {
	d := &deadline{C: make(chan struct{}), done: make(chan struct{})}
	d.timer = time.AfterFunc(time.Duration(req.TimeoutMs)*time.Millisecond, func() { d.fire(false) })
	if req.cancel != nil {
		go func() {
			select {
			case <-req.cancel:
				d.fire(true)
			case <-d.done:
			}
		}()
	}
	return d
}

func (d *deadline) fire(cancelled bool) {
	d.once.Do(func() {
		d.cancelled = cancelled
		close(d.C)
	})
}

func (d *deadline) stop() {
	d.timer.Stop()
	close(d.done)
}

// noteExiting remembers a run that reported its end but may not have been
// reaped yet, so the next scrub can wait for it instead of polling /proc.
// Runs already reaped are dropped here, for sandboxes that are not scrubbed.
func (a *Agent) noteExiting(exit <-chan exitInfo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	live := a.exiting[:0]
	for _, ch := range a.exiting {
		select {
		case <-ch:
		default:
			live = append(live, ch)
		}
	}
	a.exiting = append(live, exit)
}

// openPipes opens n pipes, each [read, write]; on failure none stays open.
func openPipes(n int) ([][2]*os.File, error) {
	pipes := make([][2]*os.File, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range pipes {
				p[0].Close()
				p[1].Close()
			}
			return nil, err
		}
		pipes = append(pipes, [2]*os.File{r, w})
	}
	return pipes, nil
}

// spawn starts a program directly under the agent, in its own session,
// with files as its fds 0, 1, 2, ...
func (a *Agent) spawn(path string, argv, env []string, files []*os.File) (int, <-chan exitInfo, error) {
	if path == "" {
		return 0, nil, fmt.Errorf("%s is not installed in this sandbox", argv[0])
	}
	p, exit, err := a.reaper.start(path, argv, &os.ProcAttr{
		Dir:   workspace,
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	// Under memory pressure the OOM killer should pick the run, not the agent.
	os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", p.Pid), []byte("1000"), 0)
	pid := p.Pid
	p.Release()
	return pid, exit, nil
}

// readStatus turns a Python run's own report of its end into an exitInfo.
// Nothing arrives if the run was killed before it could report; its exit
// then comes from the zygote's wait4.
func readStatus(f *os.File) <-chan exitInfo {
	ch := make(chan exitInfo, 1)
	go func() {
		defer f.Close()
		var st struct {
			Exit     int     `json:"exit"`
			CPUS     float64 `json:"cpu_s"`
			MaxRSSKB int64   `json:"maxrss_kb"`
		}
		b, err := io.ReadAll(f)
		if err != nil || len(b) == 0 || json.Unmarshal(b, &st) != nil {
			return
		}
		ch <- exitInfo{status: syscall.WaitStatus(st.Exit&0xff) << 8, rusage: rusage(st.CPUS, st.MaxRSSKB)}
	}()
	return ch
}
