package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/runtime"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/server"
	"github.com/codecell/codecell/internal/session"
)

// Serve is `codecell serve`: the HTTP server until ctx is cancelled.
func Serve(ctx context.Context, args []string, env Env) error {
	cfg, _, err := loadConfig("serve", args, env, nil)
	if err != nil {
		return err
	}
	log := newLogger(env.Stderr, cfg.LogLevel)
	mgr, err := sandbox.NewManager(ctx, cfg, map[string]int{runtime.Runc: cfg.PoolSize, runtime.GVisor: cfg.GVisorPool}, log)
	if err != nil {
		return err
	}
	defer mgr.Close()
	sessions := newSessions(cfg, mgr, log)
	defer sessions.Close() // before the pools: sessions hold sandboxes of their own
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: server.New(cfg, mgr, sessions, log), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "runtimes", mgr.Runtimes(), "data_dir", cfg.DataDir)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func newSessions(cfg config.Config, mgr *sandbox.Manager, log *slog.Logger) *session.Manager {
	return session.NewManager(mgr, session.Limits{
		MaxSessions:        cfg.MaxSessions,
		DefaultIdleTimeout: cfg.SessionIdleTimeout,
		MaxIdleTimeout:     cfg.SessionMaxLifetime,
		DefaultLifetime:    cfg.SessionMaxLifetime,
		MaxLifetime:        cfg.SessionMaxLifetime,
		Defaults:           session.Options{Runtime: cfg.Runtime, MemoryMB: cfg.MemoryMB, CPUs: cfg.CPUs, PIDs: cfg.Pids},
	}, log)
}
