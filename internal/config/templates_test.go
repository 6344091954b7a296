package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTemplates(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
	}{
		{"valid", "templates:\n  vision:\n    packages: {python: [cv2]}\n    preload: [cv2]\n    pool_size: 2\n    display: true\n", ""},
		{"json works too", `{"templates": {"plain": {"memory_mb": 256}}}`, ""},
		{"unknown field", "templates:\n  vision:\n    pakages: [cv2]\n", `unknown field "pakages"`},
		{"bad runtime", "templates:\n  x:\n    runtime: docker\n", `template "x": runtime "docker": must be runc or gvisor`},
		{"bad name", "templates:\n  Bad Name:\n    cpus: 1\n", `template "Bad Name": names are lower-case`},
		{"screen without display", "templates:\n  x:\n    screen: 800x600x24\n", `template "x": screen needs display: true`},
		{"bad allow entry", "templates:\n  x:\n    network: {allow: [\"10.0.0.0/8\", \"http://x\"]}\n", `template "x": network.allow entry "http://x"`},
		{"bad import name", "templates:\n  x:\n    allowed_imports: [\"os path\"]\n", `allowed_imports entry "os path"`},
		{"memory out of range", "templates:\n  x:\n    memory_mb: 10\n", `memory_mb 10: must be between 128 and 65536`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.yaml")
			os.WriteFile(path, []byte(tc.file), 0o644)
			c := Default()
			c.TemplatesFile = path
			err := c.LoadTemplates()
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestIndexURLs(t *testing.T) {
	c := Default()
	c.PipIndexURL = "ftp://x"
	c.NPMRegistry = "http://reg.example/'quote"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `pip-index-url "ftp://x"`) || !strings.Contains(err.Error(), "npm-registry") {
		t.Fatalf("Validate = %v, want both URLs refused", err)
	}
}
