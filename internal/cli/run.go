package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/sandbox"
)

// Run is `codecell run`: one snippet in a fresh sandbox, no server. It
// returns the snippet's exit code.
func Run(ctx context.Context, args []string, env Env) (int, error) {
	var lang, code, rt string
	cfg, fs, err := loadConfig("run", args, env, func(fs *flag.FlagSet) {
		fs.StringVar(&lang, "lang", "python", "language: python, bash or javascript")
		fs.StringVar(&code, "c", "", "code to run (instead of FILE)")
		fs.StringVar(&rt, "rt", "", "runtime for this run (runc or gvisor); default: --runtime")
	})
	if err != nil {
		return 0, err
	}
	if rt == "" {
		rt = cfg.Runtime
	}
	switch {
	case code != "" && fs.NArg() > 0:
		return 0, usageErrorf("give either -c CODE or FILE, not both")
	case code == "" && fs.NArg() == 0:
		return 0, usageErrorf("nothing to run: give -c CODE, a FILE, or - for standard input")
	case fs.NArg() > 1:
		return 0, usageErrorf("one FILE at a time (got %d)", fs.NArg())
	case fs.NArg() == 1:
		var b []byte
		if fs.Arg(0) == "-" {
			b, err = io.ReadAll(env.Stdin)
		} else {
			b, err = os.ReadFile(fs.Arg(0))
		}
		if err != nil {
			return 0, err
		}
		code = string(b)
	}
	// A one-off run gains nothing from preloading: it would only add start-up time.
	cfg.Preload = nil
	log := newLogger(env.Stderr, "warn")
	m, err := sandbox.NewManager(ctx, cfg, map[string]int{rt: 1}, log)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	res, _, err := m.Execute(ctx, sandbox.Target{Runtime: rt}, &agent.ExecRequest{
		Language: lang, Code: code, TimeoutMs: cfg.Timeout.Milliseconds(), OutputCap: cfg.OutputCap,
	}, nil)
	if err != nil {
		return 0, err
	}
	env.Stdout.Write(res.Stdout)
	env.Stderr.Write(res.Stderr)
	if res.StdoutTruncated || res.StderrTruncated {
		fmt.Fprintf(env.Stderr, "codecell: output cut at %d bytes per stream\n", cfg.OutputCap)
	}
	if res.Status != sandbox.StatusOK && res.Status != sandbox.StatusError {
		fmt.Fprintf(env.Stderr, "codecell: run ended with status %s\n", res.Status)
	}
	return res.ExitCode, nil
}
