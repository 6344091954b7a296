package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/codecell/codecell/internal/errdefs"
	"github.com/coder/websocket"
)

// OpenEnv over WebSocket: each connection owns a session for its life.
// Messages are {"type", "data"}; answers are "observation", "state" or
// "error" {"message", "code"}.

const wsMaxMessage = 100 << 20 // what OpenEnv's clients accept

type wsMessage struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

func (s *Server) handleOpenEnvWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the failed handshake itself
	}
	defer c.CloseNow()
	c.SetReadLimit(wsMaxMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	send := func(typ string, data any) error {
		b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		return c.Write(wctx, websocket.MessageText, b)
	}
	sendError := func(code, msg string, extra map[string]any) {
		data := map[string]any{"message": msg, "code": code}
		for k, v := range extra {
			data[k] = v
		}
		send("error", data)
	}

	info, err := s.sessions.Create(ctx, s.openEnvOptions())
	if err != nil {
		if errors.Is(err, errdefs.ErrExhausted) {
			active, limit := s.sessions.Capacity()
			sendError("CAPACITY_REACHED", err.Error(), map[string]any{"active_sessions": active, "max_sessions": limit})
			c.Close(websocket.StatusTryAgainLater, "capacity reached")
			return
		}
		sendError("EXECUTION_ERROR", err.Error(), nil)
		c.Close(websocket.StatusInternalError, "no sandbox")
		return
	}
	id := info.ID
	defer s.sessions.Delete(id)
	release, err := s.sessions.Hold(id) // an open connection is activity
	if err != nil {
		return
	}
	defer release()

	// A peer that stops answering pings (half-open TCP, a dead client) frees
	// its sandbox.
	go func() {
		t := time.NewTicker(s.cfg.WSPingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, s.cfg.WSPingInterval)
			err := c.Ping(pctx)
			pcancel()
			if err != nil {
				cancel()
				return
			}
		}
	}()

	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			return // closed, dead, or over the size limit
		}
		var msg wsMessage
		if err := json.Unmarshal(raw, &msg); err != nil {
			sendError("INVALID_JSON", "message is not JSON: "+err.Error(), nil)
			continue
		}
		switch msg.Type {
		case "reset":
			var req struct {
				EpisodeID         *string  `json:"episode_id"`
				AdditionalImports []string `json:"additional_imports"`
			}
			if len(msg.Data) > 0 && string(msg.Data) != "null" && json.Unmarshal(msg.Data, &req) != nil {
				sendError("VALIDATION_ERROR", "reset data must be an object with an optional episode_id string", map[string]any{"errors": []validationDetail{{Loc: []any{"data"}, Msg: "Input should be a valid dictionary", Type: "dict_type"}}})
				continue
			}
			episode := ""
			if req.EpisodeID != nil {
				episode = *req.EpisodeID
			}
			info, err := s.sessions.Reset(ctx, id, episode, additionalImports(req.AdditionalImports))
			if err != nil {
				sendError("EXECUTION_ERROR", err.Error(), nil)
				continue
			}
			send("observation", resetObservation(info))
		case "step":
			// The action's fields, and optionally the step's timeout_s beside them.
			var fields map[string]json.RawMessage
			json.Unmarshal(msg.Data, &fields)
			var timeoutS *float64
			if t, ok := fields["timeout_s"]; ok {
				json.Unmarshal(t, &timeoutS)
				delete(fields, "timeout_s")
			}
			data, _ := json.Marshal(fields)
			action, errs := checkAction(data, "data")
			if len(errs) > 0 {
				sendError("VALIDATION_ERROR", "invalid action", map[string]any{"errors": errs})
				continue
			}
			obs, err := s.openEnvStep(ctx, id, action, timeoutS)
			if err != nil {
				sendError("EXECUTION_ERROR", err.Error(), nil)
				continue
			}
			send("observation", obs)
		case "state":
			send("state", s.stateOf(id))
		case "close":
			c.Close(websocket.StatusNormalClosure, "")
			return
		default:
			sendError("UNKNOWN_TYPE", "unknown message type "+quote(msg.Type)+"; use reset, step, state or close", nil)
		}
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
