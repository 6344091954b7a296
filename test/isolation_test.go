package e2e

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// Each attack runs as a hostile snippet would, asserts the exact outcome, and
// then checks the daemon still serves.
func TestIsolation(t *testing.T) {
	s := shared(t)
	secret := fmt.Sprintf("host-secret-%d", os.Getpid())
	secretPath := "/root/codecell-isolation-secret"
	if err := os.WriteFile(secretPath, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secretPath)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hostPort := ln.Addr().(*net.TCPAddr).Port

	// seccomp: the syscall's errno as the run sees it.
	sys := func(nr int, args string) string {
		return fmt.Sprintf("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.syscall(%d%s)\nprint(r, os.strerror(ctypes.get_errno()) if r < 0 else 'allowed')", nr, args)
	}
	attacks := []struct {
		name     string
		runtimes []string
		lang     string
		code     string
		timeout  float64
		status   string
		stdout   string // exact, unless empty
		contains string // stdout must contain
	}{
		{name: "host root's files are not there", code: fmt.Sprintf("import os\nprint(os.path.exists(%q), os.path.exists('/root'), os.path.exists('/home'))", secretPath), status: "ok", stdout: "False False False\n"},
		{name: "no shadow or host names in /etc", code: "import os\nprint(sorted(os.listdir('/etc'))[:0], os.path.exists('/etc/shadow'), open('/etc/hostname').read().strip())", status: "ok", stdout: "[] False sandbox\n"},
		{name: "host /tmp is not the sandbox /tmp", lang: "bash", code: "ls -A /tmp | wc -l", status: "ok", stdout: "0\n"},
		{name: "no docker or runtime sockets", code: "import os\nprint([p for p in ('/var/run', '/run', '/var/lib') if os.path.exists(p)])", status: "ok", stdout: "[]\n"},
		{name: "root filesystem is read-only", lang: "bash", code: "for p in /usr/x /etc/x /x /.codecell/x; do touch $p 2>/dev/null && echo wrote $p; done; echo done", status: "ok", stdout: "done\n"},
		{name: "agent binary cannot be replaced", lang: "bash", code: "cp /bin/true /.codecell/codecell 2>/dev/null; cmp -s /bin/true /.codecell/codecell && echo replaced || echo intact", status: "ok", stdout: "intact\n"},
		{name: "workspace and tmp are writable", lang: "bash", code: "echo a > /workspace/f && echo b > /tmp/f && cat /workspace/f /tmp/f", status: "ok", stdout: "a\nb\n"},
		{name: "not root, no capabilities, no_new_privs", code: "import os\nst = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\nprint(os.getuid(), os.getgid(), st['CapEff'], st['CapBnd'], st['NoNewPrivs'])", status: "ok", stdout: "1000 1000 0000000000000000 0000000000000000 1\n", runtimes: []string{"runc"}},
		{name: "not root", code: "import os\nprint(os.getuid(), os.getgid())", status: "ok", stdout: "1000 1000\n"},
		{name: "no route out", code: "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno is not None)", status: "ok", contains: "refused"},
		{name: "host loopback unreachable", code: fmt.Sprintf("import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=2)\n    print('connected')\nexcept OSError:\n    print('refused')", hostPort), status: "ok", stdout: "refused\n"},
		{name: "only loopback interface", lang: "bash", code: "ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", status: "ok", stdout: "lo\n", runtimes: []string{"runc"}},
		{name: "DNS resolves nothing", code: "import socket\ntry:\n    socket.gethostbyname('example.com')\n    print('resolved')\nexcept OSError:\n    print('no dns')", status: "ok", stdout: "no dns\n"},
		{name: "seccomp denies ptrace", code: sys(101, ", 0, 0, 0, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "seccomp denies mount", code: sys(165, ", b'none', b'/tmp', b'tmpfs', 0, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "seccomp denies bpf", code: sys(321, ", 0, 0, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "seccomp denies keyctl", code: sys(250, ", 0, 0, 0, 0, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "seccomp denies perf_event_open", code: sys(298, ", 0, 0, -1, -1, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "seccomp denies unshare", code: sys(272, ", 0x10000000"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"runc"}},
		{name: "gVisor refuses mount", code: sys(165, ", b'none', b'/tmp', b'tmpfs', 0, 0"), status: "ok", stdout: "-1 Operation not permitted\n", runtimes: []string{"gvisor"}},
		{name: "masked /proc paths", lang: "bash", code: "cat /proc/keys /proc/timer_list /proc/sched_debug 2>/dev/null | wc -c; echo 1 > /proc/sys/kernel/hostname 2>/dev/null || echo ro", status: "ok", stdout: "0\nro\n", runtimes: []string{"runc"}},
		{name: "agent cannot be traced or signalled", code: "import os, signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):\n    try:\n        os.kill(1, s)\n    except OSError as e:\n        print('denied', e)\nprint('alive')", status: "ok", stdout: "alive\n", runtimes: []string{"runc"}},
		// gVisor lets a process kill the sandbox's init; the run is reported
		// as killed and the pool replaces the sandbox.
		{name: "killing init ends only this sandbox", code: "import os, signal\nos.kill(1, signal.SIGKILL)", status: "killed", runtimes: []string{"gvisor"}},
		{name: "fork bomb", lang: "bash", code: "bomb() { bomb | bomb & }; bomb; sleep 3", timeout: 3, status: "timeout", runtimes: []string{"runc"}},
		// Guest processes are not host processes under gVisor, so the pids
		// cgroup does not stop the bomb; the sandbox dies and is replaced.
		{name: "fork bomb", lang: "bash", code: "bomb() { bomb | bomb & }; bomb; sleep 3", timeout: 3, status: "killed", runtimes: []string{"gvisor"}},
		{name: "memory bomb", code: "b = bytearray(2 << 30)\nprint('allocated')", status: "oom", runtimes: []string{"runc"}},
		{name: "memory bomb touched", code: "x = []\nwhile True:\n    x.append(bytearray(64 << 20))", status: "oom", runtimes: []string{"runc"}},
		{name: "disk filling", code: "f = open('/workspace/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))", status: "error", runtimes: []string{"runc", "gvisor"}},
		{name: "infinite loop", code: "while True: pass", timeout: 1, status: "timeout"},
		{name: "pids limit", code: "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('limited', n < 256)", timeout: 20, status: "ok", stdout: "limited True\n", runtimes: []string{"runc"}},
	}
	for _, rt := range runtimes {
		for _, a := range attacks {
			if a.runtimes != nil && !contains(a.runtimes, rt) {
				continue
			}
			t.Run(rt+"/"+a.name, func(t *testing.T) {
				lang := a.lang
				if lang == "" {
					lang = "python"
				}
				req := map[string]any{"language": lang, "code": a.code, "runtime": rt}
				if a.timeout > 0 {
					req["timeout_s"] = a.timeout
				}
				r := s.exec(t, req)
				if r.Status != a.status {
					t.Errorf("status %q, want %q (stdout %q, stderr %q)", r.Status, a.status, r.Stdout, r.Stderr)
				}
				if a.stdout != "" && r.Stdout != a.stdout {
					t.Errorf("stdout %q, want %q (stderr %q)", r.Stdout, a.stdout, r.Stderr)
				}
				if a.contains != "" && !strings.Contains(r.Stdout, a.contains) {
					t.Errorf("stdout %q, want it to contain %q (stderr %q)", r.Stdout, a.contains, r.Stderr)
				}
				if strings.Contains(r.Stdout, secret) {
					t.Errorf("the host secret leaked: %q", r.Stdout)
				}
				s.requireHealthy(t, rt)
			})
		}
	}
}

func TestCPULimit(t *testing.T) {
	s := shared(t)
	// Two busy processes for one second of wall time get at most one core.
	code := "import os, time\nend = time.time() + 1\nif os.fork() == 0:\n    while time.time() < end: pass\n    os._exit(0)\nwhile time.time() < end: pass\nos.wait()"
	r := s.exec(t, py("runc", code))
	if r.Status != "ok" {
		t.Fatalf("got %+v", r)
	}
	if r.CPUMs > 1300 {
		t.Fatalf("cpu_ms %.0f over a 1 s wall-clock run: the 1-core limit did not hold", r.CPUMs)
	}
	if r.CPUMs < 500 {
		t.Fatalf("cpu_ms %.0f: the busy loops did not run", r.CPUMs)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
