// Package e2e starts the real codecell binary on a loopback port and talks to
// it over HTTP, with real runc and runsc underneath.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var binary string // built once in TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "codecell-e2e-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "codecell")
	out, err := exec.Command("go", "build", "-o", binary, "../cmd/codecell").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build codecell: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if sharedSrv != nil {
		sharedSrv.stop(syscall.SIGTERM)
		os.RemoveAll(sharedSrv.DataDir)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one running `codecell serve`.
type server struct {
	t       testing.TB
	URL     string
	DataDir string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	logMu   *sync.Mutex
	done    chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs codecell serve with args added to small-pool defaults and
// waits until /healthz says ok. It is stopped (SIGTERM) when the test ends.
func startServer(t testing.TB, dataDir string, args ...string) *server {
	t.Helper()
	if dataDir == "" {
		dataDir = newDataDir(t)
	}
	addr := freePort(t)
	all := append([]string{"serve", "--listen", addr, "--data-dir", dataDir, "--pool-size", "2", "--gvisor-pool-size", "1", "--log-level", "debug"}, args...)
	s := &server{t: t, URL: "http://" + addr, DataDir: dataDir, log: &bytes.Buffer{}, logMu: &sync.Mutex{}, done: make(chan struct{})}
	s.cmd = exec.Command(binary, all...)
	s.cmd.Stdout = lockedWriter{s.logMu, s.log}
	s.cmd.Stderr = lockedWriter{s.logMu, s.log}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("server log:\n%s", s.Log())
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-s.done:
			t.Fatalf("server exited during start-up:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 3 minutes:\n%s", s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

func (s *server) Log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// stop signals the server and waits for it to exit.
func (s *server) stop(sig syscall.Signal) {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("server did not exit within 90s of %v", sig)
	}
}

// post sends a JSON body and decodes the JSON answer into out (if not nil).
func (s *server) post(t testing.TB, path string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", s.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s: answer is not JSON (%v): %s", path, err, raw)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp
}

// result mirrors the /v1/execute answer.
type result struct {
	Status     string  `json:"status"`
	ExitCode   int     `json:"exit_code"`
	Signal     *string `json:"signal"`
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	Truncated  bool    `json:"truncated"`
	DurationMs float64 `json:"duration_ms"`
	CPUMs      float64 `json:"cpu_ms"`
	MaxRSSKB   int64   `json:"max_rss_kb"`
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// exec runs code and requires a 200.
func (s *server) exec(t testing.TB, req map[string]any) result {
	t.Helper()
	var r result
	resp := s.post(t, "/v1/execute", req, &r)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /v1/execute %v: status %d: %s", req, resp.StatusCode, b)
	}
	return r
}

// py is a python request on runtime rt.
func py(rt, code string) map[string]any {
	return map[string]any{"language": "python", "code": code, "runtime": rt}
}

// requireHealthy asserts the daemon still answers and runs code.
func (s *server) requireHealthy(t testing.TB, rt string) {
	t.Helper()
	resp, err := http.Get(s.URL + "/healthz")
	if err != nil {
		t.Fatalf("healthz after attack: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz after attack: status %d", resp.StatusCode)
	}
	if r := s.exec(t, py(rt, "print(6*7)")); r.Status != "ok" || r.Stdout != "42\n" {
		t.Fatalf("run after attack: %+v", r)
	}
}

func mustTempDir() string {
	d, err := os.MkdirTemp("", "codecell-e2e")
	if err != nil {
		panic(err)
	}
	return d
}

func syscall9() syscall.Signal  { return syscall.SIGKILL }
func syscall15() syscall.Signal { return syscall.SIGTERM }

// newDataDir is a data directory the sandboxes' mapped uids can traverse
// (t.TempDir's parent is private to root).
func newDataDir(t testing.TB) string {
	d := mustTempDir()
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func decodeJSON(t testing.TB, resp *http.Response, out any) {
	t.Helper()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
}
