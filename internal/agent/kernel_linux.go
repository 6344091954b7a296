package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// interruptGrace is how long a timed-out cell has to stop after SIGINT
// before its kernel is killed and started afresh.
const interruptGrace = 2 * time.Second

// kernels are a session's persistent interpreters, one per language, started
// on the first cell and ended by a scrub (the session's reset) or by dying.
type kernels struct {
	python *pyKernel
	stream map[string]*streamKernel // bash and javascript
}

// pyKernel is a child of the zygote that serves cells over its socket.
type pyKernel struct {
	pid  int
	conn *net.UnixConn
	exit <-chan exitInfo
}

// streamKernel is a shell or node reading cells from its stdin. Each cell's
// output ends with a marker on stdout and on stderr, and its outcome is one
// line on fd 3.
type streamKernel struct {
	lang           string
	pid            int
	stdin          *os.File
	stdout, stderr *os.File
	status         *bufio.Reader
	statusFile     *os.File
	exit           <-chan exitInfo
}

func (k *streamKernel) close() {
	for _, f := range []*os.File{k.stdin, k.stdout, k.stderr, k.statusFile} {
		f.Close()
	}
}

// forget drops the kernels; a scrub has killed (or is about to kill) them.
func (k *kernels) forget() {
	if k.python != nil {
		k.python.conn.Close()
	}
	for _, sk := range k.stream {
		sk.close()
	}
	*k = kernels{}
}

// cell runs one exec in the language's kernel.
func (a *Agent) cell(req *ExecRequest, emit func(stream string, data []byte)) (*ExecResult, error) {
	a.kmu.Lock() // one cell at a time per sandbox, as in a notebook
	defer a.kmu.Unlock()
	var rec *recorder
	if req.Record {
		a.mu.Lock()
		if a.display != nil {
			rec = startRecording(a.display, cmp.Or(req.RecordFPS, 5))
		}
		a.mu.Unlock()
	}
	var res *ExecResult
	var err error
	switch req.Language {
	case "python":
		res, err = a.pythonCell(req, emit) // which settles and may capture early itself
	case "bash", "javascript":
		if res, err = a.streamCell(req, emit); err == nil && req.CaptureScreenshot {
			time.Sleep(time.Duration(cmp.Or(req.SettleMs, 300)) * time.Millisecond)
		}
	default:
		return nil, fmt.Errorf("no %s kernel in this sandbox (sessions have python, bash and javascript)", req.Language)
	}
	if err == nil && req.CaptureScreenshot && res.Screenshot == nil {
		res.Screenshot, _ = a.screenshot(&ScreenshotRequest{}) // none without a display
	}
	if rec != nil {
		recording := rec.finish()
		if err == nil {
			res.Recording = recording
		}
	}
	return res, err
}

func (a *Agent) pythonKernel() (*pyKernel, error) {
	if a.kernels.python != nil {
		return a.kernels.python, nil
	}
	if a.zygote == nil || !a.zygote.alive() {
		return nil, errors.New("python is not available in this sandbox")
	}
	sp, exit := a.zygote.takeSpare()
	if sp == nil {
		if err := a.zygote.prefork(); err != nil {
			return nil, err
		}
		if sp, exit = a.zygote.takeSpare(); sp == nil {
			return nil, errors.New("the zygote has no child to make a kernel of")
		}
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		sp.conn.Close()
		return nil, err
	}
	_, _, err = sp.conn.WriteMsgUnix([]byte("kernel"), syscall.UnixRights(fds[1]), nil)
	syscall.Close(fds[1])
	sp.conn.Close()
	if err != nil {
		syscall.Close(fds[0])
		return nil, fmt.Errorf("start python kernel: %w", err)
	}
	conn, err := unixConn(fds[0])
	if err != nil {
		return nil, err
	}
	a.kernels.python = &pyKernel{pid: sp.pid, conn: conn, exit: exit}
	go a.zygote.prefork() // the next reset or restart finds a child ready
	return a.kernels.python, nil
}

func (a *Agent) pythonCell(req *ExecRequest, emit func(string, []byte)) (*ExecResult, error) {
	k, err := a.pythonKernel()
	if err != nil {
		return nil, err
	}
	var p cellPipes
	if err := p.open(); err != nil {
		return nil, err
	}
	defer p.close()
	_, _, err = k.conn.WriteMsgUnix([]byte("cell"), syscall.UnixRights(int(p.outW.Fd()), int(p.errW.Fd()), int(p.reqR.Fd()), int(p.resW.Fd())), nil)
	p.closeChildEnds()
	if err != nil {
		a.kernels.python = nil
		k.conn.Close()
		return &ExecResult{ExitCode: 1, KernelRestarted: true, Stderr: []byte("codecell: the python kernel had died; its state is lost\n")}, nil
	}
	settle := cmp.Or(req.SettleMs, 300)
	body, _ := json.Marshal(map[string]any{"code": req.Code, "env": envMap(a.envFor(req)),
		"capture_screenshot": req.CaptureScreenshot, "settle_ms": settle, "allowed_imports": req.AllowedImports})
	// While the cell runs, the kernel may ask for the screen before the code
	// destroys its windows.
	var early []byte
	captureDone := make(chan struct{})
	if req.CaptureScreenshot {
		go func() {
			defer close(captureDone)
			buf := make([]byte, 16)
			for {
				n, err := k.conn.Read(buf)
				if err != nil {
					return
				}
				if string(buf[:n]) == "capture" {
					early, _ = a.screenshot(&ScreenshotRequest{})
					k.conn.Write([]byte("ok"))
				}
			}
		}()
	} else {
		close(captureDone)
	}
	go func() {
		p.reqW.Write(body)
		p.reqW.Close()
	}()
	outs := p.capture(req, emit)
	resCh := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(p.resR)
		resCh <- b
	}()

	start := time.Now()
	res := &ExecResult{}
	var reply []byte
	note := "" // what codecell adds to stderr
	dl := newDeadline(req)
	defer dl.stop()
	select {
	case reply = <-resCh:
	case <-dl.C:
		res.TimedOut = !dl.cancelled
		syscall.Kill(k.pid, syscall.SIGINT)
		select {
		case reply = <-resCh:
			res.Interrupted = true
		case <-time.After(interruptGrace):
		}
	}
	if len(reply) == 0 {
		// The kernel died in the cell (os._exit, a signal, the OOM killer) or
		// ignored the interrupt: it is killed with all it started.
		syscall.Kill(-k.pid, syscall.SIGKILL)
		info := <-k.exit
		a.kernels.python = nil
		k.conn.Close()
		res.KernelRestarted, res.Interrupted = true, false
		res.ExitCode, res.Signal = exitStatus(info.status)
		res.CPUMs, res.MaxRSSKB = float64(info.rusage.Utime.Nano())/1e6, info.rusage.Maxrss
		note = "codecell: the python kernel died; it was restarted and its state is lost\n"
		if res.TimedOut {
			note = fmt.Sprintf("codecell: the cell did not stop within %s of its interrupt; the kernel was restarted and its state is lost\n", interruptGrace)
		}
	}
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if req.CaptureScreenshot {
		k.conn.SetReadDeadline(time.Now()) // ends the capture listener
		<-captureDone
		k.conn.SetReadDeadline(time.Time{})
	}
	outs.finish(res)
	res.Stderr = append(res.Stderr, note...)
	if len(reply) > 0 {
		var cr struct {
			Value    string     `json:"value"`
			Outputs  []Output   `json:"outputs"`
			Error    *CellError `json:"error"`
			CPUS     float64    `json:"cpu_s"`
			MaxRSSKB int64      `json:"maxrss_kb"`
			Syntax   bool       `json:"syntax_error"`
			Early    bool       `json:"captured_before_teardown"`
		}
		if err := json.Unmarshal(reply, &cr); err != nil {
			return nil, fmt.Errorf("python kernel answered %q: %w", reply, err)
		}
		res.Value, res.Outputs, res.Error = cr.Value, cr.Outputs, cr.Error
		res.CPUMs, res.MaxRSSKB, res.SyntaxError = cr.CPUS*1000, cr.MaxRSSKB, cr.Syntax
		if cr.Early {
			res.Screenshot = early
		}
		if cr.Error != nil {
			res.ExitCode = 1
			if cr.Error.Traceback != "" {
				res.Stderr = append(res.Stderr, cr.Error.Traceback...)
			}
		}
	}
	return res, nil
}

// bashCellFile holds the code of the cell being run; bash sources it.
const bashCellFile = "/dev/shm/.codecell/cell.sh"

//go:embed kernel.js
var nodeKernelSource string

// streamKernel returns the running kernel of the language, or starts it.
func (a *Agent) streamKernel(lang string, env []string) (*streamKernel, error) {
	if k := a.kernels.stream[lang]; k != nil {
		return k, nil
	}
	var path string
	var argv []string
	init := ""
	switch lang {
	case "bash":
		path, argv = "/bin/bash", []string{"bash", "--noprofile", "--norc"}
		// `return` in the INT trap ends the sourced cell, as Ctrl-C ends a
		// command line; the shell itself lives on.
		init = "shopt -s expand_aliases; trap 'return 130 2>/dev/null' INT\n"
	case "javascript":
		// --expose-internals gives the kernel the REPL's top-level await transform.
		path, argv = a.node, []string{"node", "--expose-internals", "-e", nodeKernelSource}
	}
	ends, err := openPipes(4) // stdin, stdout, stderr, status: [read, write]
	if err != nil {
		return nil, err
	}
	pid, exit, err := a.spawn(path, argv, env, []*os.File{ends[0][0], ends[1][1], ends[2][1], ends[3][1]})
	ends[0][0].Close()
	ends[1][1].Close()
	ends[2][1].Close()
	ends[3][1].Close()
	if err != nil {
		ends[0][1].Close()
		ends[1][0].Close()
		ends[2][0].Close()
		ends[3][0].Close()
		return nil, fmt.Errorf("start %s kernel: %w", lang, err)
	}
	k := &streamKernel{lang: lang, pid: pid, stdin: ends[0][1], stdout: ends[1][0], stderr: ends[2][0],
		status: bufio.NewReader(ends[3][0]), statusFile: ends[3][0], exit: exit}
	if _, err := k.stdin.WriteString(init); err != nil {
		k.close()
		return nil, err
	}
	if a.kernels.stream == nil {
		a.kernels.stream = map[string]*streamKernel{}
	}
	a.kernels.stream[lang] = k
	return k, nil
}

// cellInput is what the kernel reads for one cell.
func cellInput(lang, code, marker string) (string, error) {
	if lang == "javascript" {
		b, err := json.Marshal(map[string]string{"code": code, "marker": marker})
		return string(b) + "\n", err
	}
	if err := os.MkdirAll(filepath.Dir(bashCellFile), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(bashCellFile, []byte(code), 0o600); err != nil {
		return "", err
	}
	// printf's %b turns the marker's \0s back into NULs.
	m := strings.ReplaceAll(marker, "\x00", `\0`)
	return fmt.Sprintf("source %s </dev/null; __cc=$?; printf '%%b' '%s'; printf '%%b' '%s' >&2; printf '%%d\\n' $__cc >&3\n",
		bashCellFile, m, m), nil
}

// parseOutcome reads a cell's status line into res.
func parseOutcome(lang, line string, res *ExecResult) error {
	if lang == "bash" {
		n, err := strconv.Atoi(strings.TrimSpace(line))
		res.ExitCode = n
		return err
	}
	var out struct {
		Value string     `json:"value"`
		Error *CellError `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &out); err != nil {
		return err
	}
	res.Value, res.Error = out.Value, out.Error
	if out.Error != nil {
		res.ExitCode = 1
	}
	return nil
}

func (a *Agent) streamCell(req *ExecRequest, emit func(string, []byte)) (*ExecResult, error) {
	k, err := a.streamKernel(req.Language, a.envFor(req))
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 8)
	rand.Read(nonce)
	marker := "\x00codecell-" + hex.EncodeToString(nonce) + "\x00"
	input, err := cellInput(req.Language, req.Code, marker)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := k.stdin.WriteString(input); err != nil {
		a.dropStream(k)
		return &ExecResult{ExitCode: 1, KernelRestarted: true, Stderr: []byte("codecell: the " + k.lang + " kernel had died; its state is lost\n")}, nil
	}
	outs := [2]*capture{{limit: req.OutputCap, done: make(chan struct{})}, {limit: req.OutputCap, done: make(chan struct{})}}
	for i, f := range []*os.File{k.stdout, k.stderr} {
		var fn func([]byte)
		if req.Stream {
			name := [2]string{"stdout", "stderr"}[i]
			fn = func(b []byte) { emit(name, b) }
		}
		go outs[i].readUntil(f, marker, fn)
	}
	statusCh := make(chan string, 1)
	go func() {
		if line, err := k.status.ReadString('\n'); err == nil {
			statusCh <- line
		}
	}()

	res := &ExecResult{}
	cpu0 := procCPU(k.pid)
	dl := newDeadline(req)
	defer dl.stop()
	restart := false
	var line string
	select {
	case line = <-statusCh:
	case info := <-k.exit: // `exit` in a shell, process.exit in node, or killed
		res.ExitCode, res.Signal = exitStatus(info.status)
		restart = true
	case <-dl.C:
		res.TimedOut = !dl.cancelled
		syscall.Kill(-k.pid, syscall.SIGINT)
		select {
		case line = <-statusCh:
			res.Interrupted = true
		case <-time.After(interruptGrace):
			syscall.Kill(-k.pid, syscall.SIGKILL)
			info := <-k.exit
			res.ExitCode, res.Signal = exitStatus(info.status)
			restart = true
		}
	}
	if !restart {
		if err := parseOutcome(k.lang, line, res); err != nil {
			return nil, fmt.Errorf("%s kernel answered %q: %w", k.lang, line, err)
		}
	}
	res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if restart {
		// What the kernel wrote before it ended is still to be read; with it
		// and its group gone, the streams end.
		syscall.Kill(-k.pid, syscall.SIGKILL)
		for _, f := range []*os.File{k.stdout, k.stderr} {
			f.SetReadDeadline(time.Now().Add(drainGrace))
		}
		res.KernelRestarted = true
	} else {
		res.CPUMs = procCPU(k.pid) - cpu0
	}
	for _, c := range outs {
		<-c.done
	}
	if restart {
		a.dropStream(k)
	}
	res.Stdout, res.StdoutTruncated = outs[0].result()
	res.Stderr, res.StderrTruncated = outs[1].result()
	if restart && res.TimedOut {
		res.Stderr = append(res.Stderr, fmt.Sprintf("codecell: the cell did not stop within %s of its interrupt; the %s kernel was restarted and its state is lost\n", interruptGrace, k.lang)...)
	}
	return res, nil
}

func (a *Agent) dropStream(k *streamKernel) {
	if a.kernels.stream[k.lang] == k {
		delete(a.kernels.stream, k.lang)
	}
	k.close()
}

// readUntil reads one stream of a bash cell up to its end marker. Output a
// background process writes after the marker is left for the next cell.
func (c *capture) readUntil(f *os.File, marker string, emit func([]byte)) {
	defer close(c.done)
	var pending []byte // read but not yet known to be before the marker
	p := make([]byte, 32*1024)
	for {
		n, err := f.Read(p)
		pending = append(pending, p[:n]...)
		end := bytes.Index(pending, []byte(marker))
		keep := pending // at the end of the stream, everything
		switch {
		case end >= 0:
			keep = pending[:end]
		case err != nil:
		case len(pending) >= len(marker):
			keep = pending[:len(pending)-len(marker)+1] // a marker may straddle reads
		default:
			keep = nil
		}
		c.add(keep, emit)
		pending = pending[len(keep):]
		if end >= 0 || err != nil {
			return
		}
	}
}

func exitStatus(ws syscall.WaitStatus) (int, string) {
	switch {
	case ws.Exited():
		return ws.ExitStatus(), ""
	case ws.Signaled():
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return -1, ""
}

// cellPipes are a Python cell's fds: its output streams, its request and its
// result.
type cellPipes struct {
	outR, outW, errR, errW, reqR, reqW, resR, resW *os.File
}

func (p *cellPipes) open() error {
	ps, err := openPipes(4)
	if err != nil {
		return err
	}
	p.outR, p.outW, p.errR, p.errW = ps[0][0], ps[0][1], ps[1][0], ps[1][1]
	p.reqR, p.reqW, p.resR, p.resW = ps[2][0], ps[2][1], ps[3][0], ps[3][1]
	return nil
}

// closeChildEnds drops our copies of the ends the kernel now holds.
func (p *cellPipes) closeChildEnds() {
	for _, f := range []*os.File{p.outW, p.errW, p.reqR, p.resW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *cellPipes) close() {
	for _, f := range []*os.File{p.outR, p.outW, p.errR, p.errW, p.reqR, p.reqW, p.resR, p.resW} {
		if f != nil {
			f.Close()
		}
	}
}

// cellOutput collects a cell's stdout and stderr.
type cellOutput struct {
	outs  [2]*capture
	files [2]*os.File
}

func (p *cellPipes) capture(req *ExecRequest, emit func(string, []byte)) *cellOutput {
	o := &cellOutput{files: [2]*os.File{p.outR, p.errR}}
	for i, name := range []string{"stdout", "stderr"} {
		c := &capture{limit: req.OutputCap, done: make(chan struct{})}
		o.outs[i] = c
		var fn func([]byte)
		if req.Stream {
			fn = func(b []byte) { emit(name, b) }
		}
		go c.read(o.files[i], fn)
	}
	return o
}

// finish waits for the streams to end (a process the cell left running may
// hold them open: it gets drainGrace) and stores them in res.
func (o *cellOutput) finish(res *ExecResult) {
	deadline := time.Now().Add(drainGrace)
	for i, c := range o.outs {
		o.files[i].SetReadDeadline(deadline)
		<-c.done
	}
	res.Stdout, res.StdoutTruncated = o.outs[0].result()
	res.Stderr, res.StderrTruncated = o.outs[1].result()
}

// pids lists the kernels' processes.
func (k *kernels) pids() []int {
	var pids []int
	if k.python != nil {
		pids = append(pids, k.python.pid)
	}
	for _, sk := range k.stream {
		pids = append(pids, sk.pid)
	}
	return pids
}

// userProcesses counts processes other than the agent, the zygote, its
// spare and the kernels.
func (a *Agent) userProcesses() int {
	skip := map[int]bool{os.Getpid(): true}
	if a.zygote != nil {
		for _, pid := range a.zygote.keep() {
			skip[pid] = true
		}
	}
	a.kmu.Lock()
	for _, pid := range a.kernels.pids() {
		skip[pid] = true
	}
	a.kmu.Unlock()
	a.mu.Lock()
	if a.display != nil {
		skip[a.display.pid] = true
	}
	a.mu.Unlock()
	n := 0
	for _, pid := range livePids() {
		if !skip[pid] && !zombie(pid) {
			n++
		}
	}
	return n
}

// zombie reports a process that has exited and waits to be reaped (say, by
// a kernel that never waits for what it started).
func zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	// The state follows the parenthesised command name, which may hold ") ".
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// procCPU is the CPU time, in ms, of a process and the children it has
// waited for, from /proc (clock ticks: 10 ms steps).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		if i < len(f) {
			v, _ := strconv.ParseFloat(f[i], 64)
			ticks += v
		}
	}
	return ticks * 10 // USER_HZ is 100 on every Linux ABI
}
