package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/codecell/codecell/internal/testutil"
)

// The Python SDK's own tests (clients/python/tests), run by Debian's pytest
// against the shared server.
func TestPythonSDK(t *testing.T) {
	s := shared(t)
	testutil.RequiresBinary(t, "/usr/bin/python3")
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		t.Skip("needs pytest for /usr/bin/python3 (make deps installs python3-pytest)")
	}
	dir, _ := filepath.Abs("../clients/python")
	cmd := exec.Command("/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CODECELL_URL="+s.URL, "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// `pip install ./clients/python` works without a package index: the SDK
// builds with its own standard-library backend.
func TestPythonSDKInstalls(t *testing.T) {
	if err := exec.Command("python3", "-m", "pip", "--version").Run(); err != nil {
		t.Skip("needs pip for python3")
	}
	target := t.TempDir()
	dir, _ := filepath.Abs("../clients/python")
	work := t.TempDir() // pip builds in a copy, so the tree stays clean
	if out, err := exec.Command("cp", "-r", dir+"/.", work).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	if out, err := exec.Command("python3", "-m", "pip", "install", "-q", "--no-index", "--target", target, work).CombinedOutput(); err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	cmd := exec.Command("python3", "-c", "import codecell; print(codecell.Sandbox.__name__, codecell.__file__.startswith(r'"+target+"'))")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+target)
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "Sandbox True\n" {
		t.Fatalf("import after install: %v %s", err, out)
	}
}
