// Command codecell is the sandbox server, its in-sandbox agent, and the tools
// around them, in one binary: `codecell serve|run|doctor|bench|agent`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/cli"
	"github.com/codecell/codecell/internal/config"
)

const usage = `codecell runs untrusted code in isolated sandboxes (runc or gVisor).

Usage:
  codecell serve  [flags]                      start the HTTP server
  codecell run    [flags] (-c CODE | FILE | -)  run one snippet in a fresh sandbox
  codecell doctor                              check this host and say what is missing
  codecell bench  [flags]                      measure latency and throughput
  codecell agent  [flags]                      (inside a sandbox) serve the host

Run "codecell COMMAND -h" for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	if cmd == "agent" {
		return runAgent(rest, stdin, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := cli.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	var err error
	switch cmd {
	case "serve":
		err = cli.Serve(ctx, rest, env)
	case "run":
		var code int
		code, err = cli.Run(ctx, rest, env)
		if err == nil {
			return code
		}
	case "doctor":
		err = cli.Doctor(ctx, rest, env)
	case "bench":
		err = cli.Bench(ctx, rest, env)
	default:
		fmt.Fprintf(stderr, "codecell: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ue cli.UsageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "codecell %s: %v\n", cmd, err)
			return 2
		}
		fmt.Fprintf(stderr, "codecell %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func runAgent(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	preload := fs.String("preload", "", "comma-separated Python modules to import in the zygote")
	gvisor := fs.Bool("gvisor", false, "the sandbox runs under gVisor")
	proxyListen := fs.String("proxy-listen", "", "loopback address to serve the egress proxy on")
	proxySocket := fs.String("proxy-socket", "", "unix socket of the host's egress proxy")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := agent.Run(stdin, stdout, agent.Options{Preload: config.SplitList(*preload), GVisor: *gvisor,
		ProxyListen: *proxyListen, ProxySocket: *proxySocket}); err != nil {
		slog.New(slog.NewTextHandler(stderr, nil)).Error("agent", "err", err)
		return 1
	}
	return 0
}
