// Package server is codecell's HTTP face: our own /v1 API, the peers'
// protocols on the same port (NeMo Agent Toolkit's /execute), JSON errors
// everywhere, and the mapping of error classes to statuses.
package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"context"
	"github.com/codecell/codecell/api"
	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/session"
)

// Executor runs code; *sandbox.Manager is the real one.
type Executor interface {
	Execute(ctx context.Context, t sandbox.Target, req *agent.ExecRequest, onOutput func(string, []byte)) (*sandbox.Result, sandbox.Placed, error)
	Resolve(req packages.Request) (packages.Plan, error)
	Template(name string) (config.Template, error)
	Layers() []packages.LayerInfo
	DeleteLayer(key string) error
	ExecuteShared(ctx context.Context, name, runtime string, req *agent.ExecRequest, onOutput func(string, []byte)) (*sandbox.Result, error)
	Stats() map[string]sandbox.Stats
}

var _ Executor = (*sandbox.Manager)(nil)

// Server serves the HTTP API.
type Server struct {
	cfg      config.Config
	mgr      Executor
	sessions *session.Manager
	openenv  openEnvDefault
	log      *slog.Logger
	mux      *http.ServeMux
}

// Route is one registered endpoint; the list is checked against the OpenAPI
// document so nothing is served that is not documented.
type Route struct {
	Method, Path string
	handler      http.HandlerFunc
}

// New returns a server for mgr's stateless runs and sessions' stateful ones.
func New(cfg config.Config, mgr Executor, sessions *session.Manager, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, mgr: mgr, sessions: sessions, log: log, mux: http.NewServeMux()}
	for _, rt := range s.Routes() {
		s.mux.HandleFunc(rt.Method+" "+rt.Path, rt.handler)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErrorCode(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s; see /openapi.yaml", r.Method, r.URL.Path))
	})
	return s
}

// Routes lists every endpoint.
func (s *Server) Routes() []Route {
	return []Route{
		{"GET", "/healthz", s.handleHealthz},
		{"GET", "/openapi.yaml", s.handleOpenAPI},
		{"POST", "/v1/execute", s.handleExecute},
		{"POST", "/execute", s.handleNemoExecute},
		{"POST", "/exec", s.handlePythonSandboxExec},
		{"POST", "/reset", s.handleOpenEnvReset},
		{"POST", "/step", s.handleOpenEnvStep},
		{"GET", "/state", s.handleOpenEnvState},
		{"GET", "/health", s.handleOpenEnvHealth},
		{"GET", "/schema", s.handleOpenEnvSchema},
		{"GET", "/metadata", s.handleOpenEnvMetadata},
		{"GET", "/ws", s.handleOpenEnvWS},
		{"POST", "/v1/sandboxes", s.handleCreateSandbox},
		{"GET", "/v1/sandboxes", s.handleListSandboxes},
		{"GET", "/v1/sandboxes/{id}", s.handleGetSandbox},
		{"DELETE", "/v1/sandboxes/{id}", s.handleDeleteSandbox},
		{"POST", "/v1/sandboxes/{id}/exec", s.handleSandboxExec},
		{"POST", "/v1/sandboxes/{id}/exec/stream", s.handleSandboxExecStream},
		{"POST", "/v1/sandboxes/{id}/reset", s.handleResetSandbox},
		{"GET", "/v1/sandboxes/{id}/screenshot", s.handleScreenshot},
		{"POST", "/v1/sandboxes/{id}/input", s.handleInput},
		{"GET", "/v1/sandboxes/{id}/view", s.handleView},
		{"GET", "/ui/sandboxes/{id}", s.handleViewPage},
		{"GET", "/v1/sandboxes/{id}/files", s.handleGetFile},
		{"PUT", "/v1/sandboxes/{id}/files", s.handlePutFile},
		{"DELETE", "/v1/sandboxes/{id}/files", s.handleDeleteFile},
		{"GET", "/v1/layers", s.handleListLayers},
		{"DELETE", "/v1/layers/{key}", s.handleDeleteLayer},
	}
}

// ServeHTTP logs, and turns a panic into a JSON 500 instead of a dropped connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic in handler", "op", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			writeErrorCode(w, http.StatusInternalServerError, "internal", "internal error; the server logged the details")
		}
		s.log.Debug("request", "op", r.Method+" "+r.URL.Path, "ms", time.Since(start).Milliseconds())
	}()
	s.mux.ServeHTTP(w, r)
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	stats := s.mgr.Stats()
	def, ok := stats[s.cfg.Runtime]
	if !ok || !def.Ready {
		msg := fmt.Sprintf("no %s sandbox is up yet", s.cfg.Runtime)
		if def.Error != "" {
			msg += ": " + def.Error
		}
		writeErrorCode(w, http.StatusServiceUnavailable, "starting", msg)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "pools": stats})
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Write(api.OpenAPI)
}
