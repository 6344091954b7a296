// Package config is the one place codecell's settings are defined: each has a
// default, an environment variable and a flag (the flag wins), and Validate
// says in plain words what is wrong with a bad combination.
package config

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of the daemon and of `codecell run`.
type Config struct {
	Listen  string
	DataDir string

	Runtime       string // default runtime: runc or gvisor
	PoolSize      int    // warm sandboxes for runc
	GVisorPool    int    // warm sandboxes for gVisor (0: gVisor off)
	MaxReuse      int    // stateless runs per sandbox before it is replaced
	QueueSize     int    // requests waiting for a sandbox before 429
	Preload       []string
	AgentBinary   string // the codecell binary bound into sandboxes; "" = this one
	UserNS        bool
	UserNSBase    uint32
	SandboxUID    uint32
	MemoryMB      int64
	Pids          int64
	CPUs          float64
	WorkspaceMB   int64
	TmpMB         int64
	NoFile        uint64
	FileSizeMB    uint64
	OutputCap     int
	MaxBodyBytes  int64
	Timeout       time.Duration // default per-run time-out
	MaxTimeout    time.Duration
	LogLevel      string
	ShutdownGrace time.Duration

	MaxSessions        int           // stateful sandboxes held at once
	SessionIdleTimeout time.Duration // default idle time-out of a session
	SessionMaxLifetime time.Duration // cap (and default) of a session's lifetime
	WSPingInterval     time.Duration // WebSocket keep-alive; a peer silent this long twice is dropped
	OpenEnvDisplay     bool          // OpenEnv's sessions get an X server (for capture_screenshot)

	PipIndexURL      string        // pip's --index-url for package layers
	PipExtraIndexURL string        // pip's --extra-index-url; "" for none
	NPMRegistry      string        // npm's --registry
	PackageHosts     []string      // more hosts the build sandbox may reach (a mirror's file host)
	LayerBudgetMB    int64         // disk for package layers; least recently used ones go beyond it
	BuildTimeout     time.Duration // longest a layer's install may take
	PackagePoolIdle  time.Duration // a package set's warm pool unused this long is closed
	PackagePoolSize  int           // warm sandboxes per package set in use

	TemplatesFile string              // YAML or JSON file of named templates
	Templates     map[string]Template // read from TemplatesFile by Load

	afterParse func()
}

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		Listen:        "127.0.0.1:8080",
		DataDir:       "/var/lib/codecell",
		Runtime:       "runc",
		PoolSize:      8,
		GVisorPool:    2,
		MaxReuse:      1000,
		QueueSize:     64,
		Preload:       []string{"numpy", "pandas", "scipy", "matplotlib"},
		UserNS:        true,
		UserNSBase:    200000,
		SandboxUID:    1000,
		MemoryMB:      512,
		Pids:          256,
		CPUs:          1,
		WorkspaceMB:   256,
		TmpMB:         64,
		NoFile:        1024,
		FileSizeMB:    256,
		OutputCap:     1 << 20,
		MaxBodyBytes:  10 << 20,
		Timeout:       10 * time.Second,
		MaxTimeout:    300 * time.Second,
		LogLevel:      "info",
		ShutdownGrace: 10 * time.Second,

		MaxSessions:        64,
		SessionIdleTimeout: 10 * time.Minute,
		SessionMaxLifetime: 24 * time.Hour,
		WSPingInterval:     15 * time.Second,
		OpenEnvDisplay:     true,

		PipIndexURL:     "https://pypi.org/simple/",
		NPMRegistry:     "https://registry.npmjs.org/",
		LayerBudgetMB:   10240,
		BuildTimeout:    10 * time.Minute,
		PackagePoolIdle: 10 * time.Minute,
		PackagePoolSize: 1,
	}
}

// Flags registers every setting on fs, with defaults taken from c after the
// environment (getenv) has been applied, so precedence is flag > env > default.
func (c *Config) Flags(fs *flag.FlagSet, getenv func(string) string) error {
	var errs []error
	env := func(name string) (string, bool) {
		v := getenv("CODECELL_" + name)
		return v, v != ""
	}
	str := func(p *string, flagName, envName, usage string) {
		if v, ok := env(envName); ok {
			*p = v
		}
		fs.StringVar(p, flagName, *p, usage+" (env CODECELL_"+envName+")")
	}
	num := func(p any, flagName, envName, usage string) {
		v, ok := env(envName)
		usage += " (env CODECELL_" + envName + ")"
		parseErr := func(err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("CODECELL_%s=%q: %v", envName, v, err))
			}
		}
		switch p := p.(type) {
		case *int:
			if ok {
				n, err := strconv.Atoi(v)
				parseErr(err)
				*p = n
			}
			fs.IntVar(p, flagName, *p, usage)
		case *int64:
			if ok {
				n, err := strconv.ParseInt(v, 10, 64)
				parseErr(err)
				*p = n
			}
			fs.Int64Var(p, flagName, *p, usage)
		case *uint64:
			if ok {
				n, err := strconv.ParseUint(v, 10, 64)
				parseErr(err)
				*p = n
			}
			fs.Uint64Var(p, flagName, *p, usage)
		case *float64:
			if ok {
				n, err := strconv.ParseFloat(v, 64)
				parseErr(err)
				*p = n
			}
			fs.Float64Var(p, flagName, *p, usage)
		case *bool:
			if ok {
				b, err := strconv.ParseBool(v)
				parseErr(err)
				*p = b
			}
			fs.BoolVar(p, flagName, *p, usage)
		case *time.Duration:
			if ok {
				d, err := time.ParseDuration(v)
				parseErr(err)
				*p = d
			}
			fs.DurationVar(p, flagName, *p, usage)
		}
	}
	str(&c.Listen, "listen", "LISTEN", "address the HTTP server listens on")
	str(&c.DataDir, "data-dir", "DATA_DIR", "directory for runtime state, bundles and the sandbox root")
	str(&c.Runtime, "runtime", "RUNTIME", "default OCI runtime: runc or gvisor")
	num(&c.PoolSize, "pool-size", "POOL_SIZE", "warm runc sandboxes (also the most concurrent runc runs)")
	num(&c.GVisorPool, "gvisor-pool-size", "GVISOR_POOL_SIZE", "warm gVisor sandboxes; 0 turns gVisor off")
	num(&c.MaxReuse, "max-reuse", "MAX_REUSE", "stateless runs a sandbox serves (scrubbed between) before it is replaced")
	num(&c.QueueSize, "queue-size", "QUEUE_SIZE", "requests that may wait for a free sandbox; beyond it the answer is 429")
	preload := strings.Join(c.Preload, ",")
	str(&preload, "preload", "PRELOAD", "comma-separated Python modules the zygote imports ahead of runs (missing ones are skipped)")
	str(&c.AgentBinary, "agent-binary", "AGENT_BINARY", "codecell binary to mount into sandboxes (default: this executable)")
	num(&c.UserNS, "userns", "USERNS", "run runc sandboxes in a user namespace")
	var base = uint64(c.UserNSBase)
	num(&base, "userns-base", "USERNS_BASE", "first host uid of the 65536 the user namespace maps")
	var uid = uint64(c.SandboxUID)
	num(&uid, "sandbox-uid", "SANDBOX_UID", "uid (and gid) code runs as inside the sandbox")
	num(&c.MemoryMB, "memory-mb", "MEMORY_MB", "memory limit per sandbox, MiB")
	num(&c.Pids, "pids", "PIDS", "process limit per sandbox")
	num(&c.CPUs, "cpus", "CPUS", "CPU limit per sandbox, cores")
	num(&c.WorkspaceMB, "workspace-mb", "WORKSPACE_MB", "size of /workspace (tmpfs), MiB")
	num(&c.TmpMB, "tmp-mb", "TMP_MB", "size of /tmp and /dev/shm (tmpfs), MiB")
	num(&c.NoFile, "nofile", "NOFILE", "open-file limit (RLIMIT_NOFILE)")
	num(&c.FileSizeMB, "file-size-mb", "FILE_SIZE_MB", "largest file a run may write (RLIMIT_FSIZE), MiB")
	num(&c.OutputCap, "output-cap", "OUTPUT_CAP", "bytes of stdout and of stderr kept per run; the rest is cut and reported")
	num(&c.MaxBodyBytes, "max-body", "MAX_BODY", "largest request body, bytes")
	num(&c.Timeout, "timeout", "TIMEOUT", "default time-out of a run")
	num(&c.MaxTimeout, "max-timeout", "MAX_TIMEOUT", "largest time-out a request may ask for")
	str(&c.LogLevel, "log-level", "LOG_LEVEL", "debug, info, warn or error")
	num(&c.ShutdownGrace, "shutdown-grace", "SHUTDOWN_GRACE", "how long a stopping server waits for running requests")
	num(&c.MaxSessions, "max-sessions", "MAX_SESSIONS", "stateful sandboxes (sessions) held at once; beyond it creating one answers 429")
	num(&c.SessionIdleTimeout, "session-idle-timeout", "SESSION_IDLE_TIMEOUT", "default time a session may sit idle (no exec, stream or process of its own) before it is stopped")
	num(&c.SessionMaxLifetime, "session-max-lifetime", "SESSION_MAX_LIFETIME", "longest (and default) life of a session")
	num(&c.OpenEnvDisplay, "openenv-display", "OPENENV_DISPLAY", "give OpenEnv's sessions a display (1280x800x24), so steps that ask for capture_screenshot get one")
	num(&c.WSPingInterval, "ws-ping-interval", "WS_PING_INTERVAL", "how often WebSocket peers are pinged; one that does not answer within the same time is dropped and its session freed")
	str(&c.PipIndexURL, "pip-index-url", "PIP_INDEX_URL", "Python package index (PEP 503 simple API) layers are installed from")
	str(&c.PipExtraIndexURL, "pip-extra-index-url", "PIP_EXTRA_INDEX_URL", "a second Python package index, searched too")
	str(&c.NPMRegistry, "npm-registry", "NPM_REGISTRY", "npm registry layers are installed from")
	hosts := strings.Join(c.PackageHosts, ",")
	str(&hosts, "package-hosts", "PACKAGE_HOSTS", "comma-separated hosts the install sandbox may reach besides the index and registry (files.pythonhosted.org is added for pypi.org)")
	num(&c.LayerBudgetMB, "layer-budget-mb", "LAYER_BUDGET_MB", "disk for package layers, MiB; beyond it the least recently used unused layers are removed")
	num(&c.BuildTimeout, "build-timeout", "BUILD_TIMEOUT", "longest a package layer's install may take")
	num(&c.PackagePoolSize, "package-pool-size", "PACKAGE_POOL_SIZE", "warm sandboxes kept for each package set in use (also the most concurrent runs of that set)")
	num(&c.PackagePoolIdle, "package-pool-idle", "PACKAGE_POOL_IDLE", "a package set's warm sandbox pool unused this long is closed")
	str(&c.TemplatesFile, "templates", "TEMPLATES", "YAML or JSON file of named sandbox templates")
	// Parsed values land in the struct after fs.Parse; these need converting.
	c.afterParse = func() {
		c.PackageHosts = SplitList(hosts)
		c.Preload = SplitList(preload)
		c.UserNSBase = uint32(base)
		c.SandboxUID = uint32(uid)
	}
	return errors.Join(errs...)
}

// Finish applies values that need converting after flag parsing.
func (c *Config) Finish() {
	if c.afterParse != nil {
		c.afterParse()
	}
}

// SplitList splits a comma-separated setting, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate reports every setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Runtime != "runc" && c.Runtime != "gvisor" {
		bad("runtime %q: must be runc or gvisor", c.Runtime)
	}
	if c.PoolSize < 1 {
		bad("pool-size %d: must be at least 1", c.PoolSize)
	}
	if c.GVisorPool < 0 {
		bad("gvisor-pool-size %d: must be 0 (off) or more", c.GVisorPool)
	}
	if c.Runtime == "gvisor" && c.GVisorPool == 0 {
		bad("runtime gvisor is the default but gvisor-pool-size is 0")
	}
	if c.MaxReuse < 1 {
		bad("max-reuse %d: must be at least 1", c.MaxReuse)
	}
	if c.QueueSize < 0 {
		bad("queue-size %d: must be 0 or more", c.QueueSize)
	}
	if c.MemoryMB < 32 {
		bad("memory-mb %d: must be at least 32", c.MemoryMB)
	}
	if c.Pids < 8 {
		bad("pids %d: must be at least 8", c.Pids)
	}
	if c.CPUs <= 0 {
		bad("cpus %g: must be more than 0", c.CPUs)
	}
	if c.WorkspaceMB < 1 || c.TmpMB < 1 {
		bad("workspace-mb and tmp-mb must be at least 1")
	}
	if c.OutputCap < 1 {
		bad("output-cap %d: must be at least 1", c.OutputCap)
	}
	if c.MaxBodyBytes < 1024 {
		bad("max-body %d: must be at least 1024", c.MaxBodyBytes)
	}
	if c.WSPingInterval <= 0 {
		bad("ws-ping-interval %s: must be more than 0", c.WSPingInterval)
	}
	if c.MaxSessions < 0 {
		bad("max-sessions %d: must be 0 (no sessions) or more", c.MaxSessions)
	}
	if c.SessionIdleTimeout <= 0 || c.SessionMaxLifetime < c.SessionIdleTimeout {
		bad("session-idle-timeout %s and session-max-lifetime %s: need 0 < idle time-out <= lifetime", c.SessionIdleTimeout, c.SessionMaxLifetime)
	}
	if c.Timeout <= 0 || c.MaxTimeout < c.Timeout {
		bad("timeout %s and max-timeout %s: need 0 < timeout <= max-timeout", c.Timeout, c.MaxTimeout)
	}
	if c.SandboxUID == 0 {
		bad("sandbox-uid 0: code must not run as root")
	}
	for name, u := range map[string]string{"pip-index-url": c.PipIndexURL, "pip-extra-index-url": c.PipExtraIndexURL, "npm-registry": c.NPMRegistry} {
		if u == "" && name == "pip-extra-index-url" {
			continue
		}
		if err := checkIndexURL(u); err != nil {
			bad("%s %q: %v", name, u, err)
		}
	}
	if c.LayerBudgetMB < 1 {
		bad("layer-budget-mb %d: must be at least 1", c.LayerBudgetMB)
	}
	if c.PackagePoolSize < 1 {
		bad("package-pool-size %d: must be at least 1", c.PackagePoolSize)
	}
	if c.BuildTimeout <= 0 || c.PackagePoolIdle <= 0 {
		bad("build-timeout %s and package-pool-idle %s: must be more than 0", c.BuildTimeout, c.PackagePoolIdle)
	}
	for name, t := range c.Templates {
		if err := t.check(name, c); err != nil {
			errs = append(errs, err)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level %q: must be debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}
