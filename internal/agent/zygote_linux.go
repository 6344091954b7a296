package agent

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

//go:embed zygote.py
var zygoteSource string

// zygote is the agent's handle on the Python process that forks runs.
type zygote struct {
	proc  *os.Process
	sock  *net.UnixConn // our end of the SOCK_SEQPACKET pair, on Go's poller
	ready Ready

	reqMu   sync.Mutex     // one request in flight: replies match requests in order
	replies chan zygoteMsg // "started" and "spare" answers
	mu      sync.Mutex
	waiters map[int]chan exitInfo
	spare   *spare // the pre-forked child, nil if none
	dead    chan struct{}
}

// spare is a child forked ahead of need, waiting on its own socket for the
// fds of its run.
type spare struct {
	pid  int
	conn *net.UnixConn
}

type zygoteMsg struct {
	Type     string            `json:"type"`
	Pid      int               `json:"pid"`
	Status   int               `json:"status"`
	Exit     int               `json:"exit"`
	MaxRSSKB int64             `json:"maxrss_kb"`
	CPUS     float64           `json:"cpu_s"`
	Python   string            `json:"python"`
	Loaded   []string          `json:"loaded"`
	Failed   map[string]string `json:"failed"`
	exit     <-chan exitInfo
	fds      []int // passed along with the message
}

func startZygote(r *reaper, python string, preload []string, env []string) (*zygote, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "zygote-sock")
	defer theirs.Close()
	conn, err := unixConn(fds[0])
	if err != nil {
		return nil, fmt.Errorf("zygote socket: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		conn.Close()
		return nil, err
	}
	defer devnull.Close()
	args := append([]string{python, "-c", zygoteSource}, preload...)
	proc, _, err := r.start(python, args, &os.ProcAttr{
		Dir:   workspace,
		Env:   env,
		Files: []*os.File{devnull, devnull, os.Stderr, theirs},
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start zygote: %w", err)
	}
	z := &zygote{proc: proc, sock: conn, replies: make(chan zygoteMsg), waiters: map[int]chan exitInfo{}, dead: make(chan struct{})}
	msg, err := z.recv()
	if err != nil || msg.Type != "ready" {
		proc.Kill()
		return nil, fmt.Errorf("zygote did not become ready: %v", err)
	}
	z.ready = Ready{Python: msg.Python, Loaded: msg.Loaded, Failed: msg.Failed, ZygoteUp: true}
	go z.readLoop()
	return z, nil
}

// unixConn puts a socket fd on Go's poller (the fd is taken over).
func unixConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "unix")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

func (z *zygote) recv() (zygoteMsg, error) {
	buf := make([]byte, 65536)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := z.sock.ReadMsgUnix(buf, oob)
	if err != nil {
		return zygoteMsg{}, err
	}
	if n == 0 {
		return zygoteMsg{}, errors.New("zygote closed its socket")
	}
	var m zygoteMsg
	if cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, c := range cmsgs {
			fds, _ := syscall.ParseUnixRights(&c)
			m.fds = append(m.fds, fds...)
		}
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeFds(m.fds)
		return zygoteMsg{}, err
	}
	return m, nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

func (z *zygote) readLoop() {
	defer close(z.dead)
	for {
		m, err := z.recv()
		if err != nil {
			fmt.Fprintf(os.Stderr, "agent: zygote connection: %v\n", err)
			return
		}
		switch m.Type {
		case "started":
			// Registered here, before the next message (possibly its exit) is read.
			m.exit = z.await(m.Pid)
			z.replies <- m
		case "spare":
			if len(m.fds) != 1 {
				closeFds(m.fds)
				fmt.Fprintf(os.Stderr, "agent: zygote sent a spare without its socket\n")
				continue
			}
			conn, err := unixConn(m.fds[0])
			if err != nil {
				fmt.Fprintf(os.Stderr, "agent: spare socket: %v\n", err)
				continue
			}
			z.mu.Lock()
			z.spare = &spare{pid: m.Pid, conn: conn}
			z.mu.Unlock()
			z.replies <- m
		case "exit":
			z.mu.Lock()
			ch, ok := z.waiters[m.Pid]
			delete(z.waiters, m.Pid)
			if z.spare != nil && z.spare.pid == m.Pid {
				z.spare.conn.Close()
				z.spare = nil
			}
			z.mu.Unlock()
			if ok {
				ch <- exitInfo{status: syscall.WaitStatus(m.Status), rusage: rusage(m.CPUS, m.MaxRSSKB)}
			}
		}
	}
}

// await registers for the exit of one of the zygote's children.
func (z *zygote) await(pid int) <-chan exitInfo {
	ch := make(chan exitInfo, 1)
	z.mu.Lock()
	z.waiters[pid] = ch
	z.mu.Unlock()
	return ch
}

func rusage(cpuS float64, maxRSSKB int64) syscall.Rusage {
	return syscall.Rusage{Utime: syscall.NsecToTimeval(int64(cpuS * 1e9)), Maxrss: maxRSSKB}
}

// request sends one op with fds and waits for its reply.
func (z *zygote) request(op string, fds []int) (zygoteMsg, error) {
	z.reqMu.Lock()
	defer z.reqMu.Unlock()
	return z.requestLocked(op, fds)
}

func (z *zygote) requestLocked(op string, fds []int) (zygoteMsg, error) {
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	if _, _, err := z.sock.WriteMsgUnix([]byte(`{"op":"`+op+`"}`), oob, nil); err != nil {
		return zygoteMsg{}, fmt.Errorf("send to zygote: %w", err)
	}
	select {
	case m := <-z.replies:
		return m, nil
	case <-z.dead:
		return zygoteMsg{}, errors.New("python zygote died")
	}
}

// prefork has the zygote fork the next run's process ahead of need.
// Checked under reqMu, so two callers at once make one spare, not two.
func (z *zygote) prefork() error {
	z.reqMu.Lock()
	defer z.reqMu.Unlock()
	z.mu.Lock()
	have := z.spare != nil
	z.mu.Unlock()
	if have {
		return nil
	}
	_, err := z.requestLocked("prefork", nil)
	return err
}

// takeSpare claims the spare for a run, registered for its exit first.
func (z *zygote) takeSpare() (*spare, <-chan exitInfo) {
	z.mu.Lock()
	defer z.mu.Unlock()
	sp := z.spare
	if sp == nil {
		return nil, nil
	}
	z.spare = nil
	ch := make(chan exitInfo, 1)
	z.waiters[sp.pid] = ch
	return sp, ch
}

// spawnedRun is a Python run in progress.
type spawnedRun struct {
	pid    int
	exit   <-chan exitInfo
	status *os.File // the run's own report of its end; EOF without one if it was killed
}

// run hands a run its stdio; req is written to the child through a pipe so
// code of any size fits. The spare gets the fds straight from us; only
// without one does the zygote fork on the spot.
func (z *zygote) run(stdio [3]*os.File, req []byte) (*spawnedRun, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer reqR.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		reqW.Close()
		return nil, err
	}
	defer statusW.Close()
	go func() {
		reqW.Write(req)
		reqW.Close()
	}()
	fds := []int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()), int(reqR.Fd()), int(statusW.Fd())}
	if sp, exit := z.takeSpare(); sp != nil {
		_, _, err := sp.conn.WriteMsgUnix([]byte("run"), syscall.UnixRights(fds...), nil)
		sp.conn.Close()
		if err == nil {
			return &spawnedRun{pid: sp.pid, exit: exit, status: statusR}, nil
		}
		// The spare died under us (its exit is on the way); fork instead.
	}
	m, err := z.request("run", fds)
	if err != nil {
		statusR.Close()
		return nil, err
	}
	return &spawnedRun{pid: m.Pid, exit: m.exit, status: statusR}, nil
}

// keep lists the zygote's processes a scrub must spare.
func (z *zygote) keep() []int {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.spare != nil {
		return []int{z.proc.Pid, z.spare.pid}
	}
	return []int{z.proc.Pid}
}

func (z *zygote) alive() bool {
	select {
	case <-z.dead:
		return false
	default:
		return true
	}
}
