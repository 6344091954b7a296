// Package testutil holds what tests share: skipping only where a tool is
// truly absent, and building and starting the real codecell binary.
package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// RequiresRoot skips a test that needs root (namespaces, cgroups).
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (run the tests as root; CI does)")
	}
}

// RequiresBinary skips a test when a tool is not installed.
func RequiresBinary(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("needs %s, which is not installed (make deps installs it)", name)
	}
}
