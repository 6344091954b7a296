package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// exitInfo is what wait4 told about a finished process.
type exitInfo struct {
	status syscall.WaitStatus
	rusage syscall.Rusage
}

// reaper owns wait4(-1): as PID 1 the agent inherits every orphan, and only
// one place may wait, or exits would be stolen from each other.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan exitInfo
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan exitInfo{}}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			r.reapAll()
		}
	}()
	return r
}

// start spawns a process whose exit the caller will receive on the returned
// channel. The lock spans the spawn so the exit cannot be reaped before the
// waiter is registered.
func (r *reaper) start(argv0 string, argv []string, attr *os.ProcAttr) (*os.Process, <-chan exitInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(argv0, argv, attr)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan exitInfo, 1)
	r.waiters[p.Pid] = ch
	return p, ch, nil
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiters[pid]
		delete(r.waiters, pid)
		r.mu.Unlock()
		if ok {
			ch <- exitInfo{status: ws, rusage: ru}
		}
	}
}
