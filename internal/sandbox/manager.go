package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/oci"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/rootfs"
	"github.com/codecell/codecell/internal/runtime"
)

// Manager owns every sandbox of the daemon: one warm pool per runtime.
type Manager struct {
	cfg      config.Config
	dataDir  string
	spec     Spec
	runtimes map[string]*runtime.Runtime
	pools    map[string]*Pool
	disabled map[string]error // runtimes asked for but not installed
	log      *slog.Logger

	sharedMu sync.Mutex
	shared   map[string]*Sandbox // long-lived sandboxes by name and runtime

	env       *packages.Env   // what the sandbox image has
	store     *packages.Store // package layers
	templates map[string]*template
	dynMu     sync.Mutex
	dynamic   map[string]*dynamicPool // package sets' pools, by runtime and layers
	stop      chan struct{}
	wg        sync.WaitGroup
}

// NewManager prepares the data directory, removes what a previous daemon left
// behind, and starts the pools. poolSizes maps runtime name to warm sandboxes;
// a runtime with size 0 is not started.
func NewManager(ctx context.Context, cfg config.Config, poolSizes map[string]int, log *slog.Logger) (m *Manager, retErr error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// The sandbox's root and agent live below; in a user namespace the
	// container's root is an unprivileged host uid that must traverse here.
	if err := os.Chmod(dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.UserNS {
		if err := checkTraversable(filepath.Dir(dataDir)); err != nil {
			return nil, err
		}
	}
	agentBin := cfg.AgentBinary
	if agentBin == "" {
		if agentBin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	// The binary is bound into sandboxes whose uids are mapped; a private copy
	// with known permissions also keeps a rebuild of the original from
	// changing a running sandbox's agent.
	agentCopy := filepath.Join(dataDir, "codecell-agent")
	if err := copyFile(agentBin, agentCopy, 0o755); err != nil {
		return nil, fmt.Errorf("install agent binary: %w", err)
	}
	layout, err := rootfs.Prepare(filepath.Join(dataDir, "rootfs"), cfg.SandboxUID, cfg.SandboxUID)
	if err != nil {
		return nil, err
	}
	m = &Manager{cfg: cfg, dataDir: dataDir, runtimes: map[string]*runtime.Runtime{}, pools: map[string]*Pool{}, disabled: map[string]error{}, shared: map[string]*Sandbox{},
		templates: map[string]*template{}, dynamic: map[string]*dynamicPool{}, stop: make(chan struct{}), log: log}
	m.spec = Spec{
		Preload: cfg.Preload,
		Options: oci.Options{
			RootfsDir:      layout.Root,
			HostDirs:       layout.HostDirs,
			EtcDir:         layout.Etc,
			AgentBinary:    agentCopy,
			Env:            sandboxEnv(),
			UID:            cfg.SandboxUID,
			GID:            cfg.SandboxUID,
			MemoryBytes:    cfg.MemoryMB << 20,
			PidsLimit:      cfg.Pids,
			CPUs:           cfg.CPUs,
			WorkspaceBytes: cfg.WorkspaceMB << 20,
			TmpBytes:       cfg.TmpMB << 20,
			NoFile:         cfg.NoFile,
			FileSizeBytes:  cfg.FileSizeMB << 20,
			UserNS:         cfg.UserNS,
			UserNSHostBase: cfg.UserNSBase,
		},
	}
	defer func() {
		if retErr != nil {
			m.Close()
		}
	}()
	if m.env, err = packages.Probe(ctx, m.spec.Options.Env); err != nil {
		return nil, err
	}
	if m.store, err = packages.NewStore(filepath.Join(dataDir, "layers"), cfg.LayerBudgetMB<<20, cfg.BuildTimeout, m.buildLayer, log); err != nil {
		return nil, err
	}
	for name, size := range poolSizes {
		if size <= 0 {
			continue
		}
		rt, err := runtime.New(name, filepath.Join(dataDir, "state"))
		if err != nil {
			if name != cfg.Runtime && errors.Is(err, errdefs.ErrUnavailable) {
				// An optional runtime that is not installed is off, not fatal.
				log.Warn("runtime disabled", "runtime", name, "err", err)
				m.disabled[name] = err
				continue
			}
			return nil, err
		}
		m.runtimes[name] = rt
		m.cleanLeftovers(ctx, rt)
	}
	os.RemoveAll(filepath.Join(dataDir, "bundles"))
	for _, cg := range leftoverCgroups() {
		removeCgroup(cg)
	}
	for name, rt := range m.runtimes {
		m.pools[name] = NewPool(name, name, poolSizes[name], cfg.MaxReuse, cfg.QueueSize, func(ctx context.Context) (*Sandbox, error) {
			sb, err := create(ctx, rt, dataDir, m.spec, log)
			if err == nil {
				sb.Limits = Limits{MemoryMB: cfg.MemoryMB, CPUs: cfg.CPUs, PIDs: cfg.Pids}
			}
			return sb, err
		}, log)
	}
	if err := m.startTemplates(); err != nil {
		return nil, err
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(max(min(cfg.PackagePoolIdle/2, time.Minute), time.Second))
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
				m.closeIdlePools(cfg.PackagePoolIdle)
			}
		}
	}()
	return m, nil
}

// sandboxEnv is the environment every process in a sandbox starts with.
func sandboxEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/workspace",
		"LANG=C.UTF-8",
		"TERM=xterm",
		"MPLBACKEND=Agg",
		"MPLCONFIGDIR=/tmp/.matplotlib",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYGAME_HIDE_SUPPORT_PROMPT=1", // no greeting in the run's stdout
		"SDL_AUDIODRIVER=dummy",        // no sound device in a sandbox
		// One core per sandbox: BLAS thread pools would only add fork and
		// memory cost, and forking a process with live threads is fragile.
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
	}
}

// cleanLeftovers force-deletes containers a previous daemon left in this
// runtime's state directory (it was killed, or the machine lost power).
func (m *Manager) cleanLeftovers(ctx context.Context, rt *runtime.Runtime) {
	ids, err := rt.List(ctx)
	if err != nil {
		m.log.Warn("list leftover sandboxes", "runtime", rt.Name(), "err", err)
		return
	}
	for _, id := range ids {
		if err := rt.Kill(ctx, id); err != nil {
			m.log.Warn("remove leftover sandbox", "sandbox", id, "err", err)
			continue
		}
		m.log.Info("removed leftover sandbox", "sandbox", id, "runtime", rt.Name())
	}
}

// Runtimes lists the runtimes this manager serves.
func (m *Manager) Runtimes() []string {
	names := make([]string, 0, len(m.pools))
	for n := range m.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (m *Manager) pool(name string) (*Pool, error) {
	if name == "" {
		name = m.cfg.Runtime
	}
	p, ok := m.pools[name]
	if !ok {
		if name != runtime.Runc && name != runtime.GVisor {
			return nil, fmt.Errorf("unknown runtime %q; supported: %s: %w", name, strings.Join([]string{runtime.Runc, runtime.GVisor}, ", "), errdefs.ErrInvalid)
		}
		if err := m.disabled[name]; err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("runtime %q is not enabled on this server (enabled: %s): %w", name, strings.Join(m.Runtimes(), ", "), errdefs.ErrUnavailable)
	}
	return p, nil
}

// Execute runs one stateless request in a warm sandbox of the target's kind.
func (m *Manager) Execute(ctx context.Context, t Target, req *agent.ExecRequest, onOutput func(string, []byte)) (*Result, Placed, error) {
	p, placed, done, err := m.poolFor(ctx, t)
	if err != nil {
		return nil, placed, err
	}
	defer done()
	sb, err := p.Acquire(ctx)
	if err != nil {
		return nil, placed, err
	}
	if err := prepare(sb, t, req); err != nil {
		p.Release(sb)
		return nil, placed, err
	}
	res, err := sb.Exec(ctx, req, onOutput)
	if t.Network != nil {
		if res != nil {
			res.Network = sb.NetworkStats()
		}
		sb.CloseNetwork()
	}
	p.Release(sb)
	if err != nil && errors.Is(err, errdefs.ErrUnavailable) {
		return nil, placed, fmt.Errorf("sandbox %s died during the run: %w", sb.ID, err)
	}
	return res, placed, err
}

// Claim takes a warm sandbox of the target's kind out of its pool for good
// (a session's); the caller destroys it. Its network gate, if the target
// has one, is open; the caller runs with ProxyEnv.
func (m *Manager) Claim(ctx context.Context, t Target) (*Sandbox, Placed, error) {
	p, placed, done, err := m.poolFor(ctx, t)
	if err != nil {
		return nil, placed, err
	}
	defer done()
	sb, err := p.Claim(ctx)
	if err != nil {
		return nil, placed, err
	}
	if t.Network != nil {
		if err := sb.OpenNetwork(t.Network); err != nil {
			sb.Destroy(ctx)
			return nil, placed, err
		}
	}
	return sb, placed, nil
}

// Layers lists the package layers on disk.
func (m *Manager) Layers() []packages.LayerInfo { return m.store.List() }

// DeleteLayer removes a layer no sandbox uses.
func (m *Manager) DeleteLayer(key string) error { return m.store.Delete(key) }

// ExecuteShared runs a request in the long-lived sandbox called name, claimed
// from the runtime's pool on first use. Unlike Execute's, its /workspace is
// not emptied between runs: for protocols whose runs keep the files of the
// ones before (NeMo's working directory). Processes still do not outlive
// their run, whose process group is killed when it ends. A sandbox that died
// is replaced, and its files are gone with it.
func (m *Manager) ExecuteShared(ctx context.Context, name, runtimeName string, req *agent.ExecRequest, onOutput func(string, []byte)) (*Result, error) {
	p, err := m.pool(runtimeName)
	if err != nil {
		return nil, err
	}
	key := name + "/" + p.name
	m.sharedMu.Lock()
	sb := m.shared[key]
	if sb == nil || !sb.Alive() {
		if sb != nil {
			m.log.Warn("shared sandbox died; its files are lost", "name", name, "sandbox", sb.ID)
			go sb.Destroy(context.Background())
		}
		if sb, err = p.Claim(ctx); err != nil {
			m.sharedMu.Unlock()
			return nil, err
		}
		m.shared[key] = sb
	}
	m.sharedMu.Unlock()
	res, err := sb.Exec(ctx, req, onOutput)
	if err != nil && errors.Is(err, errdefs.ErrUnavailable) {
		return nil, fmt.Errorf("sandbox %s died during the run: %w", sb.ID, err)
	}
	return res, err
}

// WaitReady blocks until every pool can serve a run.
func (m *Manager) WaitReady(ctx context.Context) error {
	for name, p := range m.pools {
		if err := p.WaitReady(ctx); err != nil {
			return fmt.Errorf("%s pool not ready: %w", name, err)
		}
	}
	return nil
}

// Stats reports each pool: runtimes', templates' and package sets'.
func (m *Manager) Stats() map[string]Stats {
	out := map[string]Stats{}
	for n, p := range m.pools {
		out[n] = p.Stats()
	}
	for _, t := range m.templates {
		out[t.pool.name] = t.pool.Stats()
	}
	m.dynMu.Lock()
	for _, d := range m.dynamic {
		out[d.pool.name] = d.pool.Stats()
	}
	m.dynMu.Unlock()
	return out
}

// Close destroys every sandbox.
func (m *Manager) Close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.wg.Wait()
	for _, p := range m.pools {
		p.Close()
	}
	for _, t := range m.templates {
		t.pool.Close()
	}
	m.closeIdlePools(-1)
	m.sharedMu.Lock()
	defer m.sharedMu.Unlock()
	for key, sb := range m.shared {
		sb.Destroy(context.Background())
		delete(m.shared, key)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// checkTraversable fails when a directory on the way to the data dir denies
// "others" search permission, which the user namespace's uids need.
func checkTraversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("data dir: %s is not searchable by others (mode %v), so sandboxes in a user namespace cannot reach their root; chmod o+x %s, choose another --data-dir, or run with --userns=false: %w", d, fi.Mode().Perm(), d, errdefs.ErrInvalid)
		}
		if d == "/" {
			return nil
		}
	}
}
