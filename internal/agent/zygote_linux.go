package agent

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

//go:embed zygote.py
var zygoteSource string

// zygote is the agent's handle on the Python process that forks runs.
type zygote struct {
	proc  *os.Process
	exit  <-chan exitInfo
	sock  int // our end of the SOCK_SEQPACKET pair
	ready Ready

	spawnMu sync.Mutex // one fork request in flight: "started" answers match requests in order
	mu      sync.Mutex
	started chan spawned
	waiters map[int]chan exitInfo
	dead    chan struct{}
}

// spawned is a run the zygote forked, with where its exit will arrive.
type spawned struct {
	pid  int
	exit <-chan exitInfo
}

type zygoteMsg struct {
	Type     string            `json:"type"`
	Pid      int               `json:"pid"`
	Status   int               `json:"status"`
	MaxRSSKB int64             `json:"maxrss_kb"`
	CPUS     float64           `json:"cpu_s"`
	Python   string            `json:"python"`
	Loaded   []string          `json:"loaded"`
	Failed   map[string]string `json:"failed"`
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
	args := append([]string{python, "-c", zygoteSource}, preload...)
	proc, exit, err := r.start(python, args, &os.ProcAttr{
		Dir:   "/workspace",
		Env:   env,
		Files: []*os.File{devnull, devnull, os.Stderr, theirs},
	})
	if err != nil {
		syscall.Close(fds[0])
		return nil, fmt.Errorf("start zygote: %w", err)
	}
	z := &zygote{proc: proc, exit: exit, sock: fds[0], started: make(chan spawned), waiters: map[int]chan exitInfo{}, dead: make(chan struct{})}
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
	n, _, _, _, err := syscall.Recvmsg(z.sock, buf, nil, 0)
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
			return
		}
		switch m.Type {
		case "started":
			ch := make(chan exitInfo, 1)
			z.mu.Lock()
			z.waiters[m.Pid] = ch
			z.mu.Unlock()
			z.started <- spawned{pid: m.Pid, exit: ch}
		case "exit":
			z.mu.Lock()
			ch, ok := z.waiters[m.Pid]
			delete(z.waiters, m.Pid)
			z.mu.Unlock()
			if ok {
				ru := syscall.Rusage{Maxrss: m.MaxRSSKB}
				usec := int64(m.CPUS * 1e6)
				ru.Utime = syscall.NsecToTimeval(usec * 1000)
				ch <- exitInfo{status: syscall.WaitStatus(m.Status), rusage: ru}
			}
		}
	}
}

// fork asks the zygote for a run with the given stdio; req is written to the
// child through a pipe so code of any size fits.
func (z *zygote) fork(stdio [3]*os.File, req []byte) (int, <-chan exitInfo, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer rd.Close()
	go func() {
		wr.Write(req)
		wr.Close()
	}()
	z.spawnMu.Lock()
	defer z.spawnMu.Unlock()
	rights := syscall.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()), int(rd.Fd()))
	if err := syscall.Sendmsg(z.sock, []byte("{}"), rights, nil, 0); err != nil {
		return 0, nil, fmt.Errorf("send to zygote: %w", err)
	}
	select {
	case s := <-z.started:
		return s.pid, s.exit, nil
	case <-z.dead:
		return 0, nil, errors.New("python zygote died")
	}
}

func (z *zygote) alive() bool {
	select {
	case <-z.dead:
		return false
	default:
		return true
	}
}
