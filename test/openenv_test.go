package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecell/codecell/internal/testutil"
	"github.com/coder/websocket"
)

type openEnvObs struct {
	Observation struct {
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		ExitCode int    `json:"exit_code"`
	} `json:"observation"`
	Reward float64 `json:"reward"`
	Done   bool    `json:"done"`
}

type openEnvState struct {
	EpisodeID    *string `json:"episode_id"`
	StepCount    int     `json:"step_count"`
	LastExitCode int     `json:"last_exit_code"`
}

func TestOpenEnvHTTP(t *testing.T) {
	s := shared(t)
	var health map[string]string
	if code := s.do(t, "GET", "/health", &health); code != 200 || health["status"] != "healthy" {
		t.Fatalf("health: %d %v", code, health)
	}
	var obs openEnvObs
	if resp := s.post(t, "/reset", map[string]any{"seed": 7}, &obs); resp.StatusCode != 200 || obs.Done || obs.Reward != 0 || obs.Observation.ExitCode != 0 {
		t.Fatalf("reset: %d %+v", resp.StatusCode, obs)
	}
	steps := []struct {
		code   string
		stdout string
		exit   int
		reward float64
	}{
		{"x = 41\nprint('hi')", "hi\n", 0, 0.1},
		{"print(x + 1)", "42\n", 0, 0.1},
		{"import os\nprint(os.getcwd())", "/workspace\n", 0, -0.9}, // the safety rule
		{"1 / 0", "", 1, 0.1},
		{"def (:", "", 1, -0.1}, // does not parse
		{"y = 1\n" + strings.Repeat("# padding\n", 12) + "print(y)", "1\n", 0, 0},
	}
	for _, st := range steps {
		var o openEnvObs
		resp := s.post(t, "/step", map[string]any{"action": map[string]any{"code": st.code}, "timeout_s": 15}, &o)
		if resp.StatusCode != 200 || o.Observation.Stdout != st.stdout || o.Observation.ExitCode != st.exit || math.Abs(o.Reward-st.reward) > 1e-9 || o.Done {
			t.Fatalf("step %q: %d %+v, want stdout %q exit %d reward %g", st.code, resp.StatusCode, o, st.stdout, st.exit, st.reward)
		}
	}
	var state openEnvState
	s.do(t, "GET", "/state", &state)
	if state.EpisodeID == nil || state.StepCount != len(steps) || state.LastExitCode != 0 {
		t.Fatalf("state: %+v", state)
	}
	s.post(t, "/reset", map[string]any{"episode_id": "ep-mine", "extra": true}, &obs)
	s.do(t, "GET", "/state", &state)
	if state.EpisodeID == nil || *state.EpisodeID != "ep-mine" || state.StepCount != 0 {
		t.Fatalf("state after reset: %+v", state)
	}
	var o openEnvObs
	s.post(t, "/step", map[string]any{"action": map[string]any{"code": "print('x' in globals())"}}, &o)
	if o.Observation.Stdout != "False\n" {
		t.Fatalf("state survived the reset: %+v", o)
	}
	// Validation errors answer 422 in FastAPI's shape.
	for _, bad := range []struct {
		body any
		want string
	}{
		{map[string]any{}, `"loc":["body","action"],"msg":"Field required"`},
		{map[string]any{"action": map[string]any{"code": "1", "lang": "py"}}, `"loc":["body","action","lang"]`},
		{map[string]any{"action": map[string]any{"code": 5}}, `"type":"string_type"`},
		{map[string]any{"action": "print(1)"}, `"type":"dict_type"`},
	} {
		resp := s.post(t, "/step", bad.body, nil)
		b := readAll(resp)
		if resp.StatusCode != 422 || !strings.Contains(b, bad.want) {
			t.Errorf("%v: %d %s, want 422 with %s", bad.body, resp.StatusCode, b, bad.want)
		}
	}
	// A step that asks for a screenshot gets the screen with its window.
	var shot struct {
		Observation struct {
			Stdout     string
			Screenshot []byte
		}
	}
	s.post(t, "/step", map[string]any{"action": map[string]any{"capture_screenshot": true,
		"code": "import tkinter as tk\nroot = tk.Tk()\nroot.geometry('200x100+50+60')\nroot.configure(bg='#00ff00')\nroot.mainloop()\nprint('shown')"}}, &shot)
	img, err := png.Decode(bytes.NewReader(shot.Observation.Screenshot))
	if err != nil || shot.Observation.Stdout != "shown\n" || rgb(img, 150, 110) != green || rgb(img, 10, 10) != black {
		t.Fatalf("step with capture_screenshot: %v %q", err, shot.Observation.Stdout)
	}
	var schema map[string]map[string]any
	if code := s.do(t, "GET", "/schema", &schema); code != 200 || schema["action"]["title"] != "CodeAction" || schema["state"]["title"] != "CodeState" {
		t.Fatalf("schema: %v", schema)
	}
	var meta map[string]any
	if code := s.do(t, "GET", "/metadata", &meta); code != 200 || meta["name"] != "coding_env" {
		t.Fatalf("metadata: %v", meta)
	}
}

// wsClient is one OpenEnv WebSocket connection.
type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func dialWS(t *testing.T, s *server) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatalf("dial /ws: %v", err)
	}
	c.SetReadLimit(100 << 20)
	return &wsClient{t: t, c: c}
}

// call sends one message and decodes the answer.
func (w *wsClient) call(msg any) (string, json.RawMessage) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b []byte
	switch m := msg.(type) {
	case string:
		b = []byte(m)
	default:
		b, _ = json.Marshal(m)
	}
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
	_, raw, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	var ans struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		w.t.Fatalf("answer is not JSON: %s", raw)
	}
	return ans.Type, ans.Data
}

func (s *server) sessionCount(t *testing.T) int {
	var list struct{ Sandboxes []sandboxInfo }
	s.do(t, "GET", "/v1/sandboxes", &list)
	return len(list.Sandboxes)
}

// Twenty connections at once, each with its own sandbox and state; closing
// one frees its sandbox.
func TestOpenEnvWebSocketSessions(t *testing.T) {
	s := shared(t)
	before := s.sessionCount(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := dialWS(t, s)
			defer w.c.CloseNow()
			if typ, _ := w.call(map[string]any{"type": "reset", "data": map[string]any{}}); typ != "observation" {
				errs <- fmt.Errorf("%d: reset answered %s", i, typ)
				return
			}
			w.call(map[string]any{"type": "step", "data": map[string]any{"code": fmt.Sprintf("mine = %d", i)}})
			_, data := w.call(map[string]any{"type": "step", "data": map[string]any{"code": "print(mine * 2)"}})
			var o openEnvObs
			json.Unmarshal(data, &o)
			if o.Observation.Stdout != fmt.Sprintf("%d\n", 2*i) {
				errs <- fmt.Errorf("%d: saw %+v", i, o)
				return
			}
			var st openEnvState
			typ, data := w.call(map[string]any{"type": "state"})
			json.Unmarshal(data, &st)
			if typ != "state" || st.StepCount != 2 {
				errs <- fmt.Errorf("%d: state %s %s", i, typ, data)
			}
			w.c.Write(context.Background(), websocket.MessageText, []byte(`{"type":"close"}`))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, "the closed connections' sandboxes to be freed", func() bool { return s.sessionCount(t) == before })

	w := dialWS(t, s)
	defer w.c.CloseNow()
	for _, tc := range []struct{ msg, code string }{
		{`{"type": `, "INVALID_JSON"},
		{`{"type": "jump"}`, "UNKNOWN_TYPE"},
		{`{"type": "step", "data": {"cmd": "1"}}`, "VALIDATION_ERROR"},
	} {
		typ, data := w.call(tc.msg)
		var e struct{ Message, Code string }
		json.Unmarshal(data, &e)
		if typ != "error" || e.Code != tc.code || e.Message == "" {
			t.Errorf("%s: %s %s, want error %s", tc.msg, typ, data, tc.code)
		}
	}
	// A client that stops reading, and so answering pings, loses its sandbox.
	count := s.sessionCount(t)
	silent := dialWS(t, s)
	defer silent.c.CloseNow()
	waitFor(t, "the silent client's sandbox", func() bool { return s.sessionCount(t) == count+1 })
	waitFor(t, "the silent client's sandbox to be freed", func() bool { return s.sessionCount(t) == count })
}

func TestOpenEnvWebSocketCapacity(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	s := startServer(t, "", "--pool-size", "1", "--gvisor-pool-size", "0", "--max-sessions", "1")
	first := dialWS(t, s)
	defer first.c.CloseNow()
	if typ, _ := first.call(map[string]any{"type": "state"}); typ != "state" {
		t.Fatalf("first connection: %s", typ)
	}
	second := dialWS(t, s)
	defer second.c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, raw, err := second.c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var ans struct {
		Type string
		Data struct{ Code string }
	}
	json.Unmarshal(raw, &ans)
	if ans.Type != "error" || ans.Data.Code != "CAPACITY_REACHED" || !strings.Contains(string(raw), `"active_sessions":1`) || !strings.Contains(string(raw), `"max_sessions":1`) {
		t.Fatalf("over capacity: %s", raw)
	}
	if _, _, err := second.c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
		t.Fatalf("the connection was not closed after CAPACITY_REACHED: %v", err)
	}
	s.requireHealthy(t, "runc")
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
