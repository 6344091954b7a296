package server

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/session"
)

// defaultScreen is the display of a stateless run that asks for one.
const defaultScreen = "1280x800x24"

// Languages the sandboxes run.
var languages = []string{"python", "bash", "javascript"}

// ExecuteRequest is the body of POST /v1/execute.
type ExecuteRequest struct {
	Language string            `json:"language"`
	Code     *string           `json:"code"`
	Stdin    string            `json:"stdin"`
	TimeoutS *float64          `json:"timeout_s"`
	Files    map[string]string `json:"files"`
	Env      map[string]string `json:"env"`
	Runtime  string            `json:"runtime"`
	Display  bool              `json:"display"`
	Provisioning
}

// Provisioning are the request fields that say what a sandbox is made
// with and may reach, shared by runs and sessions.
type Provisioning struct {
	Template       string           `json:"template"`
	Packages       packages.Request `json:"packages"`
	Network        *NetworkRequest  `json:"network"`
	AllowedImports []string         `json:"allowed_imports"`
}

// NetworkRequest is a sandbox's egress allow-list.
type NetworkRequest struct {
	Allow []string `json:"allow"`
}

// ExecuteResponse is how a run ended.
type ExecuteResponse struct {
	Status     string  `json:"status"`
	ExitCode   int     `json:"exit_code"`
	Signal     *string `json:"signal"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	Truncated  bool    `json:"truncated"`
	DurationMs float64 `json:"duration_ms"`
	CPUMs      float64 `json:"cpu_ms"`
	MaxRSSKB   int64   `json:"max_rss_kb"`

	Packages *session.PackagesInfo `json:"packages,omitempty"`
	Network  *egress.Stats         `json:"network,omitempty"`
}

func invalid(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalid)...)
}

// checkLanguage defaults an empty language to python.
func checkLanguage(lang string) (string, error) {
	if lang == "" {
		return "python", nil
	}
	for _, l := range languages {
		if lang == l {
			return lang, nil
		}
	}
	return "", invalid("unknown language %q; supported: %s", lang, strings.Join(languages, ", "))
}

// timeout turns a requested time-out in seconds into a duration within the
// server's bounds.
func (s *Server) timeout(seconds *float64, field string) (time.Duration, error) {
	if seconds == nil {
		return s.cfg.Timeout, nil
	}
	v := *seconds
	if math.IsNaN(v) || v <= 0 {
		return 0, invalid("%s must be a positive number of seconds, got %g", field, v)
	}
	if max := s.cfg.MaxTimeout.Seconds(); v > max {
		return 0, invalid("%s %g exceeds the server's maximum of %g seconds", field, v, max)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// toAgent validates a request and turns it into what the agent runs.
func (s *Server) toAgent(req *ExecuteRequest) (*agent.ExecRequest, error) {
	lang, err := checkLanguage(req.Language)
	if err != nil {
		return nil, err
	}
	if req.Code == nil {
		return nil, invalid(`field "code" is required`)
	}
	timeout, err := s.timeout(req.TimeoutS, "timeout_s")
	if err != nil {
		return nil, err
	}
	out := &agent.ExecRequest{Language: lang, Code: *req.Code, Stdin: []byte(req.Stdin), Env: req.Env,
		TimeoutMs: timeout.Milliseconds(), OutputCap: s.cfg.OutputCap}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	if req.Display {
		out.Display = defaultScreen
	}
	if len(req.Files) > 0 {
		out.Files = make(map[string][]byte, len(req.Files))
		names := make([]string, 0, len(req.Files))
		for name := range req.Files {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if err := checkRelPath(name); err != nil {
				return nil, err
			}
			b, err := base64.StdEncoding.DecodeString(req.Files[name])
			if err != nil {
				return nil, invalid("files[%q] is not valid base64: %v", name, err)
			}
			out.Files[name] = b
		}
	}
	return out, nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return invalid("env %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
	}
	return nil
}

// checkRelPath accepts a path relative to /workspace that stays inside it.
func checkRelPath(name string) error {
	clean := path.Clean(name)
	if name == "" || strings.ContainsRune(name, 0) || path.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return invalid("file name %q must be a relative path inside /workspace", name)
	}
	return nil
}

// target checks what a request asks its sandbox to be made with, a
// template's settings filling what the request leaves out.
func (s *Server) target(runtime string, p Provisioning) (sandbox.Target, error) {
	t := sandbox.Target{Runtime: runtime, Template: p.Template, Allowed: p.AllowedImports}
	var allow []string
	if p.Network != nil {
		allow = p.Network.Allow
	}
	if p.Template != "" {
		tpl, err := s.mgr.Template(p.Template)
		if err != nil {
			return t, err
		}
		if t.Allowed == nil {
			t.Allowed = tpl.AllowedImports
		}
		if p.Network == nil && tpl.Network != nil {
			allow = tpl.Network.Allow
			p.Network = &NetworkRequest{}
		}
	}
	if p.Network != nil {
		policy, err := egress.Parse(allow)
		if err != nil {
			return t, err
		}
		t.Network = policy
	}
	if err := checkImports(t.Allowed); err != nil {
		return t, err
	}
	plan, err := s.mgr.Resolve(p.Packages)
	if err != nil {
		return t, err
	}
	t.Packages = plan
	return t, nil
}

// checkImports accepts module names for allowed_imports.
func checkImports(names []string) error {
	for _, n := range names {
		if !config.IsModuleName(n) {
			return invalid("allowed_imports entry %q is not a Python module name", n)
		}
	}
	return nil
}

// packagesInfo reports a request's packages, nil if it asked for none.
func packagesInfo(req packages.Request, plan packages.Plan, placed sandbox.Placed) *session.PackagesInfo {
	if req.Empty() {
		return nil
	}
	return &session.PackagesInfo{Plan: plan, Layers: append([]sandbox.LayerUse{}, placed.Layers...)}
}

func toResponse(res *sandbox.Result) ExecuteResponse {
	out := ExecuteResponse{Status: res.Status, ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr),
		Truncated: res.StdoutTruncated || res.StderrTruncated, DurationMs: res.DurationMs, CPUMs: res.CPUMs, MaxRSSKB: res.MaxRSSKB,
		Network: res.Network}
	if res.Signal != "" {
		sig := res.Signal
		out.Signal = &sig
	}
	return out
}

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var req ExecuteRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, err)
		return
	}
	areq, err := s.toAgent(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	t, err := s.target(req.Runtime, req.Provisioning)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Template != "" && !req.Display {
		if tpl, _ := s.mgr.Template(req.Template); tpl.Display { // its runs see its screen
			areq.Display = cmp.Or(tpl.Screen, defaultScreen)
		}
	}
	res, placed, err := s.mgr.Execute(r.Context(), t, areq, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	out := toResponse(res)
	out.Packages = packagesInfo(req.Packages, t.Packages, placed)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleListLayers(w http.ResponseWriter, r *http.Request) {
	layers := s.mgr.Layers()
	if layers == nil {
		layers = []packages.LayerInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"layers": layers})
}

func (s *Server) handleDeleteLayer(w http.ResponseWriter, r *http.Request) {
	if err := s.mgr.DeleteLayer(r.PathValue("key")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
