package server

import (
	"encoding/json"
	"mime"
	"net/http"

	"github.com/codecell/codecell/internal/extract"
	"github.com/codecell/codecell/internal/sandbox"
)

// NeMo Agent Toolkit's local sandbox protocol: POST /execute. Its answers are
// always {"process_status", "stdout", "stderr"}, errors included.

type nemoResponse struct {
	ProcessStatus string `json:"process_status"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
}

func nemoError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, nemoResponse{ProcessStatus: "error", Stderr: msg})
}

func (s *Server) handleNemoExecute(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		nemoError(w, http.StatusBadRequest, "Request must be JSON")
		return
	}
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		status, _ := statusOf(err)
		nemoError(w, status, err.Error())
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		nemoError(w, http.StatusBadRequest, "Invalid JSON data")
		return
	}
	for _, f := range []string{"generated_code", "timeout"} {
		if _, ok := req[f]; !ok {
			nemoError(w, http.StatusBadRequest, "Missing required field: "+f)
			return
		}
	}
	var code, lang string
	var timeout float64
	if json.Unmarshal(req["generated_code"], &code) != nil {
		nemoError(w, http.StatusBadRequest, "Field generated_code must be a string")
		return
	}
	if json.Unmarshal(req["timeout"], &timeout) != nil {
		nemoError(w, http.StatusBadRequest, "Field timeout must be a number of seconds")
		return
	}
	if raw, ok := req["language"]; ok && string(raw) != "null" && json.Unmarshal(raw, &lang) != nil {
		nemoError(w, http.StatusBadRequest, "Field language must be a string")
		return
	}
	code = extract.Code(code)
	areq, err := s.toAgent(&ExecuteRequest{Language: lang, Code: &code, TimeoutS: &timeout})
	if err != nil {
		status, _ := statusOf(err)
		nemoError(w, status, err.Error())
		return
	}
	// Upstream runs every request in one working directory, and clients rely
	// on files written by one request being there for the next.
	res, err := s.mgr.ExecuteShared(r.Context(), "nemo", "", areq, nil)
	if err != nil {
		status, _ := statusOf(err)
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		nemoError(w, status, err.Error())
		return
	}
	out := nemoResponse{ProcessStatus: "completed", Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
	switch res.Status {
	case sandbox.StatusTimeout:
		// Upstream answers only "Timed out"; we keep what the run printed first.
		out.ProcessStatus = "timeout"
		out.Stderr += "Timed out\n"
	case sandbox.StatusOK:
	default:
		out.ProcessStatus = "error"
		if res.Status == sandbox.StatusOOM {
			out.Stderr += "MemoryError: the sandbox ran out of memory\n"
		}
	}
	writeJSON(w, http.StatusOK, out)
}
