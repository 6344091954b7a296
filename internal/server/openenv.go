package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/sandbox"
	"github.com/codecell/codecell/internal/session"
)

// OpenEnv's protocols. validationError is FastAPI's 422 shape, which
// OpenEnv's servers answer for a request that does not fit their models.

type validationDetail struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

func validationError(w http.ResponseWriter, loc []any, msg, typ string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []validationDetail{{Loc: loc, Msg: msg, Type: typ}}})
}

// handlePythonSandboxExec is the stateless protocol of OpenEnv's older
// PythonSandboxEnv clients: POST /exec {"code"} answers 200 {"output":
// stdout}, 400 {"detail": stderr} when the code fails, 408 on a time-out.
func (s *Server) handlePythonSandboxExec(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		validationError(w, []any{"body"}, "JSON decode error: "+err.Error(), "json_invalid")
		return
	}
	var code string
	raw, ok := req["code"]
	if !ok {
		validationError(w, []any{"body", "code"}, "Field required", "missing")
		return
	}
	if json.Unmarshal(raw, &code) != nil {
		validationError(w, []any{"body", "code"}, "Input should be a valid string", "string_type")
		return
	}
	areq, err := s.toAgent(&ExecuteRequest{Language: "python", Code: &code})
	if err != nil {
		writeError(w, err)
		return
	}
	res, _, err := s.mgr.Execute(r.Context(), sandbox.Target{}, areq, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	switch res.Status {
	case sandbox.StatusOK:
		writeJSON(w, http.StatusOK, map[string]string{"output": string(res.Stdout)})
	case sandbox.StatusTimeout:
		writeJSON(w, http.StatusRequestTimeout, map[string]string{"detail": "Execution timed out after " + s.cfg.Timeout.String() + "\n" + string(res.Stderr)})
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": string(res.Stderr)})
	}
}

// OpenEnv's coding environment: reset/step/state over plain HTTP on one
// default session, and over /ws with a session per connection.

// openEnvDefault is the session plain-HTTP calls act on, made on first use
// and again if it ended (idle, deleted).
type openEnvDefault struct {
	mu sync.Mutex
	id string
}

// openEnvOptions are those of OpenEnv's sessions: with a display if the
// server gives them one, so actions that ask for a screenshot get one.
func (s *Server) openEnvOptions() session.Options {
	return session.Options{Display: s.cfg.OpenEnvDisplay}
}

func (s *Server) defaultSession(ctx context.Context) (string, error) {
	s.openenv.mu.Lock()
	defer s.openenv.mu.Unlock()
	if s.openenv.id != "" {
		if _, err := s.sessions.Get(s.openenv.id); err == nil {
			return s.openenv.id, nil
		}
	}
	info, err := s.sessions.Create(ctx, s.openEnvOptions())
	if err != nil {
		return "", err
	}
	s.openenv.id = info.ID
	return info.ID, nil
}

// dangerousCode is the coding environment's safety rule: code that matches
// any of these is penalised.
var dangerousCode = regexp.MustCompile(`import\s+os|import\s+subprocess|eval\(|exec\(|__import__|open\(`)

// reward is OpenEnv's coding environment rule (CodeSafetyTransform then
// CodeQualityTransform): -1.0 if the code matches a dangerous pattern, else
// 0.0; plus 0.1 if the stripped code is at most 100 characters; minus 0.2
// if it does not parse.
func reward(code string, syntaxError bool) float64 {
	safety := 0.0
	if dangerousCode.MatchString(code) {
		safety = -1.0
	}
	quality := 0.0
	if utf8.RuneCountInString(strings.TrimSpace(code)) <= 100 {
		quality += 0.1
	}
	if syntaxError {
		quality += -0.2
	}
	return safety + quality
}

type openEnvObservation struct {
	Observation map[string]any `json:"observation"`
	Reward      float64        `json:"reward"`
	Done        bool           `json:"done"`
}

func emptyObservation() openEnvObservation {
	return openEnvObservation{Observation: map[string]any{"stdout": "", "stderr": "", "exit_code": 0}}
}

// openEnvStep runs an action's code in session id.
func (s *Server) openEnvStep(ctx context.Context, id string, action map[string]json.RawMessage, timeoutS *float64) (openEnvObservation, error) {
	var code string
	json.Unmarshal(action["code"], &code)
	areq, err := s.toAgent(&ExecuteRequest{Language: "python", Code: &code, TimeoutS: timeoutS})
	if err != nil {
		return openEnvObservation{}, err
	}
	var shot bool
	json.Unmarshal(action["capture_screenshot"], &shot)
	areq.CaptureScreenshot = shot
	res, _, err := s.sessions.Exec(ctx, id, areq, nil)
	if err != nil {
		return openEnvObservation{}, err
	}
	obs := map[string]any{"stdout": string(res.Stdout), "stderr": string(res.Stderr), "exit_code": res.ExitCode}
	if shot {
		obs["screenshot"] = nil // null without a display
		if res.Screenshot != nil {
			obs["screenshot"] = base64.StdEncoding.EncodeToString(res.Screenshot)
		}
	}
	return openEnvObservation{Observation: obs, Reward: reward(code, res.SyntaxError)}, nil
}

// checkAction validates a CodeAction: a string "code", an optional boolean
// "capture_screenshot", nothing else.
func checkAction(raw json.RawMessage, loc ...any) (map[string]json.RawMessage, []validationDetail) {
	var action map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &action) != nil || action == nil {
		return nil, []validationDetail{{Loc: loc, Msg: "Input should be a valid dictionary", Type: "dict_type"}}
	}
	var errs []validationDetail
	var code string
	if c, ok := action["code"]; !ok {
		errs = append(errs, validationDetail{Loc: append(loc, "code"), Msg: "Field required", Type: "missing"})
	} else if json.Unmarshal(c, &code) != nil {
		errs = append(errs, validationDetail{Loc: append(loc, "code"), Msg: "Input should be a valid string", Type: "string_type"})
	}
	for k, v := range action {
		var b bool
		switch {
		case k == "code":
		case k == "capture_screenshot" && json.Unmarshal(v, &b) == nil:
		case k == "capture_screenshot":
			errs = append(errs, validationDetail{Loc: append(loc, k), Msg: "Input should be a valid boolean", Type: "bool_type"})
		default:
			errs = append(errs, validationDetail{Loc: append(loc, k), Msg: "Extra inputs are not permitted", Type: "extra_forbidden"})
		}
	}
	return action, errs
}

func (s *Server) handleOpenEnvReset(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Seed              *int64   `json:"seed"`
		EpisodeID         *string  `json:"episode_id"`
		AdditionalImports []string `json:"additional_imports"`
	}
	if len(strings.TrimSpace(string(body))) > 0 && json.Unmarshal(body, &req) != nil {
		validationError(w, []any{"body"}, "Input should be a valid dictionary with optional seed (integer), episode_id (string) and additional_imports (list of strings)", "model_attributes_type")
		return
	}
	id, err := s.defaultSession(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	episode := ""
	if req.EpisodeID != nil {
		episode = *req.EpisodeID
	}
	info, err := s.sessions.Reset(r.Context(), id, episode, additionalImports(req.AdditionalImports))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resetObservation(info))
}

// additionalImports are coding_env's packages for an episode, by import
// name; nil keeps the session's.
func additionalImports(names []string) *packages.Request {
	if names == nil {
		return nil
	}
	return &packages.Request{Python: names}
}

// resetObservation is the empty observation a reset answers, with what the
// episode's packages came to in its metadata.
func resetObservation(info session.Info) openEnvObservation {
	o := emptyObservation()
	if info.Packages != nil {
		o.Observation["metadata"] = map[string]any{"packages": info.Packages}
	}
	return o
}

func (s *Server) handleOpenEnvStep(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Action   json.RawMessage `json:"action"`
		TimeoutS *float64        `json:"timeout_s"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		validationError(w, []any{"body"}, "JSON decode error: "+err.Error(), "json_invalid")
		return
	}
	if req.Action == nil {
		validationError(w, []any{"body", "action"}, "Field required", "missing")
		return
	}
	action, errs := checkAction(req.Action, "body", "action")
	if len(errs) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": errs})
		return
	}
	id, err := s.defaultSession(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	obs, err := s.openEnvStep(r.Context(), id, action, req.TimeoutS)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, obs)
}

type openEnvState struct {
	EpisodeID    *string `json:"episode_id"`
	StepCount    int     `json:"step_count"`
	LastExitCode int     `json:"last_exit_code"`
}

func (s *Server) stateOf(id string) openEnvState {
	info, err := s.sessions.Get(id)
	if err != nil {
		return openEnvState{}
	}
	return openEnvState{EpisodeID: &info.EpisodeID, StepCount: info.StepCount, LastExitCode: info.LastExitCode}
}

func (s *Server) handleOpenEnvState(w http.ResponseWriter, r *http.Request) {
	s.openenv.mu.Lock()
	id := s.openenv.id
	s.openenv.mu.Unlock()
	writeJSON(w, http.StatusOK, s.stateOf(id))
}

func (s *Server) handleOpenEnvHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
}

func (s *Server) handleOpenEnvMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"name":              "coding_env",
		"description":       "Python code execution in a codecell sandbox: state persists across steps until reset.",
		"readme_content":    nil,
		"version":           "1.0.0",
		"author":            "codecell",
		"documentation_url": nil,
	})
}

func (s *Server) handleOpenEnvSchema(w http.ResponseWriter, r *http.Request) {
	str := map[string]any{"type": "string"}
	integer := map[string]any{"type": "integer"}
	writeJSON(w, http.StatusOK, map[string]any{
		"action": map[string]any{"title": "CodeAction", "type": "object", "additionalProperties": false, "required": []string{"code"},
			"properties": map[string]any{"code": str, "capture_screenshot": map[string]any{"type": "boolean", "default": false}}},
		"observation": map[string]any{"title": "CodeObservation", "type": "object",
			"properties": map[string]any{"stdout": str, "stderr": str, "exit_code": integer,
				"screenshot": map[string]any{"anyOf": []any{str, map[string]any{"type": "null"}}, "default": nil}}},
		"state": map[string]any{"title": "CodeState", "type": "object",
			"properties": map[string]any{"episode_id": map[string]any{"anyOf": []any{str, map[string]any{"type": "null"}}}, "step_count": integer, "last_exit_code": integer}},
	})
}
