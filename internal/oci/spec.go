// Package oci builds the OCI runtime spec every sandbox runs under. It is pure:
// the same Options always give the same spec, which the golden-file tests pin,
// so a change to isolation shows up as a reviewed diff.
package oci

import (
	"fmt"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Paths inside the sandbox that the agent and the host agree on.
const (
	AgentDir  = "/.codecell"
	AgentPath = AgentDir + "/codecell"
	Workspace = "/workspace"

	// NetDir holds the sandbox's only way out, the unix socket of its egress
	// proxy gate (when the host opened one); the agent serves it to programs
	// on ProxyListen.
	NetDir      = AgentDir + "/net"
	ProxySocket = NetDir + "/proxy.sock"
	ProxyListen = "127.0.0.1:3128"
	// LayerDir holds the package layers a sandbox was made with, read-only:
	// LayerDir/python is on PYTHONPATH, LayerDir/node/node_modules on NODE_PATH.
	LayerDir = AgentDir + "/layers"
	// BuildDir is where a build sandbox writes the layer it installs.
	BuildDir = AgentDir + "/build"
)

// MountPoints are the directories the read-only root must already have for
// the mounts above.
var MountPoints = []string{NetDir, LayerDir + "/python", LayerDir + "/node", BuildDir}

// Options are the knobs of one sandbox. Zero values are not defaults: the
// caller (sandbox package, fed from config) fills every field.
type Options struct {
	Hostname string
	// RootfsDir is a shared, empty skeleton: the root is mounted read-only and
	// everything real comes in as read-only bind mounts.
	RootfsDir string
	// HostDirs are host directories bound read-only at the same path (/usr, /lib...).
	HostDirs []string
	// EtcDir is the generated minimal /etc, bound read-only.
	EtcDir string
	// AgentBinary is the host path of the codecell binary, bound read-only at AgentPath.
	AgentBinary string
	Args        []string
	Env         []string
	// Mounts come after the standard ones (package layers, the net dir).
	Mounts   []specs.Mount
	UID, GID uint32

	MemoryBytes    int64
	PidsLimit      int64
	CPUs           float64
	WorkspaceBytes int64
	TmpBytes       int64
	NoFile         uint64
	FileSizeBytes  uint64
	CgroupsPath    string

	// UserNS maps the sandbox's uids 0..65535 onto host uids starting at
	// UserNSHostBase, so even a breakout lands as an unprivileged host user.
	UserNS         bool
	UserNSHostBase uint32
}

// MaskedPaths hide kernel information and knobs, as Docker and runc do.
var MaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
	"/proc/timer_stats", "/sys/firmware",
}

// ReadonlyPaths stay visible but cannot be written.
var ReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// Build returns the spec for opts.
func Build(opts Options) *specs.Spec {
	noSuid := []string{"nosuid", "nodev"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: append(noSuid, "noexec", "mode=1777", fmt.Sprintf("size=%d", opts.TmpBytes))},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
	}
	dirs := append([]string(nil), opts.HostDirs...)
	sort.Strings(dirs)
	for _, d := range dirs {
		mounts = append(mounts, specs.Mount{Destination: d, Type: "bind", Source: d, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	mounts = append(mounts,
		specs.Mount{Destination: "/etc", Type: "bind", Source: opts.EtcDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		specs.Mount{Destination: AgentPath, Type: "bind", Source: opts.AgentBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		specs.Mount{Destination: Workspace, Type: "tmpfs", Source: "tmpfs", Options: append(noSuid, "mode=0755", fmt.Sprintf("uid=%d", opts.UID), fmt.Sprintf("gid=%d", opts.GID), fmt.Sprintf("size=%d", opts.WorkspaceBytes))},
		specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: append(noSuid, "mode=1777", fmt.Sprintf("size=%d", opts.TmpBytes))},
	)
	mounts = append(mounts, opts.Mounts...)

	period := uint64(100000)
	quota := int64(opts.CPUs * float64(period))
	mem := opts.MemoryBytes
	swappiness := uint64(0)
	pids := opts.PidsLimit

	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: opts.Hostname,
		Root:     &specs.Root{Path: opts.RootfsDir, Readonly: true},
		Mounts:   mounts,
		Process: &specs.Process{
			Args:            opts.Args,
			Env:             opts.Env,
			Cwd:             Workspace,
			User:            specs.User{UID: opts.UID, GID: opts.GID, AdditionalGids: []uint32{opts.GID}},
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: opts.NoFile, Soft: opts.NoFile},
				{Type: "RLIMIT_FSIZE", Hard: opts.FileSizeBytes, Soft: opts.FileSizeBytes},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
		},
		Linux: &specs.Linux{
			CgroupsPath: opts.CgroupsPath,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &mem, Swap: &mem, Swappiness: &swappiness},
				CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
			},
			MaskedPaths:   MaskedPaths,
			ReadonlyPaths: ReadonlyPaths,
			Seccomp:       Seccomp(),
		},
	}
	if opts.UserNS {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: opts.UserNSHostBase, Size: 65536}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: opts.UserNSHostBase, Size: 65536}}
	}
	return s
}
