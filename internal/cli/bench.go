package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/codecell/codecell/internal/bench"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/runtime"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/server"
)

// Bench is `codecell bench`: starts a server in this process (or uses --url)
// and measures it beside plain python3 subprocesses.
func Bench(ctx context.Context, args []string, env Env) error {
	var url, runtimes, python string
	var n int
	cfg, _, err := loadConfig("bench", args, env, func(fs *flag.FlagSet) {
		fs.StringVar(&url, "url", "", "measure a running server instead of starting one")
		fs.StringVar(&runtimes, "runtimes", "runc,gvisor", "runtimes to measure")
		fs.StringVar(&python, "python", "/usr/bin/python3", "interpreter for the subprocess baseline")
		fs.IntVar(&n, "n", 300, "runs per scenario")
	})
	if err != nil {
		return err
	}
	rts := config.SplitList(runtimes)
	if url == "" {
		sizes := map[string]int{}
		for _, rt := range rts {
			sizes[rt] = cfg.PoolSize
		}
		if sizes[runtime.GVisor] > 0 {
			sizes[runtime.GVisor] = max(cfg.GVisorPool, 1)
		}
		cfg.Runtime = rts[0]
		mgr, err := sandbox.NewManager(ctx, cfg, sizes, newLogger(env.Stderr, "warn"))
		if err != nil {
			return err
		}
		defer mgr.Close()
		fmt.Fprintf(env.Stdout, "starting pools %v ...\n", sizes)
		if err := mgr.WaitReady(ctx); err != nil {
			return err
		}
		// Let every pool fill completely so the first scenario is not measuring start-up.
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			full := true
			for rt, st := range mgr.Stats() {
				full = full && st.Idle == sizes[rt]
			}
			if full {
				break
			}
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		sessions := newSessions(cfg, mgr, newLogger(env.Stderr, "warn"))
		defer sessions.Close()
		srv := &http.Server{Handler: server.New(cfg, mgr, sessions, newLogger(env.Stderr, "warn"))}
		go srv.Serve(ln)
		defer srv.Close()
		url = "http://" + ln.Addr().String()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
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
		if err := bench.RunSessions(ctx, bench.SessionConfig{URL: url, Runtime: rt, Client: client, Python: python,
			Preload: cfg.Preload, N: n, Out: env.Stdout}); err != nil {
			return err
		}
	}
	return nil
}
