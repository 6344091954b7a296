package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/codecell/codecell/internal/bench"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/localindex"
	"github.com/codecell/codecell/internal/runtime"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/server"
)

// Bench is `codecell bench`: starts a server in this process (or uses --url)
// and measures it beside plain python3 subprocesses.
func Bench(ctx context.Context, args []string, env Env) error {
	var url, runtimes, python string
	var n, idle, pkgs int
	cfg, _, err := loadConfig("bench", args, env, func(fs *flag.FlagSet) {
		fs.StringVar(&url, "url", "", "measure a running server instead of starting one")
		fs.StringVar(&runtimes, "runtimes", "runc,gvisor", "runtimes to measure")
		fs.StringVar(&python, "python", "/usr/bin/python3", "interpreter for the subprocess baseline")
		fs.IntVar(&n, "n", 300, "runs per scenario")
		fs.IntVar(&idle, "idle-sessions", 0, "instead of latency, measure the memory of this many idle sessions (runc), with and without preloads")
		fs.IntVar(&pkgs, "packages", 0, "instead of latency, measure session create with this many new packages from a local index, first time and second time")
	})
	if err != nil {
		return err
	}
	rts := config.SplitList(runtimes)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Minute}
	if idle > 0 {
		return benchIdleMemory(ctx, cfg, idle, client, env)
	}
	if pkgs > 0 {
		return benchPackages(ctx, cfg, pkgs, python, client, env)
	}
	if url == "" {
		sizes := map[string]int{}
		for _, rt := range rts {
			sizes[rt] = cfg.PoolSize
		}
		if sizes[runtime.GVisor] > 0 {
			sizes[runtime.GVisor] = max(cfg.GVisorPool, 1)
		}
		cfg.Runtime = rts[0]
		srvURL, _, stop, err := benchServer(ctx, cfg, sizes, env)
		if err != nil {
			return err
		}
		defer stop()
		url = srvURL
	}
	var runners []bench.HTTPRunner
	for _, rt := range rts {
		runners = append(runners, bench.HTTPRunner{URL: url, Runtime: rt, Client: client})
	}
	fmt.Fprintf(env.Stdout, "codecell bench: %d runs per scenario, pool size %d (runc), %s\n", n, cfg.PoolSize, time.Now().Format(time.RFC3339))
	err = bench.Run(ctx, bench.Config{Runners: runners, Python: python, N: n, Out: env.Stdout, Scenarios: []bench.Scenario{
		{Name: "print(1)", Code: "print(1)", Concurrency: 1},
		{Name: "print(1)", Code: "print(1)", Concurrency: 8},
		{Name: "numpy version", Code: "import numpy; print(numpy.__version__)", Concurrency: 1},
		{Name: "numpy version", Code: "import numpy; print(numpy.__version__)", Concurrency: 8},
	}})
	if err != nil {
		return err
	}
	for _, rt := range rts {
		sc := bench.SessionConfig{URL: url, Runtime: rt, Client: client, Python: python, Preload: cfg.Preload, N: n, Out: env.Stdout}
		if err := bench.RunSessions(ctx, sc); err != nil {
			return err
		}
		if err := bench.RunDisplay(ctx, sc); err != nil {
			return err
		}
	}
	return nil
}

// benchServer starts pools of the given sizes, waits until they are full
// (so nothing measures start-up) and serves them on a loopback port.
func benchServer(ctx context.Context, cfg config.Config, sizes map[string]int, env Env) (url string, full func() bool, stop func(), err error) {
	log := newLogger(env.Stderr, "warn")
	mgr, err := sandbox.NewManager(ctx, cfg, sizes, log)
	if err != nil {
		return "", nil, nil, err
	}
	full = func() bool {
		ok := true
		for rt, st := range mgr.Stats() {
			ok = ok && st.Idle == sizes[rt]
		}
		return ok
	}
	fmt.Fprintf(env.Stdout, "starting pools %v ...\n", sizes)
	for deadline := time.Now().Add(3 * time.Minute); !full() && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		mgr.Close()
		return "", nil, nil, err
	}
	sessions := newSessions(cfg, mgr, log)
	srv := &http.Server{Handler: server.New(cfg, mgr, sessions, log)}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), full, func() {
		srv.Close()
		sessions.Close()
		mgr.Close()
	}, nil
}

// benchPackages serves pkgs small wheels from a local index and measures
// session creates that need them.
func benchPackages(ctx context.Context, cfg config.Config, pkgs int, python string, client *http.Client, env Env) error {
	var wheels []localindex.Wheel
	var names []string
	for i := range pkgs {
		name := fmt.Sprintf("benchpkg%d", i)
		names = append(names, name)
		wheels = append(wheels, localindex.Wheel{Name: name, Version: "1.0",
			Files: map[string]string{name + "/__init__.py": strings.Repeat("# padding\n", 10000)}})
	}
	idx, err := localindex.Start(wheels, nil)
	if err != nil {
		return err
	}
	defer idx.Close()
	cfg.PipIndexURL = idx.PipIndex()
	cfg.Runtime = runtime.Runc
	url, _, stop, err := benchServer(ctx, cfg, map[string]int{runtime.Runc: cfg.PoolSize}, env)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(env.Stdout, "codecell bench: %d packages (100 kB wheels from a loopback index), %s\n", pkgs, time.Now().Format(time.RFC3339))
	return bench.RunPackages(ctx, bench.SessionConfig{URL: url, Runtime: runtime.Runc, Client: client, Python: python, Out: env.Stdout}, idx.PipIndex(), names)
}

// benchIdleMemory measures the memory per idle session, with the configured
// preloads and with none.
func benchIdleMemory(ctx context.Context, cfg config.Config, n int, client *http.Client, env Env) error {
	cfg.MaxSessions = n
	cfg.Runtime = runtime.Runc
	for _, preload := range [][]string{cfg.Preload, nil} {
		cfg.Preload = preload
		url, full, stop, err := benchServer(ctx, cfg, map[string]int{runtime.Runc: cfg.PoolSize}, env)
		if err != nil {
			return err
		}
		mib, err := bench.IdleMemory(ctx, bench.SessionConfig{URL: url, Runtime: runtime.Runc, Client: client}, n, sandbox.MemoryInUse, full)
		stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%d idle sessions, preload %q: %.1f MiB per session (cgroup memory)\n", n, strings.Join(preload, ","), mib)
	}
	return nil
}
