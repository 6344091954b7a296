package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const workspace = "/workspace"

// Agent serves one sandbox.
type Agent struct {
	env    []string
	node   string
	reaper *reaper
	zygote *zygote

	outMu sync.Mutex
	out   *json.Encoder

	mu      sync.Mutex
	exiting []<-chan exitInfo // runs that reported their end and are being reaped

	ipc ipcCleaner

	kmu     sync.Mutex // held while a cell runs
	kernels kernels

	cancels map[uint64]chan struct{} // running execs, by request ID; under mu
	display *display                 // the X server, once started; under mu
}

// Run serves requests from in until it reaches EOF.
func Run(in io.Reader, out io.Writer, opts Options) error {
	// Nothing in the sandbox may ptrace us or write our memory, even with our uid.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The agent only waits and copies; one P spares a busy pool the threads
	// that would otherwise spin looking for work after every wake-up.
	runtime.GOMAXPROCS(1)
	// As PID 1 we only get the signals we handle. Handling (not ignoring) them
	// keeps the runs we start at default dispositions.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM)

	if f, ok := in.(*os.File); ok {
		in = pollable(f)
	}
	if f, ok := out.(*os.File); ok {
		out = pollable(f)
	}
	bw := bufio.NewWriterSize(out, 64*1024)
	a := &Agent{env: os.Environ(), reaper: newReaper(), out: json.NewEncoder(bw), ipc: ipcCleaner{byID: opts.GVisor}, cancels: map[uint64]chan struct{}{}}
	flush := func() { bw.Flush() }
	a.node, _ = exec.LookPath("node")
	if opts.ProxyListen != "" {
		if err := serveProxy(opts.ProxyListen, opts.ProxySocket); err != nil {
			fmt.Fprintf(os.Stderr, "agent: %v\n", err)
		}
	}

	ready := Ready{}
	if python, err := exec.LookPath("python3"); err == nil {
		z, err := startZygote(a.reaper, python, opts.Preload, a.env)
		if err != nil {
			fmt.Fprintf(os.Stderr, "agent: %v\n", err)
		} else if err := z.prefork(); err != nil {
			fmt.Fprintf(os.Stderr, "agent: zygote prefork: %v\n", err)
		} else {
			a.zygote = z
			ready = z.ready
		}
	}
	a.send(Event{Type: EvReady, Ready: &ready}, flush)

	dec := json.NewDecoder(bufio.NewReaderSize(in, 256*1024))
	for {
		var req Request
		if err := dec.Decode(&req); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("read request: %w", err)
		}
		go a.handle(req, flush)
	}
}

// pollable moves a pipe the runtime handed us (blocking) onto Go's poller,
// so waiting for the host does not park a thread in read(2) and keep the
// scheduler's monitor polling every 20µs; across a pool of busy sandboxes
// those wake-ups cost more CPU than the runs.
func pollable(f *os.File) *os.File {
	if syscall.SetNonblock(int(f.Fd()), true) != nil {
		return f
	}
	return os.NewFile(f.Fd(), f.Name())
}

func (a *Agent) send(ev Event, flush func()) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.Encode(ev)
	flush()
}

func (a *Agent) handle(req Request, flush func()) {
	reply := func(ev Event) {
		ev.ID = req.ID
		a.send(ev, flush)
	}
	switch req.Op {
	case OpExec:
		if req.Exec == nil {
			reply(Event{Type: EvError, Error: "exec without body"})
			return
		}
		cancel := make(chan struct{})
		a.mu.Lock()
		a.cancels[req.ID] = cancel
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			delete(a.cancels, req.ID)
			a.mu.Unlock()
		}()
		req.Exec.cancel = cancel
		res, err := a.run(req.Exec, func(stream string, data []byte) {
			reply(Event{Type: EvOutput, Stream: stream, Data: data})
		})
		if err != nil {
			reply(Event{Type: EvError, Error: err.Error()})
			return
		}
		reply(Event{Type: EvResult, Result: res})
	case OpFile:
		if req.File == nil {
			reply(Event{Type: EvError, Error: "file without body"})
			return
		}
		res, err := a.files(req.File, func(b []byte) { reply(Event{Type: EvOutput, Stream: "data", Data: b}) })
		var fe *requestError
		if errors.As(err, &fe) {
			reply(Event{Type: EvError, Error: fe.msg, Code: fe.code})
			return
		}
		if err != nil {
			reply(Event{Type: EvError, Error: err.Error()})
			return
		}
		reply(Event{Type: EvResult, File: res})
	case OpCancel:
		a.mu.Lock()
		if ch, ok := a.cancels[req.Target]; ok {
			close(ch)
			delete(a.cancels, req.Target)
		}
		a.mu.Unlock()
	case OpDisplay, OpScreenshot, OpInput:
		var ev Event
		var err error
		if req.Op == OpDisplay && req.Display != nil {
			ev.Display, err = a.startDisplay(req.Display.Screen)
		} else if req.Op == OpScreenshot && req.Screenshot != nil {
			ev.Data, err = a.screenshot(req.Screenshot)
		} else if req.Op == OpInput && req.Input != nil {
			ev.Data, err = a.input(req.Input)
		} else {
			err = fmt.Errorf("%s without body", req.Op)
		}
		var re *requestError
		switch {
		case errors.As(err, &re):
			reply(Event{Type: EvError, Error: re.msg, Code: re.code})
		case err != nil:
			reply(Event{Type: EvError, Error: err.Error()})
		default:
			ev.Type = EvDone
			reply(ev)
		}
	case OpProcesses:
		reply(Event{Type: EvDone, Count: a.userProcesses()})
	case OpScrub:
		if err := a.scrub(); err != nil {
			reply(Event{Type: EvError, Error: err.Error()})
			return
		}
		reply(Event{Type: EvDone})
	default:
		reply(Event{Type: EvError, Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
}
