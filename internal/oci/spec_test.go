package oci

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var update = flag.Bool("update", false, "rewrite golden files")

func testOptions() Options {
	return Options{
		Hostname: "sandbox", RootfsDir: "/data/rootfs/root", HostDirs: []string{"/usr"}, EtcDir: "/data/rootfs/etc",
		AgentBinary: "/data/codecell-agent", Args: []string{AgentPath, "agent"}, Env: []string{"PATH=/usr/bin:/bin"},
		UID: 1000, GID: 1000, MemoryBytes: 512 << 20, PidsLimit: 256, CPUs: 1, WorkspaceBytes: 256 << 20,
		TmpBytes: 64 << 20, NoFile: 1024, FileSizeBytes: 256 << 20, CgroupsPath: "/codecell/cc-test",
		UserNS: true, UserNSHostBase: 200000,
	}
}

func TestBuildGolden(t *testing.T) {
	got, err := json.MarshalIndent(Build(testOptions()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "spec.golden.json")
	if *update {
		os.WriteFile(golden, append(got, '\n'), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Fatalf("spec differs from %s; if the change is intended, run go test ./internal/oci -update and review the diff", golden)
	}
}

// The defaults the issue requires, asserted one by one so a regression names itself.
func TestBuildDefaults(t *testing.T) {
	s := Build(testOptions())
	if !s.Root.Readonly {
		t.Error("root is writable")
	}
	if s.Process.User.UID == 0 || !s.Process.NoNewPrivileges {
		t.Errorf("user %d, no_new_privs %v", s.Process.User.UID, s.Process.NoNewPrivileges)
	}
	c := s.Process.Capabilities
	if len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities granted: %+v", c)
	}
	ns := map[specs.LinuxNamespaceType]bool{}
	for _, n := range s.Linux.Namespaces {
		ns[n.Type] = true
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace, specs.UserNamespace} {
		if !ns[want] {
			t.Errorf("namespace %s missing", want)
		}
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 512<<20 || *r.Pids.Limit != 256 || *r.CPU.Quota != 100000 || *r.CPU.Period != 100000 {
		t.Errorf("limits: memory %d pids %d cpu %d/%d", *r.Memory.Limit, *r.Pids.Limit, *r.CPU.Quota, *r.CPU.Period)
	}
	for _, m := range s.Mounts {
		switch m.Destination {
		case "/root", "/home", "/var/run", "/run":
			t.Errorf("host path %s is mounted", m.Destination)
		case "/workspace", "/tmp":
			if m.Type != "tmpfs" {
				t.Errorf("%s is %s, want tmpfs", m.Destination, m.Type)
			}
		}
	}
	denied := map[string]bool{"ptrace": true, "mount": true, "bpf": true, "keyctl": true, "perf_event_open": true, "umount2": true, "unshare": true, "setns": true, "add_key": true, "request_key": true}
	for _, rule := range s.Linux.Seccomp.Syscalls {
		for _, name := range rule.Names {
			if denied[name] && rule.Action == specs.ActAllow {
				t.Errorf("seccomp allows %s", name)
			}
		}
	}
	if s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Errorf("seccomp default %s, want errno", s.Linux.Seccomp.DefaultAction)
	}
}
