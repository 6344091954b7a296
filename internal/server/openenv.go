package server

import (
	"encoding/json"
	"net/http"

	"github.com/codecell/codecell/internal/sandbox"
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
	res, err := s.mgr.Execute(r.Context(), "", areq, nil)
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
