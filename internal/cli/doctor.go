package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// check is one thing the host needs, with the command that provides it.
type check struct {
	name, install string
	optional      bool
	ok            func() (string, bool)
}

// Doctor is `codecell doctor`: says in plain words what this host lacks.
func Doctor(ctx context.Context, args []string, env Env) error {
	bin := func(name string) func() (string, bool) {
		return func() (string, bool) {
			p, err := exec.LookPath(name)
			if err != nil {
				return "not found", false
			}
			out, _ := exec.CommandContext(ctx, p, "--version").Output()
			return firstLine(string(out)), true
		}
	}
	exists := func(path, what string) func() (string, bool) {
		return func() (string, bool) {
			if _, err := os.Stat(path); err != nil {
				return what + " missing", false
			}
			return "present", true
		}
	}
	pyMod := func(mod string) func() (string, bool) {
		return func() (string, bool) {
			out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", "import "+mod+"; print(getattr("+mod+", '__version__', 'ok'))").Output()
			if err != nil {
				return "cannot import " + mod, false
			}
			return strings.TrimSpace(string(out)), true
		}
	}
	checks := []check{
		{name: "root", install: "run codecell as root (it creates namespaces and cgroups)", ok: func() (string, bool) {
			return fmt.Sprintf("euid %d", os.Geteuid()), os.Geteuid() == 0
		}},
		{name: "runc", install: "apt-get install -y runc", ok: bin("runc")},
		{name: "runsc (gVisor)", install: "apt-get install -y runsc", optional: true, ok: bin("runsc")},
		{name: "user namespaces", install: "sysctl -w user.max_user_namespaces=15000 (or run with --userns=false)", ok: func() (string, bool) {
			b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
			v := strings.TrimSpace(string(b))
			return "max_user_namespaces=" + v, err == nil && v != "0"
		}},
		{name: "cgroups", install: "mount cgroup v2 at /sys/fs/cgroup, or the v1 memory, pids and cpu controllers", ok: func() (string, bool) {
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				return "v2", true
			}
			for _, c := range []string{"memory", "pids", "cpu"} {
				if _, err := os.Stat("/sys/fs/cgroup/" + c); err != nil {
					return "v1 without " + c, false
				}
			}
			return "v1 (memory, pids, cpu)", true
		}},
		{name: "python3 (Debian's, used in sandboxes)", install: "apt-get install -y python3", ok: exists("/usr/bin/python3", "/usr/bin/python3")},
		{name: "numpy", install: "apt-get install -y python3-numpy", optional: true, ok: pyMod("numpy")},
		{name: "pandas", install: "apt-get install -y python3-pandas", optional: true, ok: pyMod("pandas")},
		{name: "scipy", install: "apt-get install -y python3-scipy", optional: true, ok: pyMod("scipy")},
		{name: "matplotlib", install: "apt-get install -y python3-matplotlib", optional: true, ok: pyMod("matplotlib")},
		{name: "node (javascript runs)", install: "apt-get install -y nodejs", optional: true, ok: bin("node")},
		{name: "Xvfb (virtual displays)", install: "apt-get install -y xvfb", optional: true, ok: exists("/usr/bin/Xvfb", "/usr/bin/Xvfb")},
	}
	missing := 0
	for _, c := range checks {
		detail, ok := c.ok()
		mark := "ok  "
		if !ok {
			mark = "MISS"
			if c.optional {
				mark = "warn"
			} else {
				missing++
			}
		}
		fmt.Fprintf(env.Stdout, "[%s] %-40s %s\n", mark, c.name, detail)
		if !ok {
			fmt.Fprintf(env.Stdout, "       fix: %s\n", c.install)
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d required item(s) missing; see the fixes above", missing)
	}
	fmt.Fprintln(env.Stdout, "this host can run codecell")
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
