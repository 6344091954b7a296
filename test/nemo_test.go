package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

type nemoResult struct {
	ProcessStatus string `json:"process_status"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
}

// The scenarios of NeMo Agent Toolkit's own sandbox test suite, each with
// timeout 30, plus the cases its server gets wrong.
func TestNemoExecute(t *testing.T) {
	s := shared(t)
	tests := []struct {
		name, code string
		status     string
		stdout     string
		stderrHas  string
	}{
		{"hello world", "print('Hello, World!')", "completed", "Hello, World!\n", ""},
		{"arithmetic", "result = 2 + 3 * 4\nprint(result)", "completed", "14\n", ""},
		{"numpy", "import numpy as np\nprint(np.array([1, 2, 3, 4, 5]).mean())", "completed", "3.0\n", ""},
		{"pandas", "import pandas as pd\ndf = pd.DataFrame({'A': [1, 2, 3], 'B': [4, 5, 6]})\nprint(df['A'].sum())", "completed", "6\n", ""},
		{"plotly", "import plotly.graph_objects as go\nfig = go.Figure(data=go.Bar(x=['a'], y=[1]))\nprint(type(fig).__name__)", "completed", "Figure\n", ""},
		{"syntax error", "print('unclosed", "error", "", "SyntaxError"},
		{"zero division", "print(1/0)", "error", "", "ZeroDivisionError: division by zero"},
		{"missing module", "import not_a_module_xyz", "error", "", "ModuleNotFoundError"},
		{"mixed streams", "import sys\nprint('out')\nprint('err', file=sys.stderr)", "completed", "out\n", "err\n"},
		{"sleeps", "import time\nfor i in range(3):\n    time.sleep(0.5)\n    print(i)", "completed", "0\n1\n2\n", ""},
		{"dict format", "{'generated_code': 'print(\"dict ok\")'}", "completed", "dict ok\n", ""},
		{"markdown format", "```python\nprint('markdown ok')\n```", "completed", "markdown ok\n", ""},
		{"markdown with prose", "Sure! Here it is:\n```py\nprint(7)\n```\nDone.", "completed", "7\n", ""},
		{"file write read delete", "import os\nwith open('t.txt', 'w') as f: f.write('data')\nprint(open('t.txt').read())\nos.remove('t.txt')\nprint(os.path.exists('t.txt'))", "completed", "data\nFalse\n", ""},
		{"json", "import json\njson.dump({'k': [1, 2]}, open('d.json', 'w'))\nprint(json.load(open('d.json'))['k'])", "completed", "[1, 2]\n", ""},
		{"SystemExit does not hang", "raise SystemExit(0)", "completed", "", ""},
		{"__name__ is __main__", "print(__name__)", "completed", "__main__\n", ""},
		{"large output", "print('x' * 100000)", "completed", strings.Repeat("x", 4096), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r nemoResult
			resp := s.post(t, "/execute", map[string]any{"generated_code": tt.code, "timeout": 30, "language": "python"}, &r)
			if resp.StatusCode != 200 || r.ProcessStatus != tt.status {
				t.Fatalf("got %d %+v, want 200 %s", resp.StatusCode, r, tt.status)
			}
			if tt.stdout != "" && r.Stdout != tt.stdout && !(tt.name == "large output" && strings.HasPrefix(r.Stdout, tt.stdout)) {
				t.Errorf("stdout %q, want %q", r.Stdout, tt.stdout)
			}
			if !strings.Contains(r.Stderr, tt.stderrHas) {
				t.Errorf("stderr %q, want it to contain %q", r.Stderr, tt.stderrHas)
			}
		})
	}
}

func TestNemoTimeoutKeepsOutput(t *testing.T) {
	s := shared(t)
	var r nemoResult
	resp := s.post(t, "/execute", map[string]any{"generated_code": "print('partial', flush=True)\nwhile True: pass", "timeout": 1}, &r)
	if resp.StatusCode != 200 || r.ProcessStatus != "timeout" || r.Stdout != "partial\n" || r.Stderr != "Timed out\n" {
		t.Fatalf("got %d %+v", resp.StatusCode, r)
	}
}

func TestNemoBadRequests(t *testing.T) {
	s := shared(t)
	tests := []struct {
		name, contentType, body, stderr string
	}{
		{"not JSON content type", "text/plain", `{"generated_code": "1", "timeout": 1}`, "Request must be JSON"},
		{"invalid JSON", "application/json", `{"generated_code": `, "Invalid JSON data"},
		{"missing code", "application/json", `{"timeout": 1}`, "Missing required field: generated_code"},
		{"missing timeout", "application/json", `{"generated_code": "1"}`, "Missing required field: timeout"},
		{"unsupported language", "application/json", `{"generated_code": "1", "timeout": 1, "language": "cobol"}`, `unknown language "cobol"; supported: python, bash, javascript`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.URL+"/execute", strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var r nemoResult
			decodeJSON(t, resp, &r)
			if resp.StatusCode != 400 || r.ProcessStatus != "error" || r.Stdout != "" || !strings.Contains(r.Stderr, tt.stderr) {
				t.Fatalf("got %d %+v, want 400 error with stderr containing %q", resp.StatusCode, r, tt.stderr)
			}
		})
	}
	// Other languages are answered normally.
	var r nemoResult
	s.post(t, "/execute", map[string]any{"generated_code": "echo $((2+2))", "timeout": 5, "language": "bash"}, &r)
	if r.ProcessStatus != "completed" || r.Stdout != "4\n" {
		t.Fatalf("bash: %+v", r)
	}
}

// Upstream runs every request in one working directory and its suite writes
// files with pandas and numpy in one request and reads them in the next.
// Files persist; processes do not; stateless /v1/execute runs see none of it.
func TestNemoFilesPersistBetweenRequests(t *testing.T) {
	s := shared(t)
	nemo := func(code string) nemoResult {
		t.Helper()
		var r nemoResult
		resp := s.post(t, "/execute", map[string]any{"generated_code": code, "timeout": 30, "language": "python"}, &r)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %+v", resp.StatusCode, r)
		}
		return r
	}
	w := nemo("import numpy as np, pandas as pd, subprocess\npd.DataFrame({'a': [1, 2, 3]}).to_csv('frame.csv', index=False)\nnp.save('arr.npy', np.arange(4))\nsubprocess.Popen(['sleep', '300'])\nprint('written')")
	if w.ProcessStatus != "completed" || w.Stdout != "written\n" {
		t.Fatalf("write: %+v", w)
	}
	r := nemo("import numpy as np, pandas as pd, os\nprint(pd.read_csv('frame.csv')['a'].sum(), np.load('arr.npy').sum(), os.getcwd())\nprint([p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline').read().split('\\0')[0] == 'sleep'])")
	if r.ProcessStatus != "completed" || r.Stdout != "6 6 /workspace\n[]\n" {
		t.Fatalf("read back: %+v", r)
	}
	stateless := s.exec(t, py("runc", "import os\nprint(os.path.exists('/workspace/frame.csv'))"))
	if stateless.Stdout != "False\n" {
		t.Fatalf("a stateless run saw NeMo's files: %+v", stateless)
	}
}

// OpenEnv's older PythonSandboxEnv clients: POST /exec.
func TestPythonSandboxEnvExec(t *testing.T) {
	s := shared(t)
	cases := []struct {
		body   any
		status int
		want   string
	}{
		{map[string]any{"code": "print(6 * 7)"}, 200, `{"output":"42\n"}`},
		{map[string]any{"code": "import sys\nprint('x')\nsys.exit('bad')"}, 400, `{"detail":"bad\n"}`},
		{map[string]any{"code": 5}, 422, `"loc":["body","code"]`},
		{map[string]any{"source": "1"}, 422, `"msg":"Field required"`},
		{"{", 422, `"type":"json_invalid"`},
		{map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(60)"}, 408, `"detail":"Execution timed out after 10s`}, // the server's default time-out
	}
	for _, c := range cases {
		resp := s.post(t, "/exec", c.body, nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%v: %d %s, want %d with %s", c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
}
