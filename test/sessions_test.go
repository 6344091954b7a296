package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codecell/codecell/internal/testutil"
)

// sandboxInfo mirrors GET /v1/sandboxes/{id}.
type sandboxInfo struct {
	ID           string  `json:"id"`
	Status       string  `json:"status"`
	Runtime      string  `json:"runtime"`
	EpisodeID    string  `json:"episode_id"`
	StepCount    int     `json:"step_count"`
	Episodes     int     `json:"episodes"`
	LastExitCode int     `json:"last_exit_code"`
	MemoryMB     int64   `json:"memory_mb"`
	IdleTimeoutS float64 `json:"idle_timeout_s"`
}

// step mirrors POST /v1/sandboxes/{id}/exec.
type step struct {
	result
	Value   *string `json:"value"`
	Outputs []struct {
		Mime string `json:"mime"`
		Data string `json:"data"`
	} `json:"outputs"`
	Error *struct {
		Name, Value, Traceback string
	} `json:"error"`
	Interrupted     bool   `json:"interrupted"`
	KernelRestarted bool   `json:"kernel_restarted"`
	EpisodeID       string `json:"episode_id"`
	StepCount       int    `json:"step_count"`
}

func (s *server) createSandbox(t *testing.T, body map[string]any) sandboxInfo {
	t.Helper()
	var info sandboxInfo
	resp := s.post(t, "/v1/sandboxes", body, &info)
	if resp.StatusCode != http.StatusCreated || info.ID == "" || info.EpisodeID == "" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create sandbox: %d %s", resp.StatusCode, b)
	}
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil) })
	return info
}

func (s *server) step(t *testing.T, id, lang, code string, timeoutS float64) step {
	t.Helper()
	var st step
	body := map[string]any{"language": lang, "code": code}
	if timeoutS > 0 {
		body["timeout_s"] = timeoutS
	}
	resp := s.post(t, "/v1/sandboxes/"+id+"/exec", body, &st)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("exec %q: %d %s", code, resp.StatusCode, b)
	}
	return st
}

// do sends a request without a body and decodes a JSON answer into out.
func (s *server) do(t testing.TB, method, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %s", method, path, raw)
		}
	}
	return resp.StatusCode
}

func value(st step) string {
	if st.Value == nil {
		return "<none>"
	}
	return *st.Value
}

func TestSessionLifecycle(t *testing.T) {
	s := shared(t)
	info := s.createSandbox(t, map[string]any{"idle_timeout_s": 300, "env": map[string]string{"GREETING": "hi"}})
	if info.Status != "idle" || info.Runtime != "runc" || info.StepCount != 0 || info.MemoryMB != 512 || info.IdleTimeoutS != 300 {
		t.Fatalf("created: %+v", info)
	}
	var got sandboxInfo
	if code := s.do(t, "GET", "/v1/sandboxes/"+info.ID, &got); code != 200 || got.ID != info.ID || got.EpisodeID != info.EpisodeID {
		t.Fatalf("get: %d %+v", code, got)
	}
	var list struct{ Sandboxes []sandboxInfo }
	s.do(t, "GET", "/v1/sandboxes", &list)
	found := false
	for _, sb := range list.Sandboxes {
		found = found || sb.ID == info.ID
	}
	if !found {
		t.Fatalf("list lacks %s: %+v", info.ID, list)
	}
	if st := s.step(t, info.ID, "python", "import os\nos.environ['GREETING']", 0); value(st) != "'hi'" || st.StepCount != 1 {
		t.Fatalf("session env: %+v", st)
	}
	if code := s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	var e apiError
	if code := s.do(t, "GET", "/v1/sandboxes/"+info.ID, &e); code != 404 || e.Error.Code != "not_found" || !strings.Contains(e.Error.Message, info.ID) {
		t.Fatalf("get after delete: %d %+v", code, e)
	}
	if resp := s.post(t, "/v1/sandboxes/"+info.ID+"/exec", map[string]any{"code": "1"}, &e); resp.StatusCode != 404 {
		t.Fatalf("exec after delete: %d %+v", resp.StatusCode, e)
	}
}

func TestSessionPythonKeepsState(t *testing.T) {
	s := shared(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			id := s.createSandbox(t, map[string]any{"runtime": rt}).ID
			steps := []struct{ code, value, stdout string }{
				{"x = 5", "<none>", ""},
				{"x", "5", ""},
				{"import math\ndef area(r):\n    return math.pi * r * r\nround(area(x), 2)", "78.54", ""},
				{"from dataclasses import dataclass, field\n@dataclass\nclass Point:\n    x: int\n    y: int = 0\n    tags: list = field(default_factory=list)\nPoint(1)", "Point(x=1, y=0, tags=[])", ""},
				{"def twice(f):\n    def g(*a):\n        return 2 * f(*a)\n    return g\n@twice\ndef inc(n: int) -> int:\n    return n + 1\ninc(x)", "12", ""},
				{"match Point(3, 4):\n    case Point(x=0): print('origin')\n    case Point(x=a, y=b): print(a + b)", "<none>", "7\n"},
				{"def typed(n: int) -> str: ...\nprint(__name__, typed.__annotations__)\nx += 1", "<none>", "__main__ {'n': <class 'int'>, 'return': <class 'str'>}\n"},
				{"x", "6", ""},
			}
			for i, want := range steps {
				st := s.step(t, id, "python", want.code, 0)
				if st.Status != "ok" || value(st) != want.value || st.Stdout != want.stdout || st.StepCount != i+1 {
					t.Fatalf("step %d %q: %+v (value %s)", i+1, want.code, st, value(st))
				}
			}
			// An exception reports the cell's own line numbers, and the session goes on.
			st := s.step(t, id, "python", "y = 1\nz = y / 0", 0)
			if st.Status != "error" || st.ExitCode != 1 || st.Error == nil || st.Error.Name != "ZeroDivisionError" ||
				st.Error.Value != "division by zero" || !strings.Contains(st.Error.Traceback, `File "<cell-9>", line 2, in <module>`) ||
				!strings.Contains(st.Stderr, "z = y / 0") {
				t.Fatalf("exception: %+v", st)
			}
			if st := s.step(t, id, "python", "x, y", 0); value(st) != "(6, 1)" {
				t.Fatalf("after the exception: %+v", st)
			}
		})
	}
}

func TestSessionTimeoutInterruptsAndKeepsState(t *testing.T) {
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	s.step(t, id, "python", "kept = 41", 0)
	st := s.step(t, id, "python", "print('before', flush=True)\nwhile True:\n    pass", 1)
	if st.Status != "timeout" || !st.Interrupted || st.KernelRestarted || st.Error == nil || st.Error.Name != "KeyboardInterrupt" || st.Stdout != "before\n" {
		t.Fatalf("interrupted step: %+v", st)
	}
	if st := s.step(t, id, "python", "kept + 1", 0); value(st) != "42" {
		t.Fatalf("state after the interrupt: %+v", st)
	}
	// Code that ignores the interrupt costs its kernel, and says so.
	st = s.step(t, id, "python", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 1)
	if st.Status != "timeout" || st.Interrupted || !st.KernelRestarted || !strings.Contains(st.Stderr, "state is lost") {
		t.Fatalf("ignored interrupt: %+v", st)
	}
	if st := s.step(t, id, "python", "'kept' in globals()", 0); value(st) != "False" {
		t.Fatalf("after the restart: %+v", st)
	}
	// So does a kernel that ends itself.
	st = s.step(t, id, "python", "import os\nos._exit(3)", 0)
	if st.ExitCode != 3 || !st.KernelRestarted {
		t.Fatalf("os._exit: %+v", st)
	}
	if st := s.step(t, id, "python", "1 + 1", 0); value(st) != "2" {
		t.Fatalf("after os._exit: %+v", st)
	}
}

func TestSessionBashKeepsState(t *testing.T) {
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	steps := []struct {
		code, stdout string
		exit         int
	}{
		{"cd /tmp && export GREETING=hello\ngreet() { echo \"$GREETING $1\"; }\nalias ll='echo listed'", "", 0},
		{"pwd; greet world; ll", "/tmp\nhello world\nlisted\n", 0},
		{"false", "", 1},
		{"(exit 7)", "", 7},
		{"printf 'no newline'", "no newline", 0},
		{"read -r line; echo \"[$line]\"", "[]\n", 0}, // stdin is empty, not the shell's command stream
	}
	for i, want := range steps {
		st := s.step(t, id, "bash", want.code, 0)
		if st.Stdout != want.stdout || st.ExitCode != want.exit || st.StepCount != i+1 {
			t.Fatalf("step %d %q: %+v", i+1, want.code, st)
		}
	}
	st := s.step(t, id, "bash", "echo start; sleep 100; echo not reached", 1)
	if st.Status != "timeout" || !st.Interrupted || st.ExitCode != 130 || st.Stdout != "start\n" {
		t.Fatalf("interrupted command: %+v", st)
	}
	if st := s.step(t, id, "bash", "echo $GREETING; pwd", 0); st.Stdout != "hello\n/tmp\n" {
		t.Fatalf("state after the interrupt: %+v", st)
	}
	st = s.step(t, id, "bash", "echo bye; exit 4", 0)
	if st.ExitCode != 4 || !st.KernelRestarted || st.Stdout != "bye\n" {
		t.Fatalf("exit: %+v", st)
	}
	if st := s.step(t, id, "bash", "echo \"[$GREETING]\"; pwd", 0); st.Stdout != "[]\n/workspace\n" {
		t.Fatalf("a new shell after exit: %+v", st)
	}
}

func TestSessionReset(t *testing.T) {
	s := shared(t)
	info := s.createSandbox(t, map[string]any{"max_episodes": 2})
	id := info.ID
	bootTime := "open('/proc/1/stat').read().split(')')[1].split()[19]" // when the sandbox's init started
	first := value(s.step(t, id, "python", bootTime, 0))
	s.step(t, id, "python", "secret = 1\nopen('/workspace/left.txt', 'w').write('x')", 0)
	s.step(t, id, "bash", "export LEFT=1", 0)
	var after sandboxInfo
	if resp := s.post(t, "/v1/sandboxes/"+id+"/reset", nil, &after); resp.StatusCode != 200 ||
		after.EpisodeID == info.EpisodeID || after.StepCount != 0 || after.Episodes != 1 || after.Status != "idle" {
		t.Fatalf("reset: %d %+v", resp.StatusCode, after)
	}
	st := s.step(t, id, "python", "import os\n('secret' in globals(), os.listdir('/workspace'), "+bootTime+")", 0)
	if value(st) != "(False, [], "+first+")" || st.StepCount != 1 || st.EpisodeID != after.EpisodeID {
		t.Fatalf("after reset: %+v (value %s)", st, value(st))
	}
	if st := s.step(t, id, "bash", "echo \"[$LEFT]\"", 0); st.Stdout != "[]\n" {
		t.Fatalf("bash after reset: %+v", st)
	}
	// The second reset reaches max_episodes: a fresh sandbox takes over.
	s.post(t, "/v1/sandboxes/"+id+"/reset", nil, &after)
	if after.Episodes != 2 {
		t.Fatalf("second reset: %+v", after)
	}
	if st := s.step(t, id, "python", bootTime, 0); value(st) == first {
		t.Fatalf("after max_episodes the sandbox was not replaced: init started at %s both times", first)
	}
}

func TestSessionFiguresAndDisplay(t *testing.T) {
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	st := s.step(t, id, "python", "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(2, 1), dpi=50)\nplt.plot([0, 1], [0, 1])\ndisplay({'a': 1})", 0)
	if st.Status != "ok" || len(st.Outputs) != 2 || st.Outputs[0].Mime != "text/plain" || st.Outputs[0].Data != "{'a': 1}" || st.Outputs[1].Mime != "image/png" {
		t.Fatalf("outputs: %+v", st)
	}
	raw, err := base64.StdEncoding.DecodeString(st.Outputs[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("figure is not a PNG: %v", err)
	}
	// A 100x50 canvas, give or take what bbox_inches="tight" trims and adds
	// for the tick labels, with the line drawn in matplotlib's first colour.
	if b := img.Bounds(); b.Dx() < 60 || b.Dx() > 140 || b.Dy() < 30 || b.Dy() > 90 {
		t.Fatalf("figure is %v, want about 100x50", b)
	}
	line := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(r>>8, 0x1f) && near(g>>8, 0x77) && near(b>>8, 0xb4) {
				line++
			}
		}
	}
	if line < 20 {
		t.Fatalf("the plotted line is not in the PNG: %d pixels of #1f77b4", line)
	}
	// A figure is shown once, in the cell that drew it.
	if st := s.step(t, id, "python", "1", 0); len(st.Outputs) != 0 {
		t.Fatalf("figure shown again: %+v", st.Outputs)
	}
}

func TestSessionLimitsAndBadInput(t *testing.T) {
	s := shared(t)
	bad := []struct {
		body any
		want string
	}{
		{map[string]any{"memory_mb": 1}, "memory_mb 1"},
		{map[string]any{"cpus": 1000}, "cpus 1000"},
		{map[string]any{"runtime": "kata"}, "unknown runtime"},
		{map[string]any{"screen": "640x480x24"}, `needs "display": true`},
		{map[string]any{"display": true, "screen": "big"}, "WIDTHxHEIGHTxDEPTH"},
		{map[string]any{"idle_timeout_s": -1}, "idle_timeout_s"},
		{map[string]any{"max_episodes": -1}, "max_episodes"},
		{`{"memory": 5}`, `unknown field "memory"`},
		{`{"env": {"A=B": "c"}}`, "env"},
	}
	for _, b := range bad {
		var e apiError
		resp := s.post(t, "/v1/sandboxes", b.body, &e)
		if resp.StatusCode != 400 || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, b.want) {
			t.Errorf("%v: %d %+v, want 400 mentioning %q", b.body, resp.StatusCode, e, b.want)
		}
	}
	id := s.createSandbox(t, map[string]any{"memory_mb": 256}).ID
	var e apiError
	if resp := s.post(t, "/v1/sandboxes/"+id+"/exec", map[string]any{"language": "cobol", "code": "x"}, &e); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "python, bash") {
		t.Errorf("unknown language: %d %+v", resp.StatusCode, e)
	}
	// 256 MiB is enforced: 400 MB of memory kills the kernel, not the server.
	st := s.step(t, id, "python", "b = bytearray(400 << 20)\nb[::4096] = b'x' * len(b[::4096])", 0)
	if st.Status != "oom" && !(st.KernelRestarted && st.Signal != nil && *st.Signal == "SIGKILL") {
		t.Fatalf("over the memory limit: %+v", st)
	}
	if st := s.step(t, id, "python", "b = bytearray(100 << 20)\nlen(b) >> 20", 0); value(st) != "100" {
		t.Fatalf("under the memory limit: %+v", st)
	}
	// Limits can grow past the pool's default (512 MiB) too.
	big := s.createSandbox(t, map[string]any{"memory_mb": 1024}).ID
	if st := s.step(t, big, "python", "b = bytearray(700 << 20)\nb[::4096] = b'x' * len(b[::4096])\nlen(b) >> 20", 0); value(st) != "700" {
		t.Fatalf("700 MB in a 1024 MiB session: %+v", st)
	}
	s.requireHealthy(t, "runc")
}

// A session idles out only when nothing runs in it, its own processes
// included; a server it started keeps it alive.
func TestSessionIdleTimeout(t *testing.T) {
	testutil.RequiresRoot(t)
	s := shared(t)
	quiet := s.createSandbox(t, map[string]any{"idle_timeout_s": 1}).ID
	busy := s.createSandbox(t, map[string]any{"idle_timeout_s": 1}).ID
	s.step(t, busy, "python", "import subprocess\nsubprocess.Popen(['sleep', '600'])", 0)
	deadline := time.Now().Add(30 * time.Second)
	for s.do(t, "GET", "/v1/sandboxes/"+quiet, nil) != 404 {
		if time.Now().After(deadline) {
			t.Fatalf("an idle session was not stopped after its 1 s time-out")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // well past the time-out of busy, too
	if code := s.do(t, "GET", "/v1/sandboxes/"+busy, nil); code != 200 {
		t.Fatalf("a session running a process of its own was stopped as idle: %d", code)
	}
	s.step(t, busy, "bash", "pkill sleep", 0)
	for s.do(t, "GET", "/v1/sandboxes/"+busy, nil) != 404 {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("session not stopped once its process ended")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestSessionCapacity(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	s := startServer(t, "", "--pool-size", "1", "--gvisor-pool-size", "0", "--max-sessions", "1")
	s.createSandbox(t, nil)
	var e apiError
	resp := s.post(t, "/v1/sandboxes", nil, &e)
	if resp.StatusCode != 429 || e.Error.Code != "busy" || !strings.Contains(e.Error.Message, "maximum of 1 sessions") {
		t.Fatalf("over max-sessions: %d %+v", resp.StatusCode, e)
	}
}

func near(a uint32, b int) bool { return int(a) >= b-24 && int(a) <= b+24 }

func TestSessionJavaScriptKeepsState(t *testing.T) {
	testutil.RequiresBinary(t, "node")
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	steps := []struct{ code, value, stdout string }{
		{"let a = 1; const b = 2; var c = 3;", "<none>", ""},
		{"a + b + c", "6", ""},
		{"function twice(x) { return 2 * x }\nclass K { m() { return 'k' } }\nconsole.log(twice(a))", "<none>", "2\n"},
		{"new K().m()", "'k'", ""},
		{"const d = await new Promise(r => setTimeout(() => r(40), 20));\nd + b", "42", ""},
		{"d", "40", ""},
		{"({x: [1, 2]})", "{ x: [ 1, 2 ] }", ""},
	}
	for i, want := range steps {
		st := s.step(t, id, "javascript", want.code, 0)
		if st.Status != "ok" || value(st) != want.value || st.Stdout != want.stdout || st.StepCount != i+1 {
			t.Fatalf("step %d %q: %+v (value %s)", i+1, want.code, st, value(st))
		}
	}
	st := s.step(t, id, "javascript", "const e = 1;\nnull.x", 0)
	if st.Status != "error" || st.Error == nil || st.Error.Name != "TypeError" || !strings.Contains(st.Error.Traceback, "cell-8:2") {
		t.Fatalf("exception: %+v", st)
	}
	st = s.step(t, id, "javascript", "console.log('spin'); while (true) {}", 1)
	if st.Status != "timeout" || !st.Interrupted || st.KernelRestarted || st.Stdout != "spin\n" {
		t.Fatalf("interrupted loop: %+v", st)
	}
	st = s.step(t, id, "javascript", "await new Promise(() => {})", 1)
	if st.Status != "timeout" || !st.Interrupted || st.KernelRestarted {
		t.Fatalf("interrupted await: %+v", st)
	}
	if st := s.step(t, id, "javascript", "a + d", 0); value(st) != "41" {
		t.Fatalf("state after interrupts: %+v", st)
	}
	st = s.step(t, id, "javascript", "process.exit(5)", 0)
	if st.ExitCode != 5 || !st.KernelRestarted {
		t.Fatalf("process.exit: %+v", st)
	}
	if st := s.step(t, id, "javascript", "typeof a", 0); value(st) != "'undefined'" {
		t.Fatalf("a new kernel after exit: %+v", st)
	}
}

// request sends a raw body and returns the status and the raw answer.
func (s *server) request(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

type listing struct {
	Path    string `json:"path"`
	Type    string `json:"type"`
	Entries []struct {
		Name, Type, Mode string
		Size             int64
		MTime            time.Time
	} `json:"entries"`
}

func makeTar(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := h.Linkname // regular files carry their content here, for brevity
		if h.Typeflag == tar.TypeReg {
			h.Size, h.Linkname = int64(len(body)), ""
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestSessionFiles(t *testing.T) {
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	files := "/v1/sandboxes/" + id + "/files?path="
	if code, raw := s.request(t, "PUT", files+"data/in.txt", []byte("hello")); code != 200 || !strings.Contains(string(raw), `"path":"/workspace/data/in.txt"`) || !strings.Contains(string(raw), `"size":5`) {
		t.Fatalf("put: %d %s", code, raw)
	}
	if st := s.step(t, id, "python", "open('data/in.txt').read()", 0); value(st) != "'hello'" {
		t.Fatalf("the kernel does not see the upload: %+v", st)
	}
	s.step(t, id, "python", "open('/workspace/out.bin', 'wb').write(bytes(range(256)))", 0)
	if code, raw := s.request(t, "GET", files+"out.bin", nil); code != 200 || !bytes.Equal(raw, func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()) {
		t.Fatalf("get out.bin: %d %q", code, raw)
	}
	var l listing
	if code := s.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=/workspace/data", &l); code != 200 || l.Type != "dir" || len(l.Entries) != 1 ||
		l.Entries[0].Name != "in.txt" || l.Entries[0].Type != "file" || l.Entries[0].Size != 5 || l.Entries[0].Mode != "0644" || time.Since(l.Entries[0].MTime) > time.Hour {
		t.Fatalf("listing: %d %+v", code, l)
	}
	if code, _ := s.request(t, "DELETE", files+"data", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	var e apiError
	if code := s.do(t, "GET", "/v1/sandboxes/"+id+"/files?path=data/in.txt", &e); code != 404 || e.Error.Code != "not_found" {
		t.Fatalf("get after delete: %d %+v", code, e)
	}

	// A whole directory in and out as tar.
	in := makeTar(t, &tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "src/main.py", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "print('tar ok')\n"},
		&tar.Header{Name: "README", Typeflag: tar.TypeReg, Mode: 0o600, Linkname: "r"})
	if code, raw := s.request(t, "PUT", files+"proj&format=tar", in); code != 200 {
		t.Fatalf("put tar: %d %s", code, raw)
	}
	if st := s.step(t, id, "bash", "cd /workspace/proj && python3 src/main.py && stat -c %a README 2>/dev/null || python3 -c \"import os; print(oct(os.stat('README').st_mode & 0o777))\"", 0); !strings.HasPrefix(st.Stdout, "tar ok\n") {
		t.Fatalf("unpacked tree: %+v", st)
	}
	code, raw := s.request(t, "GET", files+"proj&format=tar", nil)
	if code != 200 {
		t.Fatalf("get tar: %d %s", code, raw)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if len(got) != 3 || got["src/main.py"] != "print('tar ok')\n" || got["README"] != "r" || got["src/"] != "" {
		t.Fatalf("tar out: %v", got)
	}
}

// Paths are resolved inside the sandbox: every way out of /workspace is
// refused with 400, and the sandbox stays usable.
func TestSessionFilePathEscapes(t *testing.T) {
	s := shared(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) { testFilePathEscapes(t, s, rt) })
	}
}

func testFilePathEscapes(t *testing.T, s *server, rt string) {
	id := s.createSandbox(t, map[string]any{"runtime": rt}).ID
	s.step(t, id, "python", "import os\nos.symlink('/etc', 'etc_link')\nos.symlink('/etc/passwd', 'passwd_link')\nos.mkdir('d')\nos.symlink('../..', 'd/up')\nos.symlink('/tmp/made', 'dangling')", 0)
	base := "/v1/sandboxes/" + id + "/files?path="
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "../etc/passwd", "leaves /workspace"},
		{"GET", "/etc/passwd", "outside /workspace"},
		{"GET", "/workspace/../etc/passwd", "outside /workspace"},
		{"GET", "etc_link/passwd", "symlink"},
		{"GET", "passwd_link", "symlink"},
		{"GET", "d/up/etc/passwd", "symlink"},
		{"PUT", "etc_link/evil", "symlink"},
		{"PUT", "../evil", "leaves /workspace"},
		{"DELETE", "/", "outside /workspace"},
		{"DELETE", "etc_link/passwd", "symlink"},
		{"PUT", "dangling", "symlink"}, // would create /tmp/made
		{"GET", "", "path is required"},
	} {
		var e apiError
		code, raw := s.request(t, tc.method, base+tc.path, []byte("x"))
		json.Unmarshal(raw, &e)
		if code != 400 || e.Error.Code != "invalid_request" || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s %q: %d %s, want 400 mentioning %q", tc.method, tc.path, code, raw, tc.want)
		}
	}
	for _, bad := range [][]byte{
		makeTar(t, &tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"}),
		makeTar(t, &tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}),
		[]byte("not a tar"),
	} {
		if code, raw := s.request(t, "PUT", base+"t&format=tar", bad); code != 400 {
			t.Errorf("bad tar: %d %s", code, raw)
		}
	}
	if st := s.step(t, id, "bash", "cat /etc/hostname; python3 -c \"import os; print(*sorted(os.listdir('/workspace')))\"", 0); st.Stdout != "sandbox\nd dangling etc_link passwd_link\n" {
		t.Fatalf("after the attempts: %+v", st)
	}
}

func TestSessionFileLimits(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	s := startServer(t, "", "--pool-size", "1", "--gvisor-pool-size", "0", "--workspace-mb", "1", "--max-body", "3145728")
	id := s.createSandbox(t, nil).ID
	var e apiError
	code, raw := s.request(t, "PUT", "/v1/sandboxes/"+id+"/files?path=big", bytes.Repeat([]byte("x"), 2<<20))
	json.Unmarshal(raw, &e)
	if code != 413 || e.Error.Code != "too_large" || !strings.Contains(e.Error.Message, "/workspace is full") {
		t.Fatalf("over the workspace size: %d %s", code, raw)
	}
	code, raw = s.request(t, "PUT", "/v1/sandboxes/"+id+"/files?path=huge", bytes.Repeat([]byte("x"), 4<<20))
	json.Unmarshal(raw, &e)
	if code != 413 || !strings.Contains(e.Error.Message, "3145728 bytes") {
		t.Fatalf("over max-body: %d %s", code, raw)
	}
	// Nothing half-written is left, and a file that fits still does.
	if code, raw := s.request(t, "PUT", "/v1/sandboxes/"+id+"/files?path=small", []byte("ok")); code != 200 {
		t.Fatalf("small file: %d %s", code, raw)
	}
	if st := s.step(t, id, "bash", "ls /workspace", 0); st.Stdout != "small\n" {
		t.Fatalf("workspace: %+v", st)
	}
}

type sseEvent struct {
	name string
	data string
	at   time.Time
}

// streamStep posts to /exec/stream and hands each event to onEvent until it
// returns false or the stream ends.
func (s *server) streamStep(t *testing.T, ctx context.Context, id string, body map[string]any, onEvent func(sseEvent) bool) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/sandboxes/"+id+"/exec/stream", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "":
			ev.at = time.Now()
			if !onEvent(ev) {
				return
			}
			ev = sseEvent{}
		}
	}
}

func TestSessionStreaming(t *testing.T) {
	s := shared(t)
	id := s.createSandbox(t, nil).ID
	var events []sseEvent
	s.streamStep(t, context.Background(), id, map[string]any{"code": "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\nprint('warn', file=sys.stderr)\n'done'"}, func(e sseEvent) bool {
		events = append(events, e)
		return true
	})
	var names, chunks []string
	for _, e := range events {
		names = append(names, e.name)
		if e.name == "stdout" || e.name == "stderr" {
			var c struct{ Data string }
			json.Unmarshal([]byte(e.data), &c)
			chunks = append(chunks, e.name+":"+c.Data)
		}
	}
	if strings.Join(chunks, "|") != "stdout:0\n|stdout:1\n|stdout:2\n|stderr:warn\n" || names[0] != "start" || names[len(names)-1] != "result" {
		t.Fatalf("events: %v chunks %q", names, chunks)
	}
	// The first line came while the code still slept, not with the result.
	if gap := events[len(events)-1].at.Sub(events[1].at); gap < 500*time.Millisecond {
		t.Fatalf("output arrived %v before the result; it was not streamed", gap)
	}
	var res step
	json.Unmarshal([]byte(events[len(events)-1].data), &res)
	if res.Status != "ok" || value(res) != "'done'" || res.Stdout != "0\n1\n2\n" || res.StepCount != 1 {
		t.Fatalf("result: %+v", res)
	}

	// A client that goes away stops its step; the kernel is interrupted, and
	// keeps its state, instead of running on for the step's 25 s.
	s.step(t, id, "python", "kept = 7", 0)
	ctx, cancel := context.WithCancel(context.Background())
	s.streamStep(t, ctx, id, map[string]any{"code": "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.05)", "timeout_s": 25}, func(e sseEvent) bool {
		return e.name != "stdout" // hang up at the first output
	})
	cancel()
	quick := &http.Client{Timeout: 15 * time.Second}
	b, _ := json.Marshal(map[string]any{"code": "kept"})
	resp, err := quick.Post(s.URL+"/v1/sandboxes/"+id+"/exec", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the abandoned step still holds the kernel: %v", err)
	}
	defer resp.Body.Close()
	var after step
	json.NewDecoder(resp.Body).Decode(&after)
	if value(after) != "7" {
		t.Fatalf("after the disconnect: %+v", after)
	}
}
