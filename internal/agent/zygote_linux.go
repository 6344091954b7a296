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
	spare   int // pid of the pre-forked child, 0 if none
	dead    chan struct{}
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
}

func startZygote(r *reaper, python string, preload []string, env []string) (*zygote, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "zygote-sock")
	defer theirs.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	ours := os.NewFile(uintptr(fds[0]), "zygote-sock")
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("zygote socket: %w", err)
	}
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
	z := &zygote{proc: proc, sock: conn.(*net.UnixConn), replies: make(chan zygoteMsg), waiters: map[int]chan exitInfo{}, dead: make(chan struct{})}
	msg, err := z.recv()
	if err != nil || msg.Type != "ready" {
		proc.Kill()
		return nil, fmt.Errorf("zygote did not become ready: %v", err)
	}
	z.ready = Ready{Python: msg.Python, Loaded: msg.Loaded, Failed: msg.Failed, ZygoteUp: true}
	go z.readLoop()
	return z, nil
}

func (z *zygote) recv() (zygoteMsg, error) {
	buf := make([]byte, 65536)
	n, err := z.sock.Read(buf)
	if err != nil {
		return zygoteMsg{}, err
	}
	if n == 0 {
		return zygoteMsg{}, errors.New("zygote closed its socket")
	}
	var m zygoteMsg
	err = json.Unmarshal(buf[:n], &m)
	return m, err
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
			ch := make(chan exitInfo, 1)
			z.mu.Lock()
			z.waiters[m.Pid] = ch
			if z.spare == m.Pid {
				z.spare = 0
			}
			z.mu.Unlock()
			m.exit = ch
			z.replies <- m
		case "spare":
			z.mu.Lock()
			z.spare = m.Pid
			z.mu.Unlock()
			z.replies <- m
		case "exit":
			z.mu.Lock()
			ch, ok := z.waiters[m.Pid]
			delete(z.waiters, m.Pid)
			if z.spare == m.Pid {
				z.spare = 0
			}
			z.mu.Unlock()
			if ok {
				ch <- exitInfo{status: syscall.WaitStatus(m.Status), rusage: rusage(m.CPUS, m.MaxRSSKB)}
			}
		}
	}
}

func rusage(cpuS float64, maxRSSKB int64) syscall.Rusage {
	return syscall.Rusage{Utime: syscall.NsecToTimeval(int64(cpuS * 1e9)), Maxrss: maxRSSKB}
}

// request sends one op with fds and waits for its reply.
func (z *zygote) request(op string, fds []int) (zygoteMsg, error) {
	z.reqMu.Lock()
	defer z.reqMu.Unlock()
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
func (z *zygote) prefork() error {
	_, err := z.request("prefork", nil)
	return err
}

// spawnedRun is a Python run in progress.
type spawnedRun struct {
	pid    int
	exit   <-chan exitInfo
	status *os.File // the run's own report of its end; EOF without one if it was killed
}

// run hands a run its stdio; req is written to the child through a pipe so
// code of any size fits.
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
	m, err := z.request("run", []int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()), int(reqR.Fd()), int(statusW.Fd())})
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
	if z.spare != 0 {
		return []int{z.proc.Pid, z.spare}
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
