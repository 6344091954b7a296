package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/session"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes; every field is
// optional.
type CreateSandboxRequest struct {
	Runtime      string            `json:"runtime"`
	MemoryMB     int64             `json:"memory_mb"`
	CPUs         float64           `json:"cpus"`
	PIDs         int64             `json:"pids"`
	IdleTimeoutS float64           `json:"idle_timeout_s"`
	MaxLifetimeS float64           `json:"max_lifetime_s"`
	Env          map[string]string `json:"env"`
	Display      bool              `json:"display"`
	Screen       string            `json:"screen"`
	MaxEpisodes  int               `json:"max_episodes"`
	Provisioning
}

// SandboxExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type SandboxExecRequest struct {
	Language          string   `json:"language"`
	Code              *string  `json:"code"`
	TimeoutS          *float64 `json:"timeout_s"`
	CaptureScreenshot bool     `json:"capture_screenshot"`
	SettleMs          *int     `json:"settle_ms"`
	Record            bool     `json:"record"`
	RecordFPS         int      `json:"record_fps"`
}

// SandboxExecResponse is one step's outcome: the stateless fields plus what a
// kernel adds.
type SandboxExecResponse struct {
	ExecuteResponse
	Value           *string          `json:"value"`
	Outputs         []agent.Output   `json:"outputs"`
	Error           *agent.CellError `json:"error"`
	Interrupted     bool             `json:"interrupted"`
	KernelRestarted bool             `json:"kernel_restarted"`
	Screenshot      []byte           `json:"screenshot"` // base64 PNG; null unless asked for, with a display
	Recording       []byte           `json:"recording"`  // base64 animated PNG; null unless asked for, with a display
	EpisodeID       string           `json:"episode_id"`
	StepCount       int              `json:"step_count"`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (s *Server) handleCreateSandbox(w http.ResponseWriter, r *http.Request) {
	var req CreateSandboxRequest
	if body, err := readBody(w, r, s.cfg.MaxBodyBytes); err != nil {
		writeError(w, err)
		return
	} else if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	if err := checkEnv(req.Env); err != nil {
		writeError(w, err)
		return
	}
	opts := session.Options{Runtime: req.Runtime, MemoryMB: req.MemoryMB,
		CPUs: req.CPUs, PIDs: req.PIDs, IdleTimeout: seconds(req.IdleTimeoutS), MaxLifetime: seconds(req.MaxLifetimeS),
		MaxEpisodes: req.MaxEpisodes, Env: req.Env, Display: req.Display, Screen: req.Screen,
		Template: req.Template, Packages: req.Packages, AllowedImports: req.AllowedImports}
	if req.Network != nil {
		p, err := egress.Parse(req.Network.Allow)
		if err != nil {
			writeError(w, err)
			return
		}
		opts.Network = p
	}
	if err := checkImports(req.AllowedImports); err != nil {
		writeError(w, err)
		return
	}
	info, err := s.sessions.Create(r.Context(), opts)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (s *Server) handleListSandboxes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": s.sessions.List()})
}

func (s *Server) handleGetSandbox(w http.ResponseWriter, r *http.Request) {
	info, err := s.sessions.Get(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) handleDeleteSandbox(w http.ResponseWriter, r *http.Request) {
	if err := s.sessions.Delete(r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleResetSandbox(w http.ResponseWriter, r *http.Request) {
	info, err := s.sessions.Reset(r.Context(), r.PathValue("id"), "", nil)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// decodeSandboxExec reads an exec request, or answers the error.
func (s *Server) decodeSandboxExec(w http.ResponseWriter, r *http.Request) (*agent.ExecRequest, bool) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	var req SandboxExecRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, err)
		return nil, false
	}
	areq, err := s.toAgent(&ExecuteRequest{Language: req.Language, Code: req.Code, TimeoutS: req.TimeoutS})
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	areq.CaptureScreenshot = req.CaptureScreenshot
	if req.RecordFPS < 0 || req.RecordFPS > 30 {
		writeError(w, invalid("record_fps %d: must be between 1 and 30 (0: the default, 5)", req.RecordFPS))
		return nil, false
	}
	areq.Record, areq.RecordFPS = req.Record, req.RecordFPS
	if req.SettleMs != nil {
		if *req.SettleMs < 0 || *req.SettleMs > 10000 {
			writeError(w, invalid("settle_ms %d: must be between 0 and 10000", *req.SettleMs))
			return nil, false
		}
		areq.SettleMs = max(*req.SettleMs, 1) // 0 would mean the default
	}
	return areq, true
}

func toSandboxResponse(res *sandbox.Result, info session.Info) SandboxExecResponse {
	out := SandboxExecResponse{ExecuteResponse: toResponse(res), Outputs: res.Outputs, Error: res.Error,
		Interrupted: res.Interrupted, KernelRestarted: res.KernelRestarted, Screenshot: res.Screenshot, Recording: res.Recording,
		EpisodeID: info.EpisodeID, StepCount: info.StepCount}
	if out.Outputs == nil {
		out.Outputs = []agent.Output{}
	}
	if res.Value != "" {
		out.Value = &res.Value
	}
	return out
}

func (s *Server) handleSandboxExec(w http.ResponseWriter, r *http.Request) {
	areq, ok := s.decodeSandboxExec(w, r)
	if !ok {
		return
	}
	res, info, err := s.sessions.Exec(r.Context(), r.PathValue("id"), areq, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toSandboxResponse(res, info))
}

// handleSandboxExecStream runs a step like /exec, answering Server-Sent
// Events: "stdout" and "stderr" ({"data"}) as the code writes, then one
// "result" (the /exec answer) or "error" ({"error": {"code", "message"}}).
// A client that goes away cancels the step; a kernel is interrupted, not
// restarted, so the session keeps its state.
func (s *Server) handleSandboxExecStream(w http.ResponseWriter, r *http.Request) {
	areq, ok := s.decodeSandboxExec(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id); err != nil {
		writeError(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	event := func(name string, data any) {
		b, _ := json.Marshal(data)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("start", map[string]string{"sandbox": id})
	areq.Stream = true
	res, info, err := s.sessions.Exec(r.Context(), id, areq, func(stream string, data []byte) {
		event(stream, map[string]string{"data": string(data)})
	})
	if err != nil {
		_, code := statusOf(err)
		event("error", map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
		return
	}
	event("result", toSandboxResponse(res, info))
}

// fileRequest reads ?path= and ?format= of a files route.
func fileRequest(r *http.Request) (path string, tarball bool, err error) {
	q := r.URL.Query()
	path = q.Get("path")
	if path == "" {
		return "", false, invalid("query parameter path is required: a path in /workspace, relative or absolute")
	}
	switch q.Get("format") {
	case "", "raw":
	case "tar":
		tarball = true
	default:
		return "", false, invalid("format %q: use raw (the default) or tar", q.Get("format"))
	}
	return path, tarball, nil
}

// handleGetFile answers a file's bytes, a directory's listing (JSON), or,
// with format=tar, a tree as a tar stream.
func (s *Server) handleGetFile(w http.ResponseWriter, r *http.Request) {
	path, tarball, err := fileRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if !tarball {
		listing, err := s.sessions.File(r.Context(), id, &agent.FileRequest{Action: "list", Path: path}, nil)
		if err != nil {
			writeError(w, err)
			return
		}
		if listing.Type != "file" {
			entries := listing.Entries
			if entries == nil {
				entries = []agent.FileEntry{} // an empty directory lists [], not nothing
			}
			writeJSON(w, http.StatusOK, map[string]any{"path": listing.Path, "type": listing.Type, "entries": entries})
			return
		}
	}
	action, ctype := "read", "application/octet-stream"
	if tarball {
		action, ctype = "tar_read", "application/x-tar"
	}
	// The bytes stream out as they come; an error after the first chunk can
	// only cut the response short.
	started := false
	_, err = s.sessions.File(r.Context(), id, &agent.FileRequest{Action: action, Path: path}, func(b []byte) {
		if !started {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(http.StatusOK)
			started = true
		}
		w.Write(b)
	})
	switch {
	case err != nil && !started:
		writeError(w, err)
	case err != nil:
		s.log.Warn("file download cut short", "sandbox", id, "path", path, "err", err)
	case !started: // an empty file or tree
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(http.StatusOK)
	}
}

// handlePutFile writes the body to a file, or with format=tar unpacks it
// into a directory.
func (s *Server) handlePutFile(w http.ResponseWriter, r *http.Request) {
	path, tarball, err := fileRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	action := "write"
	if tarball {
		action = "tar_write"
	}
	res, err := s.sessions.File(r.Context(), r.PathValue("id"), &agent.FileRequest{Action: action, Path: path, Data: body}, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleDeleteFile(w http.ResponseWriter, r *http.Request) {
	path, _, err := fileRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.sessions.File(r.Context(), r.PathValue("id"), &agent.FileRequest{Action: "delete", Path: path}, nil); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleScreenshot answers a PNG of the sandbox's screen: ?x=&y=&w=&h= for a
// region, ?scale= (0 < scale <= 1) to shrink it.
func (s *Server) handleScreenshot(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req agent.ScreenshotRequest
	for _, f := range []struct {
		name string
		p    *int
	}{{"x", &req.X}, {"y", &req.Y}, {"w", &req.W}, {"h", &req.H}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				writeError(w, invalid("%s=%q is not a whole number of pixels", f.name, v))
				return
			}
			*f.p = n
		}
	}
	if (req.W == 0) != (req.H == 0) {
		writeError(w, invalid("give both w and h for a region, or neither for the whole screen"))
		return
	}
	if v := q.Get("scale"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			writeError(w, invalid("scale=%q: must be a number more than 0 and at most 1", v))
			return
		}
		req.Scale = f
	}
	img, err := s.sessions.Screenshot(r.Context(), r.PathValue("id"), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(img)
}

// handleInput injects {"actions": [...], "screenshot": bool}; the answer is
// {"screenshot": base64 PNG or null}.
func (s *Server) handleInput(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var req agent.InputRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Actions) == 0 {
		writeError(w, invalid("actions is empty; send at least one, like {\"type\": \"click\", \"x\": 10, \"y\": 20}"))
		return
	}
	png, err := s.sessions.Input(r.Context(), r.PathValue("id"), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	out := map[string]any{"screenshot": nil}
	if png != nil {
		out["screenshot"] = png // []byte: base64 in JSON
	}
	writeJSON(w, http.StatusOK, out)
}
