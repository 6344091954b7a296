package server

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/coder/websocket"
)

// The live view: /ui/sandboxes/{id} is a page that shows the sandbox's screen
// from /v1/sandboxes/{id}/view, a WebSocket of PNG frames (binary messages,
// sent when the screen changed); with ?control=1 the page sends the viewer's
// input back as {"actions": [...]}, the /input body.

//go:embed ui/view.html
var viewPage []byte

const frameInterval = 100 * time.Millisecond // at most 10 frames a second

func (s *Server) handleViewPage(w http.ResponseWriter, r *http.Request) {
	if _, err := s.sessions.Get(r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(viewPage)
}

func (s *Server) handleView(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id); err != nil {
		writeError(w, err)
		return
	}
	control := r.URL.Query().Get("control") == "1"
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	release, err := s.sessions.Hold(id) // someone watching is activity
	if err != nil {
		return
	}
	defer release()
	say := func(msg string) {
		b, _ := json.Marshal(map[string]string{"message": msg})
		c.Write(ctx, websocket.MessageText, b)
	}

	// Input from the viewer, when in control; reading also answers pings.
	go func() {
		defer cancel()
		for {
			_, raw, err := c.Read(ctx)
			if err != nil {
				return
			}
			if !control {
				say("view only: open the page with ?control=1 to send input")
				continue
			}
			var req agent.InputRequest
			if err := json.Unmarshal(raw, &req); err != nil {
				say("input is not {\"actions\": [...]}: " + err.Error())
				continue
			}
			if _, err := s.sessions.Input(ctx, id, &req); err != nil {
				say(err.Error())
			}
		}
	}()

	var last []byte
	t := time.NewTicker(frameInterval)
	defer t.Stop()
	for {
		frame, err := s.sessions.Screenshot(ctx, id, &agent.ScreenshotRequest{})
		if err != nil {
			say(err.Error())
			c.Close(websocket.StatusPolicyViolation, "no screen")
			return
		}
		if !bytes.Equal(frame, last) {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Write(wctx, websocket.MessageBinary, frame)
			wcancel()
			if err != nil {
				return
			}
			last = frame
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
