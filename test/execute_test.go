package e2e

import (
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/codecell/codecell/internal/testutil"
)

var runtimes = []string{"runc", "gvisor"}

// shared is one server for the tests that do not need special settings.
var (
	sharedOnce sync.Once
	sharedSrv  *server
)

func shared(t *testing.T) *server {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	testutil.RequiresBinary(t, "runsc")
	sharedOnce.Do(func() {
		// Not tied to one test's cleanup: it lives for the whole package run.
		sharedSrv = startServer(&packageTB{T: t}, "", "--output-cap", "4096", "--max-timeout", "30s", "--ws-ping-interval", "1s")
	})
	if sharedSrv == nil {
		t.Fatal("shared server failed to start")
	}
	return sharedSrv
}

// packageTB lets the shared server outlive the test that started it: its
// cleanup is never registered with that test.
type packageTB struct{ *testing.T }

func (p *packageTB) Cleanup(func())  {}
func (p *packageTB) TempDir() string { return mustTempDir() }

func TestExecuteSemantics(t *testing.T) {
	s := shared(t)
	tests := []struct {
		name       string
		lang, code string
		stdin      string
		env        map[string]string
		files      map[string]string
		wantStatus string
		wantExit   int
		wantOut    string
		wantErrHas string
	}{
		{name: "hello", lang: "python", code: "print('hello')", wantStatus: "ok", wantOut: "hello\n"},
		{name: "main guard", lang: "python", code: "if __name__ == '__main__':\n    print('main')", wantStatus: "ok", wantOut: "main\n"},
		{name: "dataclass decorator match", lang: "python", code: `
from dataclasses import dataclass, field
import functools
def twice(f):
    @functools.wraps(f)
    def g(*a): return f(*a) * 2
    return g
@dataclass
class P:
    x: int
    tags: list[str] = field(default_factory=list)
@twice
def area(p: P) -> int: return p.x
match P(3):
    case P(x=3): print(area(P(3)), P(1).tags, P.__annotations__["x"].__name__)
`, wantStatus: "ok", wantOut: "6 [] int\n"},
		{name: "argv like python -c", lang: "python", code: "import sys; print(sys.argv)", wantStatus: "ok", wantOut: "['-c']\n"},
		{name: "stdin", lang: "python", code: "import sys; print(sys.stdin.read().upper())", stdin: "abc", wantStatus: "ok", wantOut: "ABC\n"},
		{name: "env", lang: "python", code: "import os; print(os.environ['GREETING'])", env: map[string]string{"GREETING": "hi there"}, wantStatus: "ok", wantOut: "hi there\n"},
		{name: "files", lang: "python", code: "print(open('data/in.csv').read())", files: map[string]string{"data/in.csv": base64.StdEncoding.EncodeToString([]byte("a,b\n1,2"))}, wantStatus: "ok", wantOut: "a,b\n1,2\n"},
		{name: "exception", lang: "python", code: "x = 1\n1/0", wantStatus: "error", wantExit: 1, wantErrHas: "Traceback (most recent call last):\n  File \"<string>\", line 2, in <module>\nZeroDivisionError: division by zero\n"},
		{name: "syntax error", lang: "python", code: "print(", wantStatus: "error", wantExit: 1, wantErrHas: "SyntaxError"},
		{name: "SystemExit int", lang: "python", code: "print('a'); raise SystemExit(3)", wantStatus: "error", wantExit: 3, wantOut: "a\n"},
		{name: "SystemExit str", lang: "python", code: "import sys; sys.exit('bye')", wantStatus: "error", wantExit: 1, wantErrHas: "bye\n"},
		{name: "SystemExit zero", lang: "python", code: "import sys; print('x'); sys.exit(0)", wantStatus: "ok", wantOut: "x\n"},
		{name: "os._exit", lang: "python", code: "import os; print('kept', flush=True); os._exit(7)", wantStatus: "error", wantExit: 7, wantOut: "kept\n"},
		{name: "atexit and threads", lang: "python", code: "import atexit, threading, time\natexit.register(lambda: print('atexit'))\nthreading.Thread(target=lambda: (time.sleep(0.1), print('thread'))).start()\nprint('main')", wantStatus: "ok", wantOut: "main\nthread\natexit\n"},
		{name: "signal", lang: "python", code: "import os, signal; os.kill(os.getpid(), signal.SIGTERM)", wantStatus: "killed", wantExit: 143},
		{name: "bash", lang: "bash", code: "echo $((6*7)); echo err >&2; exit 4", wantStatus: "error", wantExit: 4, wantOut: "42\n", wantErrHas: "err\n"},
		{name: "javascript", lang: "javascript", code: "const x = [1,2,3].map(v => v*2); console.log(JSON.stringify(x))", wantStatus: "ok", wantOut: "[2,4,6]\n"},
		{name: "javascript throw", lang: "javascript", code: "throw new Error('boom')", wantStatus: "error", wantExit: 1, wantErrHas: "Error: boom"},
		{name: "numpy preloaded", lang: "python", code: "import sys; print('numpy' in sys.modules)", wantStatus: "ok", wantOut: "True\n"},
	}
	for _, rt := range runtimes {
		for _, tt := range tests {
			t.Run(rt+"/"+tt.name, func(t *testing.T) {
				req := map[string]any{"language": tt.lang, "code": tt.code, "runtime": rt, "stdin": tt.stdin}
				if tt.env != nil {
					req["env"] = tt.env
				}
				if tt.files != nil {
					req["files"] = tt.files
				}
				r := s.exec(t, req)
				if r.Status != tt.wantStatus || r.ExitCode != tt.wantExit {
					t.Errorf("status %q exit %d, want %q exit %d (stderr %q)", r.Status, r.ExitCode, tt.wantStatus, tt.wantExit, r.Stderr)
				}
				if tt.wantOut != "" && r.Stdout != tt.wantOut {
					t.Errorf("stdout %q, want %q", r.Stdout, tt.wantOut)
				}
				if !strings.Contains(r.Stderr, tt.wantErrHas) {
					t.Errorf("stderr %q, want it to contain %q", r.Stderr, tt.wantErrHas)
				}
			})
		}
	}
}

func TestTimeoutKeepsPartialOutput(t *testing.T) {
	s := shared(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			r := s.exec(t, map[string]any{"code": "import time\nprint('before', flush=True)\nwhile True: pass", "timeout_s": 1, "runtime": rt})
			if r.Status != "timeout" || r.Signal == nil || *r.Signal != "SIGKILL" || r.Stdout != "before\n" {
				t.Fatalf("got %+v, want timeout with SIGKILL and stdout %q", r, "before\n")
			}
			if r.DurationMs < 1000 {
				t.Errorf("duration %.0f ms, want at least the 1000 ms time-out", r.DurationMs)
			}
			s.requireHealthy(t, rt)
		})
	}
}

func TestOutputCap(t *testing.T) {
	s := shared(t) // output cap 4096 bytes per stream
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			r := s.exec(t, map[string]any{"code": "import sys\nsys.stdout.write('x' * 100000)\nsys.stderr.write('e' * 10)", "runtime": rt})
			if r.Status != "ok" || !r.Truncated || r.Stdout != strings.Repeat("x", 4096) || r.Stderr != "eeeeeeeeee" {
				t.Fatalf("got status %s truncated %v, %d stdout bytes, stderr %q; want ok, truncated, 4096 x's, 10 e's", r.Status, r.Truncated, len(r.Stdout), r.Stderr)
			}
			// A flood that never ends is cut too, and ended by the time-out.
			r = s.exec(t, map[string]any{"language": "bash", "code": "yes flood", "timeout_s": 1, "runtime": rt})
			if r.Status != "timeout" || !r.Truncated || len(r.Stdout) != 4096 || !strings.HasPrefix(r.Stdout, "flood\nflood\n") {
				t.Fatalf("flood: status %s truncated %v, %d bytes", r.Status, r.Truncated, len(r.Stdout))
			}
			s.requireHealthy(t, rt)
		})
	}
}

func TestResourceFigures(t *testing.T) {
	s := shared(t)
	r := s.exec(t, py("runc", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\nb = bytearray(64 << 20)\nb[::4096] = b'x' * len(b[::4096])"))
	if r.Status != "ok" || r.CPUMs < 200 || r.MaxRSSKB < 64<<10 {
		t.Fatalf("got %+v: want ok with cpu_ms >= 200 and max_rss_kb >= 65536", r)
	}
}

func TestUnknownRouteIsJSON(t *testing.T) {
	s := shared(t)
	var e apiError
	resp := s.post(t, "/v1/nope", "{}", &e)
	if resp.StatusCode != http.StatusNotFound || e.Error.Code != "not_found" {
		t.Fatalf("got %d %+v", resp.StatusCode, e)
	}
}
