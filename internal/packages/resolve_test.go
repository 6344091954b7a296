package packages

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func testEnv() *Env {
	return &Env{Python: "3.11.2",
		Stdlib:       map[string]bool{"os": true, "dataclasses": true, "json": true, "math": true},
		Modules:      map[string]bool{"numpy": true, "matplotlib": true, "yaml": true, "os": true},
		Dists:        map[string]string{"numpy": "1.24.2", "matplotlib": "3.6.3", "pyyaml": "6.0"},
		NodeBuiltins: map[string]bool{"fs": true, "path": true},
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       Request
		python    []string
		js        []string
		skipped   map[string]string
		corrected map[string]string
	}{
		{name: "stdlib", req: Request{Python: []string{"os", "json"}},
			skipped: map[string]string{"os": "standard library", "json": "standard library"}},
		{name: "typo to stdlib", req: Request{Python: []string{"dataclass"}},
			skipped: map[string]string{"dataclass": "standard library"}, corrected: map[string]string{"dataclass": "dataclasses"}},
		{name: "import names mapped", req: Request{Python: []string{"PIL", "sklearn==1.5", "cv2", "bs4"}},
			python: []string{"beautifulsoup4", "opencv-python", "pillow", "scikit-learn==1.5"}},
		{name: "preinstalled by dist", req: Request{Python: []string{"yaml", "numpy>=1.20", "matplotlib.pyplot"}},
			skipped: map[string]string{"yaml": "preinstalled (pyyaml 6.0)", "numpy>=1.20": "preinstalled (numpy 1.24.2 satisfies >=1.20)",
				"matplotlib.pyplot": "preinstalled (matplotlib 3.6.3)"}},
		{name: "preinstalled too old", req: Request{Python: []string{"numpy >= 2.0 , <3"}}, python: []string{"numpy>=2.0,<3"}},
		{name: "extras and normalization", req: Request{Python: []string{"Requests[socks]", "zope.interface", "Foo_Bar"}},
			python: []string{"foo-bar", "requests[socks]", "zope-interface"}},
		{name: "typo-squat corrected", req: Request{Python: []string{"request"}}, python: []string{"requests"},
			corrected: map[string]string{"request": "requests"}},
		{name: "duplicates once", req: Request{Python: []string{"PIL", "pillow"}}, python: []string{"pillow"}},
		{name: "javascript", req: Request{JavaScript: []string{"lodash", "@types/node@^20", "fs", "node:path", "left-pad@1.3.0"}},
			js: []string{"@types/node@^20", "left-pad@1.3.0", "lodash"}, skipped: map[string]string{"fs": "node built-in", "node:path": "node built-in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Resolve(tc.req, testEnv())
			if err != nil {
				t.Fatal(err)
			}
			if tc.skipped == nil {
				tc.skipped = map[string]string{}
			}
			if tc.corrected == nil {
				tc.corrected = map[string]string{}
			}
			if tc.python == nil {
				tc.python = []string{}
			}
			if tc.js == nil {
				tc.js = []string{}
			}
			if !reflect.DeepEqual(p.Python, tc.python) || !reflect.DeepEqual(p.JavaScript, tc.js) ||
				!reflect.DeepEqual(p.Skipped, tc.skipped) || !reflect.DeepEqual(p.Corrected, tc.corrected) {
				t.Errorf("got python %q js %q skipped %v corrected %v\nwant python %q js %q skipped %v corrected %v",
					p.Python, p.JavaScript, p.Skipped, p.Corrected, tc.python, tc.js, tc.skipped, tc.corrected)
			}
		})
	}
}

func TestResolveRejects(t *testing.T) {
	for _, tc := range []Request{
		{Python: []string{"https://evil.example/x.whl"}}, {Python: []string{"-e ."}}, {Python: []string{"--index-url=http://x"}},
		{Python: []string{"pkg; python_version<'3'"}}, {Python: []string{"pkg @ file:///etc"}}, {Python: []string{""}},
		{JavaScript: []string{"git+https://github.com/x/y"}}, {JavaScript: []string{"../local"}}, {JavaScript: []string{"file:/etc"}},
		{JavaScript: []string{"Lodash"}},
	} {
		if _, err := Resolve(tc, testEnv()); err == nil || !strings.Contains(err.Error(), "package") {
			t.Errorf("Resolve(%v) err = %v, want a clear rejection", tc, err)
		}
	}
}

func TestProbe(t *testing.T) {
	env, err := Probe(context.Background(), []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"})
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	if !strings.HasPrefix(env.Python, "3.") || !env.Stdlib["dataclasses"] || env.Stdlib["numpy"] || !env.Modules["json"] {
		t.Fatalf("probe: python %q, stdlib dataclasses %v numpy %v, json importable %v", env.Python, env.Stdlib["dataclasses"], env.Stdlib["numpy"], env.Modules["json"])
	}
}
