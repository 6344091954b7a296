package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/codecell/codecell/internal/testutil"
)

func TestRunCommand(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantExit int
		wantOut  string
	}{
		{"exit code", []string{"-c", "print('hi'); raise SystemExit(3)"}, "", 3, "hi\n"},
		{"stdin program", []string{"-"}, "print(2 ** 10)", 0, "1024\n"},
		{"bash", []string{"--lang", "bash", "-c", "echo $USER-$(id -u)"}, "", 0, "-1000\n"},
		{"gvisor", []string{"--rt", "gvisor", "-c", "print('isolated')"}, "", 0, "isolated\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"run", "--data-dir", newDataDir(t)}, tt.args...)...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			out, err := cmd.Output()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantExit || string(out) != tt.wantOut {
				t.Fatalf("exit %d stdout %q, want exit %d stdout %q", code, out, tt.wantExit, tt.wantOut)
			}
		})
	}
}

func TestRunUsageErrors(t *testing.T) {
	out, err := exec.Command(binary, "run").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "nothing to run") {
		t.Fatalf("got %v %q, want exit 2 saying nothing to run", err, out)
	}
	out, err = exec.Command(binary, "serve", "--pool-size", "0", "--memory-mb", "1").CombinedOutput()
	ee, ok = err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "pool-size 0: must be at least 1") || !strings.Contains(string(out), "memory-mb 1") {
		t.Fatalf("got %v %q, want exit 2 naming both bad settings", err, out)
	}
}
