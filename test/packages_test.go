package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecell/codecell/internal/localindex"
	"github.com/codecell/codecell/internal/testutil"
)

// pkgServer is a server whose packages come from a local PEP 503 index and
// npm registry, with two templates.
var (
	pkgOnce  sync.Once
	pkgSrv   *server
	pkgIndex *localindex.Server
)

func packagesServer(t *testing.T) (*server, *localindex.Server) {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	testutil.RequiresBinary(t, "runsc")
	pkgOnce.Do(func() {
		idx, err := localindex.Start([]localindex.Wheel{
			// cv2 is opencv-python's import name; numpy is Debian's, already in the image.
			{Name: "opencv-python", Version: "4.0.1", Requires: []string{"celldep>=1.0", "numpy"},
				Files: map[string]string{"cv2/__init__.py": "MARKER = 'cv2 from the local index'\n"}},
			{Name: "celldep", Version: "1.2", Files: map[string]string{"celldep.py": "X = 42\n"}},
			{Name: "cellpin", Version: "1.0", Files: map[string]string{"cellpin.py": "V = 1\n"}},
			{Name: "cellpin", Version: "2.0", Files: map[string]string{"cellpin.py": "V = 2\n"}},
			{Name: "cellorphan", Version: "1.0", Requires: []string{"nowhere-to-be-found"}, Files: map[string]string{"cellorphan.py": ""}},
		}, []localindex.NPMPackage{
			{Name: "cellpad", Version: "1.0.0", Main: "index.js", Files: map[string]string{"index.js": "module.exports = s => '[' + s + ']';\n"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		pkgIndex = idx
		dir := mustTempDir()
		templates := filepath.Join(dir, "templates.yaml")
		os.WriteFile(templates, []byte(`templates:
  vision:
    packages: {python: [cv2]}
    preload: [cv2]
    env: {TEMPLATE_NAME: vision}
    memory_mb: 384
  guarded:
    allowed_imports: [math]
  broken:
    packages: {python: [no-such-package]}
`), 0o644)
		pkgSrv = startServer(&packageTB{T: t}, "", "--pip-index-url", idx.PipIndex(), "--npm-registry", idx.NPMRegistry(),
			"--templates", templates, "--gvisor-pool-size", "1", "--pool-size", "1")
	})
	if pkgSrv == nil {
		t.Fatal("packages server failed to start")
	}
	return pkgSrv, pkgIndex
}

// pkgResult is /v1/execute's answer with its packages and network reports.
type pkgResult struct {
	result
	Packages *struct {
		Python     []string          `json:"python"`
		JavaScript []string          `json:"javascript"`
		Skipped    map[string]string `json:"skipped"`
		Corrected  map[string]string `json:"corrected"`
		Layers     []struct {
			Key          string   `json:"key"`
			Kind         string   `json:"kind"`
			Requirements []string `json:"requirements"`
			Built        bool     `json:"built"`
		} `json:"layers"`
	} `json:"packages"`
	Network *struct {
		Allow   []string `json:"allow"`
		Allowed int      `json:"allowed"`
		Denied  int      `json:"denied"`
	} `json:"network"`
}

func (s *server) execPkg(t *testing.T, req map[string]any) pkgResult {
	t.Helper()
	var r pkgResult
	resp := s.post(t, "/v1/execute", req, &r)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /v1/execute %v: %d %s", req, resp.StatusCode, b)
	}
	return r
}

func TestPackagesInstallOnceThenReuse(t *testing.T) {
	s, idx := packagesServer(t)
	for _, rt := range []string{"runc", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			code := "import cv2, celldep, numpy; print(cv2.MARKER, celldep.X, numpy.__file__)"
			req := map[string]any{"runtime": rt, "code": code, "packages": map[string]any{"python": []string{"cv2", "dataclass", "os", "numpy"}}}
			first := s.execPkg(t, req)
			want := "cv2 from the local index 42 /usr/lib/python3/dist-packages/numpy/__init__.py\n"
			if first.Status != "ok" || first.Stdout != want {
				t.Fatalf("first run: %s %q %q, want %q", first.Status, first.Stdout, first.Stderr, want)
			}
			p := first.Packages
			if p == nil || fmt.Sprint(p.Python) != "[opencv-python]" || p.Corrected["dataclass"] != "dataclasses" ||
				p.Skipped["os"] != "standard library" || p.Skipped["dataclass"] != "standard library" || !strings.HasPrefix(p.Skipped["numpy"], "preinstalled (numpy ") {
				t.Fatalf("first run's packages report: %+v", p)
			}
			if len(p.Layers) != 1 || p.Layers[0].Kind != "python" || fmt.Sprint(p.Layers[0].Requirements) != "[opencv-python]" {
				t.Fatalf("layers: %+v", p.Layers)
			}
			hits := idx.Hits("/simple/opencv-python/")
			second := s.execPkg(t, req)
			if second.Stdout != want || second.Packages.Layers[0].Built || second.Packages.Layers[0].Key != p.Layers[0].Key {
				t.Fatalf("second run: %q %+v, want the same layer reused", second.Stdout, second.Packages.Layers)
			}
			if got := idx.Hits("/simple/opencv-python/"); got != hits {
				t.Fatalf("the second run asked the index again (%d -> %d hits)", hits, got)
			}
			if idx.Hits("/simple/numpy/") != 0 {
				t.Fatal("numpy, which the image has, was asked of the index")
			}
			// The layer is read-only to the code that uses it.
			w := s.execPkg(t, map[string]any{"runtime": rt, "language": "python", "packages": map[string]any{"python": []string{"cv2"}},
				"code": "import cv2, os\nd = os.path.dirname(cv2.__file__)\nprint([l.split()[3].split(',')[0] for l in open('/proc/self/mounts') if l.split()[1] == '/.codecell/layers/python'] == ['ro'])\ntry:\n    open(os.path.join(d, 'x'), 'w')\nexcept OSError as e:\n    print('refused')"})
			if w.Stdout != "True\nrefused\n" {
				t.Fatalf("writing into the layer: %q %q, want a read-only mount that refuses the write", w.Stdout, w.Stderr)
			}
		})
	}
	// The first runtime built it, the second found it built.
	if n := idx.Hits("/files/opencv_python-4.0.1-py3-none-any.whl"); n != 1 {
		t.Fatalf("the wheel was downloaded %d times, want 1", n)
	}
}

func TestPackagesConcurrentRequestsBuildOnce(t *testing.T) {
	s, idx := packagesServer(t)
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.execPkg(t, map[string]any{"code": "import cellpin; print(cellpin.V)", "packages": map[string]any{"python": []string{"cellpin==1.0"}}})
			outs[i] = r.Stdout
		}()
	}
	wg.Wait()
	if fmt.Sprint(outs) != "[1\n 1\n 1\n 1\n]" {
		t.Fatalf("outputs %q, want cellpin 1 (the pinned version) four times", outs)
	}
	if n := idx.Hits("/files/cellpin-1.0-py3-none-any.whl"); n != 1 {
		t.Fatalf("four concurrent requests downloaded the wheel %d times, want 1 build", n)
	}
	// Without a pin, the newest.
	if r := s.execPkg(t, map[string]any{"code": "import cellpin; print(cellpin.V)", "packages": map[string]any{"python": []string{"cellpin"}}}); r.Stdout != "2\n" {
		t.Fatalf("unpinned cellpin: %q %q", r.Stdout, r.Stderr)
	}
}

func TestPackagesFailuresAreClear(t *testing.T) {
	s, _ := packagesServer(t)
	for _, tc := range []struct {
		name, pkg, code, message string
	}{
		{"unknown package", "no-such-package", "invalid_request", "ERROR: Could not find a version that satisfies the requirement no-such-package"},
		{"missing dependency", "cellorphan", "invalid_request", "No matching distribution found for nowhere-to-be-found"},
		{"not a requirement", "https://evil.example/x.whl", "invalid_request", `python package "https://evil.example/x.whl": expected an import or distribution name`},
		{"an option", "--index-url=http://evil", "invalid_request", "URLs, paths, options and markers are not accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e apiError
			resp := s.post(t, "/v1/execute", map[string]any{"code": "1", "packages": map[string]any{"python": []string{tc.pkg}}}, &e)
			if resp.StatusCode != 400 || e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.message) ||
				tc.code == "invalid_request" && strings.HasPrefix(tc.message, "ERROR") && !strings.HasPrefix(e.Error.Message, "install python packages "+tc.pkg+": ") {
				t.Fatalf("got %d %s %q, want 400 %s containing %q", resp.StatusCode, e.Error.Code, e.Error.Message, tc.code, tc.message)
			}
		})
	}
	entries, _ := os.ReadDir(filepath.Join(s.DataDir, "layers"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".build-") {
			t.Errorf("a failed build left %s behind", e.Name())
		}
		raw, _ := os.ReadFile(filepath.Join(s.DataDir, "layers", e.Name(), "layer.json"))
		if strings.Contains(string(raw), "cellorphan") || strings.Contains(string(raw), "no-such-package") {
			t.Errorf("a failed build left a layer: %s", raw)
		}
	}
	s.requireHealthy(t, "runc")
}

func TestPackagesIndexDown(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	s := startServer(t, "", "--pip-index-url", "http://"+dead+"/simple/", "--gvisor-pool-size", "0", "--pool-size", "1")
	var e apiError
	resp := s.post(t, "/v1/execute", map[string]any{"code": "1", "packages": map[string]any{"python": []string{"cv2"}}}, &e)
	if resp.StatusCode != 503 || e.Error.Code != "unavailable" ||
		!strings.HasPrefix(e.Error.Message, "install python packages opencv-python: the package index at http://"+dead+"/simple/ cannot be reached") {
		t.Fatalf("index down: %d %s %q, want 503 naming the package and the index", resp.StatusCode, e.Error.Code, e.Error.Message)
	}
	s.requireHealthy(t, "runc")
}

func TestPackagesJavaScript(t *testing.T) {
	s, _ := packagesServer(t)
	r := s.execPkg(t, map[string]any{"language": "javascript", "code": `console.log(require("cellpad")("hi"))`,
		"packages": map[string]any{"javascript": []string{"cellpad", "fs"}}})
	if r.Status != "ok" || r.Stdout != "[hi]\n" || r.Packages.Skipped["fs"] != "node built-in" || fmt.Sprint(r.Packages.JavaScript) != "[cellpad]" {
		t.Fatalf("javascript package: %s %q %q %+v", r.Status, r.Stdout, r.Stderr, r.Packages)
	}
	// The same layer in a session's node kernel.
	info := s.createSandbox(t, map[string]any{"packages": map[string]any{"javascript": []string{"cellpad"}}})
	if st := s.step(t, info.ID, "javascript", `const pad = require("cellpad"); pad("kernel")`, 0); value(st) != "'[kernel]'" {
		t.Fatalf("session step: value %s, stderr %q", value(st), st.Stderr)
	}
	var e apiError
	if resp := s.post(t, "/v1/execute", map[string]any{"code": "1", "language": "javascript", "packages": map[string]any{"javascript": []string{"no-such-npm-package"}}}, &e); resp.StatusCode != 400 ||
		!strings.Contains(e.Error.Message, "install javascript packages no-such-npm-package") || !strings.Contains(e.Error.Message, "404") {
		t.Fatalf("unknown npm package: %d %q", resp.StatusCode, e.Error.Message)
	}
}

func TestPackagesSessionAndOpenEnv(t *testing.T) {
	s, _ := packagesServer(t)
	var info struct {
		sandboxInfo
		Packages struct {
			Python []string `json:"python"`
			Layers []struct {
				Built bool `json:"built"`
			} `json:"layers"`
		} `json:"packages"`
	}
	resp := s.post(t, "/v1/sandboxes", map[string]any{"packages": map[string]any{"python": []string{"no-such-package", "cv2"}}}, nil)
	if resp.StatusCode != 400 {
		t.Fatalf("session with a package the index lacks: %d", resp.StatusCode)
	}
	resp = s.post(t, "/v1/sandboxes", map[string]any{"packages": map[string]any{"python": []string{"cv2"}}}, &info)
	if resp.StatusCode != 201 || fmt.Sprint(info.Packages.Python) != "[opencv-python]" {
		t.Fatalf("create with packages: %d %+v", resp.StatusCode, info)
	}
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil) })
	s.step(t, info.ID, "python", "import cv2", 0)
	if st := s.step(t, info.ID, "python", "cv2.MARKER", 0); value(st) != "'cv2 from the local index'" {
		t.Fatalf("session step: %s %q", value(st), st.Stderr)
	}
	if st := s.step(t, info.ID, "bash", "python3 -c 'import celldep; print(celldep.X)'", 0); st.Stdout != "42\n" {
		t.Fatalf("a subprocess does not see the layer: %q %q", st.Stdout, st.Stderr)
	}

	// OpenEnv's reset takes coding_env's additional_imports.
	var obs struct {
		Observation struct {
			Metadata struct {
				Packages struct {
					Python    []string          `json:"python"`
					Corrected map[string]string `json:"corrected"`
				} `json:"packages"`
			} `json:"metadata"`
		} `json:"observation"`
	}
	if resp := s.post(t, "/reset", map[string]any{"additional_imports": []string{"cv2", "dataclass"}}, &obs); resp.StatusCode != 200 ||
		fmt.Sprint(obs.Observation.Metadata.Packages.Python) != "[opencv-python]" || obs.Observation.Metadata.Packages.Corrected["dataclass"] != "dataclasses" {
		t.Fatalf("openenv reset with additional_imports: %d %+v", resp.StatusCode, obs)
	}
	var stepObs struct {
		Observation struct {
			Stdout string `json:"stdout"`
		} `json:"observation"`
	}
	s.post(t, "/step", map[string]any{"action": map[string]any{"code": "import cv2, dataclasses; print(cv2.MARKER)"}}, &stepObs)
	if stepObs.Observation.Stdout != "cv2 from the local index\n" {
		t.Fatalf("openenv step after reset with additional_imports: %+v", stepObs)
	}
}

func TestNetworkAllowList(t *testing.T) {
	s, _ := packagesServer(t)
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the host") }))
	defer allowed.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "leaked") }))
	defer denied.Close()
	host := strings.TrimPrefix(allowed.URL, "http://")
	code := fmt.Sprintf(`import socket, urllib.request, urllib.error
print(urllib.request.urlopen(%q, timeout=5).read().decode())
try:
    urllib.request.urlopen(%q, timeout=5)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
for addr in [(%q, %d), ("1.1.1.1", 80)]:
    try:
        socket.create_connection(addr, timeout=2)
        print("raw socket connected")
    except OSError as e:
        print("raw", e.errno)
try:
    print(socket.getaddrinfo("pypi.org", 443))
except socket.gaierror as e:
    print("dns", e.errno)
`, allowed.URL, denied.URL, "127.0.0.1", allowed.Listener.Addr().(*net.TCPAddr).Port)
	for _, rt := range []string{"runc", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			r := s.execPkg(t, map[string]any{"runtime": rt, "code": code, "network": map[string]any{"allow": []string{host}}})
			deniedHost := strings.TrimPrefix(denied.URL, "http://")
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			// The sandbox's 127.0.0.1 is its own: the host's server is reachable only by proxy.
			want := []string{"hello from the host",
				"403 codecell: egress to " + deniedHost + " is not allowed for this sandbox (allowed: " + host + ")",
				"raw 111", "raw 101", "dns -2"} // ECONNREFUSED, ENETUNREACH, EAI_NONAME
			if rt == "gvisor" {
				want[3] = "raw 113" // gVisor's stack says EHOSTUNREACH
			}
			if fmt.Sprint(lines) != fmt.Sprint(want) {
				t.Fatalf("inside the sandbox:\n got %q\nwant %q\nstderr %s", lines, want, r.Stderr)
			}
			if r.Network == nil || r.Network.Allowed != 1 || r.Network.Denied != 1 {
				t.Fatalf("network report %+v, want 1 allowed and 1 denied", r.Network)
			}
			if !strings.Contains(s.Log(), "egress denied") || !strings.Contains(s.Log(), "dest="+deniedHost) {
				t.Fatal("the denial is not in the server's log")
			}
		})
	}
	// HTTPS clients tunnel with CONNECT: curl -p forces a tunnel.
	r0 := s.execPkg(t, map[string]any{"language": "bash", "code": "curl -sS -p -m 5 " + allowed.URL + "; echo; curl -sS -p -m 5 https://example.org/ 2>&1",
		"network": map[string]any{"allow": []string{host}}})
	if !strings.HasPrefix(r0.Stdout, "hello from the host\ncurl: (56) CONNECT tunnel failed, response 403") || r0.Network.Allowed != 1 || r0.Network.Denied != 1 {
		t.Fatalf("CONNECT through the gate: %q %+v", r0.Stdout, r0.Network)
	}
	// Without "network", no proxy works either.
	r := s.execPkg(t, map[string]any{"language": "bash", "code": "curl -sS -m 5 -x http://127.0.0.1:3128 " + allowed.URL})
	if r.Stdout != "codecell: this sandbox has no network access; create it with \"network\": {\"allow\": [hosts]}\n" {
		t.Fatalf("proxy without network: %q %q", r.Stdout, r.Stderr)
	}
	// A session keeps its gate across steps and reports its counts.
	info := s.createSandbox(t, map[string]any{"network": map[string]any{"allow": []string{host}}})
	st := s.step(t, info.ID, "python", fmt.Sprintf("import urllib.request\nurllib.request.urlopen(%q).read().decode()", allowed.URL), 0)
	if value(st) != "'hello from the host'" {
		t.Fatalf("session step: %s %q", value(st), st.Stderr)
	}
	var got struct {
		Network struct{ Allowed, Denied int } `json:"network"`
	}
	s.do(t, "GET", "/v1/sandboxes/"+info.ID, &got)
	if got.Network.Allowed != 1 || got.Network.Denied != 0 {
		t.Fatalf("session network report %+v", got.Network)
	}
	var e apiError
	if resp := s.post(t, "/v1/execute", map[string]any{"code": "1", "network": map[string]any{"allow": []string{"http://pypi.org"}}}, &e); resp.StatusCode != 400 ||
		!strings.Contains(e.Error.Message, `network.allow entry "http://pypi.org"`) {
		t.Fatalf("bad allow entry: %d %q", resp.StatusCode, e.Error.Message)
	}
	s.requireHealthy(t, "runc")
}

func TestAllowedImports(t *testing.T) {
	s, _ := packagesServer(t)
	info := s.createSandbox(t, map[string]any{"allowed_imports": []string{"math", "numpy"}})
	if st := s.step(t, info.ID, "python", "import math, numpy\nnumpy.sqrt(math.pi) > 1", 0); value(st) != "True" {
		t.Fatalf("allowed imports: %s %q", value(st), st.Stderr)
	}
	for _, code := range []string{"import os", "from os import path", "import subprocess as sp"} {
		st := s.step(t, info.ID, "python", code, 0)
		mod := strings.Fields(code)[1]
		want := fmt.Sprintf("import of '%s' is not allowed; allowed: ['math', 'numpy']", mod)
		if st.Error == nil || st.Error.Name != "ImportError" || st.Error.Value != want {
			t.Fatalf("%s: error %+v, want ImportError %q", code, st.Error, want)
		}
	}
	// Stateless runs, and a template's list.
	r := s.execPkg(t, map[string]any{"code": "import math\nimport json", "allowed_imports": []string{"math"}})
	if r.Status != "error" || !strings.Contains(r.Stderr, "ImportError: import of 'json' is not allowed; allowed: ['math']") {
		t.Fatalf("stateless guard: %s %q", r.Status, r.Stderr)
	}
	r = s.execPkg(t, map[string]any{"code": "import math; import os", "template": "guarded"})
	if !strings.Contains(r.Stderr, "ImportError: import of 'os' is not allowed; allowed: ['math']") {
		t.Fatalf("template guard: %q", r.Stderr)
	}
}

func TestTemplates(t *testing.T) {
	s, _ := packagesServer(t)
	var health struct {
		Pools map[string]struct {
			Ready bool   `json:"ready"`
			Size  int    `json:"size"`
			Error string `json:"error"`
		} `json:"pools"`
	}
	// The template's pool starts with its packages installed and cv2 imported.
	r := s.execPkg(t, map[string]any{"template": "vision", "code": "import os, sys; print('cv2' in sys.modules, os.environ['TEMPLATE_NAME']); import cv2; print(cv2.MARKER)"})
	if r.Status != "ok" || r.Stdout != "True vision\ncv2 from the local index\n" {
		t.Fatalf("template run: %s %q %q", r.Status, r.Stdout, r.Stderr)
	}
	s.do(t, "GET", "/healthz", &health)
	if p := health.Pools["template vision"]; !p.Ready || p.Size != 1 {
		t.Fatalf("template pool in healthz: %+v", health.Pools)
	}
	// A template whose package the index lacks says so, and is not retried.
	for deadline := time.Now().Add(time.Minute); health.Pools["template broken"].Error == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s.do(t, "GET", "/healthz", &health)
	}
	if p := health.Pools["template broken"]; p.Ready || !strings.Contains(p.Error, `template "broken": install python packages no-such-package`) {
		t.Fatalf("broken template in healthz: %+v", p)
	}
	var e apiError
	resp := s.post(t, "/v1/execute", map[string]any{"code": "1", "template": "broken"}, &e)
	if resp.StatusCode != 503 || !strings.Contains(e.Error.Message, "No matching distribution found for no-such-package") {
		t.Fatalf("broken template: %d %q", resp.StatusCode, e.Error.Message)
	}
	var info struct {
		sandboxInfo
		Template string `json:"template"`
	}
	resp = s.post(t, "/v1/sandboxes", map[string]any{"template": "vision"}, &info)
	if resp.StatusCode != 201 || info.Template != "vision" || info.MemoryMB != 384 {
		t.Fatalf("create from template: %d %+v", resp.StatusCode, info)
	}
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil) })
	if st := s.step(t, info.ID, "python", "import sys; 'cv2' in sys.modules", 0); value(st) != "True" {
		t.Fatalf("template session: %s %q", value(st), st.Stderr)
	}
	resp = s.post(t, "/v1/execute", map[string]any{"code": "1", "template": "nope"}, &e)
	if resp.StatusCode != 400 || e.Error.Message != `unknown template "nope"; this server has: broken, guarded, vision` {
		t.Fatalf("unknown template: %d %q", resp.StatusCode, e.Error.Message)
	}
	resp = s.post(t, "/v1/execute", map[string]any{"code": "1", "template": "vision", "packages": map[string]any{"python": []string{"celldep"}}}, &e)
	if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "add them to the template") {
		t.Fatalf("template plus packages: %d %q", resp.StatusCode, e.Error.Message)
	}
	var layers struct {
		Layers []struct {
			Requirements []string `json:"requirements"`
			InUse        int      `json:"in_use"`
		} `json:"layers"`
	}
	s.do(t, "GET", "/v1/layers", &layers)
	raw, _ := json.Marshal(layers)
	if !strings.Contains(string(raw), `"requirements":["opencv-python"]`) {
		t.Fatalf("layers: %s", raw)
	}
}
