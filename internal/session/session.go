// Package session keeps stateful sandboxes: one per coding agent's episode,
// claimed from the warm pool, with persistent kernels, reset between
// episodes, and stopped when idle or too old.
package session

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/packages"
	"github.com/codecell/codecell/internal/sandbox"
)

// Options are what a session is created with; zero values take defaults.
type Options struct {
	Runtime     string
	MemoryMB    int64
	CPUs        float64
	PIDs        int64
	IdleTimeout time.Duration
	MaxLifetime time.Duration
	MaxEpisodes int // resets before the sandbox is replaced by a fresh one; 0: never
	Env         map[string]string
	Display     bool   // an X server in the sandbox
	Screen      string // its WIDTHxHEIGHTxDEPTH

	Template       string           // a configured template's sandbox
	Packages       packages.Request // installed into layers mounted at creation
	Network        *egress.Policy   // nil: no network
	AllowedImports []string         // Python's import guard-rail; nil: any
	plan           packages.Plan    // Packages resolved
}

// Info is a session as the API shows it.
type Info struct {
	ID           string             `json:"id"`
	Status       string             `json:"status"` // "idle" or "running"
	Runtime      string             `json:"runtime"`
	CreatedAt    time.Time          `json:"created_at"`
	LastActiveAt time.Time          `json:"last_active_at"`
	ExpiresAt    time.Time          `json:"expires_at"` // max_lifetime_s after creation
	EpisodeID    string             `json:"episode_id"`
	StepCount    int                `json:"step_count"`
	Episodes     int                `json:"episodes"` // resets so far
	LastExitCode int                `json:"last_exit_code"`
	MemoryMB     int64              `json:"memory_mb"`
	CPUs         float64            `json:"cpus"`
	PIDs         int64              `json:"pids"`
	IdleTimeoutS float64            `json:"idle_timeout_s"`
	MaxLifetimeS float64            `json:"max_lifetime_s"`
	MaxEpisodes  int                `json:"max_episodes"`
	Env          map[string]string  `json:"env,omitempty"`
	Display      *agent.DisplayInfo `json:"display"` // null without one

	Template       string        `json:"template,omitempty"`
	Packages       *PackagesInfo `json:"packages,omitempty"`
	Network        *egress.Stats `json:"network"` // null: no network
	AllowedImports []string      `json:"allowed_imports,omitempty"`
}

// PackagesInfo is what a session's packages came to.
type PackagesInfo struct {
	packages.Plan
	Layers []sandbox.LayerUse `json:"layers"`
}

// Session is one stateful sandbox.
type Session struct {
	id      string
	opts    Options
	created time.Time

	mu         sync.Mutex
	sb         *sandbox.Sandbox
	lastActive time.Time
	running    int // execs, file transfers and holding connections
	display    *agent.DisplayInfo
	episodeID  string
	steps      int
	episodes   int
	lastExit   int
	packages   *PackagesInfo
}

func (s *Session) info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := "idle"
	if s.running > 0 {
		status = "running"
	}
	return Info{ID: s.id, Status: status, Runtime: s.opts.Runtime, CreatedAt: s.created,
		LastActiveAt: s.lastActive, ExpiresAt: s.created.Add(s.opts.MaxLifetime),
		EpisodeID: s.episodeID, StepCount: s.steps, Episodes: s.episodes, LastExitCode: s.lastExit,
		MemoryMB: s.opts.MemoryMB, CPUs: s.opts.CPUs, PIDs: s.opts.PIDs,
		IdleTimeoutS: s.opts.IdleTimeout.Seconds(), MaxLifetimeS: s.opts.MaxLifetime.Seconds(),
		MaxEpisodes: s.opts.MaxEpisodes, Env: s.opts.Env, Display: s.display,
		Template: s.opts.Template, Packages: s.packages, Network: s.sb.NetworkStats(), AllowedImports: s.opts.AllowedImports}
}

// busy marks activity that keeps the session from idling out until done.
func (s *Session) busy() (done func()) {
	s.mu.Lock()
	s.running++
	s.lastActive = time.Now()
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.running--
		s.lastActive = time.Now()
		s.mu.Unlock()
	}
}

// Limits bound what a session may ask for.
type Limits struct {
	MaxSessions        int
	DefaultIdleTimeout time.Duration
	MaxIdleTimeout     time.Duration
	DefaultLifetime    time.Duration
	MaxLifetime        time.Duration
	Defaults           Options // memory, CPUs, pids and runtime of the pools' sandboxes
}

// Manager keeps every session of the server.
type Manager struct {
	sandboxes *sandbox.Manager
	limits    Limits
	log       *slog.Logger

	mu       sync.Mutex
	sessions map[string]*Session
	stop     chan struct{}
	wg       sync.WaitGroup
}

// NewManager starts the janitor that ends idle and expired sessions.
func NewManager(sandboxes *sandbox.Manager, limits Limits, log *slog.Logger) *Manager {
	m := &Manager{sandboxes: sandboxes, limits: limits, log: log, sessions: map[string]*Session{}, stop: make(chan struct{})}
	m.wg.Add(1)
	go m.janitor()
	return m
}

func invalid(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalid)...)
}

func newID(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// withDefaults checks opts against the limits and fills in what is unset.
func (m *Manager) withDefaults(opts Options) (Options, error) {
	l := m.limits
	if opts.Template != "" {
		t, err := m.sandboxes.Template(opts.Template)
		if err != nil {
			return opts, err
		}
		if t.Runtime != "" {
			if opts.Runtime != "" && opts.Runtime != t.Runtime {
				return opts, invalid("template %q runs on %s; leave runtime out", opts.Template, t.Runtime)
			}
			opts.Runtime = t.Runtime
		}
		if opts.MemoryMB == 0 {
			opts.MemoryMB = t.MemoryMB
		}
		if opts.CPUs == 0 {
			opts.CPUs = t.CPUs
		}
		if opts.PIDs == 0 {
			opts.PIDs = t.PIDs
		}
		if t.Display {
			opts.Display = true
			if opts.Screen == "" {
				opts.Screen = cmp.Or(t.Screen, sandbox.DefaultScreen)
			}
		}
		if t.Env != nil {
			env := maps.Clone(t.Env)
			maps.Copy(env, opts.Env)
			opts.Env = env
		}
		if opts.AllowedImports == nil {
			opts.AllowedImports = t.AllowedImports
		}
		if opts.Network == nil && t.Network != nil {
			p, err := egress.Parse(t.Network.Allow)
			if err != nil {
				return opts, err
			}
			opts.Network = p
		}
	}
	if opts.Runtime == "" {
		opts.Runtime = l.Defaults.Runtime
	}
	switch {
	case opts.MemoryMB == 0:
		opts.MemoryMB = l.Defaults.MemoryMB
	case opts.MemoryMB < 128 || opts.MemoryMB > 65536:
		return opts, invalid("memory_mb %d: must be between 128 and 65536", opts.MemoryMB)
	}
	switch {
	case opts.CPUs == 0:
		opts.CPUs = l.Defaults.CPUs
	case opts.CPUs < 0.05 || opts.CPUs > 64:
		return opts, invalid("cpus %g: must be between 0.05 and 64", opts.CPUs)
	}
	switch {
	case opts.PIDs == 0:
		opts.PIDs = l.Defaults.PIDs
	case opts.PIDs < 16 || opts.PIDs > 32768:
		return opts, invalid("pids %d: must be between 16 and 32768", opts.PIDs)
	}
	switch {
	case opts.IdleTimeout == 0:
		opts.IdleTimeout = l.DefaultIdleTimeout
	case opts.IdleTimeout < 0 || opts.IdleTimeout > l.MaxIdleTimeout:
		return opts, invalid("idle_timeout_s %g: must be between 0 and the server's maximum of %g", opts.IdleTimeout.Seconds(), l.MaxIdleTimeout.Seconds())
	}
	switch {
	case opts.MaxLifetime == 0:
		opts.MaxLifetime = l.DefaultLifetime
	case opts.MaxLifetime < 0 || opts.MaxLifetime > l.MaxLifetime:
		return opts, invalid("max_lifetime_s %g: must be between 0 and the server's maximum of %g", opts.MaxLifetime.Seconds(), l.MaxLifetime.Seconds())
	}
	if opts.Display && opts.Screen == "" {
		opts.Screen = sandbox.DefaultScreen
	}
	if !opts.Display && opts.Screen != "" {
		return opts, invalid("screen %q needs \"display\": true", opts.Screen)
	}
	if opts.MaxEpisodes < 0 {
		return opts, invalid("max_episodes %d: must be 0 (no limit) or more", opts.MaxEpisodes)
	}
	plan, err := m.sandboxes.Resolve(opts.Packages)
	if err != nil {
		return opts, err
	}
	opts.plan = plan
	return opts, nil
}

// Create claims a warm sandbox for a new session.
func (m *Manager) Create(ctx context.Context, opts Options) (Info, error) {
	opts, err := m.withDefaults(opts)
	if err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	full := len(m.sessions) >= m.limits.MaxSessions
	m.mu.Unlock()
	if full {
		return Info{}, fmt.Errorf("the server holds its maximum of %d sessions; delete one or wait for one to idle out: %w", m.limits.MaxSessions, errdefs.ErrExhausted)
	}
	sb, disp, placed, err := m.claim(ctx, opts)
	if err != nil {
		return Info{}, err
	}
	now := time.Now()
	s := &Session{id: newID("sb-"), opts: opts, created: now, sb: sb, lastActive: now, episodeID: newID("ep-"), display: disp}
	if !opts.Packages.Empty() {
		s.packages = &PackagesInfo{Plan: opts.plan, Layers: append([]sandbox.LayerUse{}, placed.Layers...)}
	}
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	m.log.Debug("session created", "session", s.id, "sandbox", sb.ID)
	return s.info(), nil
}

// claim takes a sandbox from the pool and gives it the session's limits and
// display.
func (m *Manager) claim(ctx context.Context, opts Options) (*sandbox.Sandbox, *agent.DisplayInfo, sandbox.Placed, error) {
	sb, placed, err := m.sandboxes.Claim(ctx, sandbox.Target{Runtime: opts.Runtime, Template: opts.Template, Packages: opts.plan, Network: opts.Network})
	if err != nil {
		return nil, nil, placed, err
	}
	if l := sb.Limits; opts.MemoryMB != l.MemoryMB || opts.CPUs != l.CPUs || opts.PIDs != l.PIDs {
		if err := sb.SetLimits(opts.MemoryMB<<20, opts.CPUs, opts.PIDs); err != nil {
			sb.Destroy(context.WithoutCancel(ctx))
			return nil, nil, placed, invalid("cannot apply the session's limits (%v); memory_mb must leave room for the Python zygote, about 100 MiB", err)
		}
	}
	disp := sb.Display
	if opts.Display && disp != nil && fmt.Sprintf("%dx%dx%d", disp.Width, disp.Height, disp.Depth) != opts.Screen {
		sb.Destroy(context.WithoutCancel(ctx))
		return nil, nil, placed, invalid("template %q has a %dx%dx%d display; leave screen out or ask for that one", opts.Template, disp.Width, disp.Height, disp.Depth)
	}
	if opts.Display && disp == nil {
		if disp, err = sb.StartDisplay(ctx, opts.Screen); err != nil {
			sb.Destroy(context.WithoutCancel(ctx))
			return nil, nil, placed, fmt.Errorf("start the display: %w", err)
		}
	}
	return sb, disp, placed, nil
}

func (m *Manager) get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("no sandbox %q (it may have idled out or been deleted): %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// Get describes one session.
func (m *Manager) Get(id string) (Info, error) {
	s, err := m.get(id)
	if err != nil {
		return Info{}, err
	}
	return s.info(), nil
}

// List describes every session, oldest first.
func (m *Manager) List() []Info {
	m.mu.Lock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	infos := make([]Info, len(all))
	for i, s := range all {
		infos[i] = s.info()
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].CreatedAt.Before(infos[j].CreatedAt) })
	return infos
}

// Delete stops a session and frees its sandbox.
func (m *Manager) Delete(id string) error {
	m.mu.Lock()
	s, ok := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("no sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	s.mu.Lock()
	sb := s.sb
	s.mu.Unlock()
	sb.Destroy(context.Background())
	return nil
}

// Exec runs one step in the session's kernel of req.Language.
func (m *Manager) Exec(ctx context.Context, id string, req *agent.ExecRequest, onOutput func(string, []byte)) (*sandbox.Result, Info, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, Info{}, err
	}
	done := s.busy()
	s.mu.Lock()
	sb, opts := s.sb, s.opts // a reset with packages replaces opts
	s.mu.Unlock()
	req.Kernel = true
	req.Env = opts.Env
	if opts.Network != nil {
		env := sandbox.ProxyEnv(opts.Network)
		maps.Copy(env, opts.Env)
		req.Env = env
	}
	req.AllowedImports = opts.AllowedImports
	res, err := sb.Exec(ctx, req, onOutput)
	done()
	if err != nil {
		if !sb.Alive() {
			m.Delete(id)
			return nil, Info{}, fmt.Errorf("sandbox %s died: %w", id, errdefs.ErrUnavailable)
		}
		return nil, Info{}, err
	}
	s.mu.Lock()
	s.steps++
	s.lastExit = res.ExitCode
	s.mu.Unlock()
	return res, s.info(), nil
}

// File acts on the session's /workspace.
func (m *Manager) File(ctx context.Context, id string, req *agent.FileRequest, onData func([]byte)) (*agent.FileResult, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	done := s.busy()
	defer done()
	s.mu.Lock()
	sb := s.sb
	s.mu.Unlock()
	return sb.File(ctx, req, onData)
}

// sandbox returns a session's current sandbox.
func (m *Manager) sandbox(id string) (*sandbox.Sandbox, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb, nil
}

// Screenshot is a PNG of the session's screen.
func (m *Manager) Screenshot(ctx context.Context, id string, req *agent.ScreenshotRequest) ([]byte, error) {
	sb, err := m.sandbox(id)
	if err != nil {
		return nil, err
	}
	return sb.Screenshot(ctx, req)
}

// Input injects mouse and keyboard input into the session's display.
func (m *Manager) Input(ctx context.Context, id string, req *agent.InputRequest) ([]byte, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	done := s.busy()
	defer done()
	sb, err := m.sandbox(id)
	if err != nil {
		return nil, err
	}
	return sb.Input(ctx, req)
}

// Reset starts a new episode: new kernels, empty /workspace, a new episode
// id (episodeID, or a fresh one if empty). After max_episodes resets the
// sandbox itself is replaced, as it is when pkgs (if not nil) asks for
// other packages than the session has.
func (m *Manager) Reset(ctx context.Context, id, episodeID string, pkgs *packages.Request) (Info, error) {
	s, err := m.get(id)
	if err != nil {
		return Info{}, err
	}
	done := s.busy()
	err = m.reset(ctx, s, episodeID, pkgs)
	done() // before info(), which would say "running"
	if err != nil {
		return Info{}, err
	}
	return s.info(), nil
}

func (m *Manager) reset(ctx context.Context, s *Session, episodeID string, pkgs *packages.Request) error {
	id := s.id
	s.mu.Lock()
	sb, episodes, opts := s.sb, s.episodes+1, s.opts
	s.mu.Unlock()
	recycle := opts.MaxEpisodes > 0 && episodes%opts.MaxEpisodes == 0
	if pkgs != nil {
		plan, err := m.sandboxes.Resolve(*pkgs)
		if err != nil {
			return err
		}
		opts.Packages = *pkgs
		if !slices.Equal(plan.Python, opts.plan.Python) || !slices.Equal(plan.JavaScript, opts.plan.JavaScript) {
			recycle = true
		}
		opts.plan = plan
	}
	var placed sandbox.Placed
	if recycle {
		fresh, disp, p, err := m.claim(ctx, opts)
		if err != nil {
			return err
		}
		placed = p
		m.mu.Lock()
		s.mu.Lock()
		current := m.sessions[id] == s && s.sb == sb // not deleted, not reset by another call meanwhile
		if current {
			s.sb, s.display = fresh, disp
		}
		s.mu.Unlock()
		m.mu.Unlock()
		if !current {
			fresh.Destroy(context.WithoutCancel(ctx))
			return fmt.Errorf("sandbox %q was deleted or reset while this reset made its new sandbox: %w", id, errdefs.ErrConflict)
		}
		go sb.Destroy(context.Background())
		m.log.Debug("session recycled", "session", id, "old", sb.ID, "new", fresh.ID)
	} else if err := sb.Scrub(ctx); err != nil {
		return fmt.Errorf("reset sandbox %s: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	s.mu.Lock()
	if pkgs != nil {
		s.opts = opts
		s.packages = &PackagesInfo{Plan: opts.plan, Layers: append([]sandbox.LayerUse{}, placed.Layers...)}
	}
	s.episodes = episodes
	if episodeID == "" {
		episodeID = newID("ep-")
	}
	s.episodeID = episodeID
	s.steps = 0
	s.lastExit = 0
	s.mu.Unlock()
	return nil
}

// Hold marks a session active until the returned func is called: for a
// connection that owns it and may sit quiet between steps.
func (m *Manager) Hold(id string) (func(), error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	return s.busy(), nil
}

// Capacity is how many sessions exist and how many may.
func (m *Manager) Capacity() (active, max int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions), m.limits.MaxSessions
}

// janitor ends sessions past their lifetime and those idle past their
// time-out, where idle means no exec or stream in flight and no process the
// code started still running.
func (m *Manager) janitor() {
	defer m.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		all := make([]*Session, 0, len(m.sessions))
		for _, s := range m.sessions {
			all = append(all, s)
		}
		m.mu.Unlock()
		now := time.Now()
		for _, s := range all {
			s.mu.Lock()
			expired := now.Sub(s.created) > s.opts.MaxLifetime
			idle := s.running == 0 && now.Sub(s.lastActive) > s.opts.IdleTimeout
			sb := s.sb
			s.mu.Unlock()
			if idle && !expired {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				n, err := sb.Processes(ctx)
				cancel()
				if err == nil && n > 0 {
					s.mu.Lock()
					s.lastActive = now // a server or job it started is still running
					s.mu.Unlock()
					continue
				}
			}
			if expired || idle {
				why := "idle"
				if expired {
					why = "max lifetime"
				}
				m.log.Info("session ended", "session", s.id, "reason", why)
				if err := m.Delete(s.id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
					m.log.Warn("end session", "session", s.id, "err", err)
				}
			}
		}
	}
}

// Close ends every session.
func (m *Manager) Close() {
	close(m.stop)
	m.wg.Wait()
	for _, info := range m.List() {
		m.Delete(info.ID)
	}
}
