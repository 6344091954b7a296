package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/oci"
	"github.com/codecell/codecell/internal/packages"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Target says which kind of sandbox a request wants and what it may reach.
type Target struct {
	Runtime  string
	Template string
	Packages packages.Plan  // resolved (Manager.Resolve); its layers are mounted
	Network  *egress.Policy // nil: no network
	Allowed  []string       // import allow-list for Python, nil: any
}

// Placed tells a caller where its request ran.
type Placed struct {
	Layers []LayerUse `json:"layers,omitempty"`
}

// LayerUse is one package layer a sandbox was made with.
type LayerUse struct {
	Key          string   `json:"key"`
	Kind         string   `json:"kind"`
	Requirements []string `json:"requirements"`
	Built        bool     `json:"built"` // installed for this request, not reused
	BuildMs      float64  `json:"build_ms,omitempty"`
}

// profile is a kind of sandbox beyond the base spec: what a pool keeps.
type profile struct {
	runtime string
	layers  []*packages.Layer
	preload []string // nil: the server's
	env     map[string]string
	limits  Limits
	screen  string // started at creation; "" for none
}

// Limits are a sandbox's cgroup limits.
type Limits struct {
	MemoryMB int64
	CPUs     float64
	PIDs     int64
}

// spec is the sandbox spec of a profile.
func (m *Manager) specFor(p profile) Spec {
	s := m.spec
	s.Options.Mounts = nil
	if p.preload != nil {
		s.Preload = p.preload
	}
	env := map[string]string{}
	for _, kv := range s.Options.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var bins []string
	for _, l := range p.layers {
		dst := oci.LayerDir + "/python"
		if l.Kind == packages.JavaScript {
			dst = oci.LayerDir + "/node"
			env["NODE_PATH"] = path.Join(dst, l.Site)
		} else {
			env["PYTHONPATH"] = path.Join(dst, l.Site)
		}
		bins = append(bins, path.Join(dst, l.Bin))
		s.Options.Mounts = append(s.Options.Mounts, specs.Mount{Destination: dst, Type: "bind", Source: l.Dir,
			Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	if len(bins) > 0 {
		env["PATH"] = strings.Join(bins, ":") + ":" + env["PATH"]
	}
	maps.Copy(env, p.env)
	s.Options.Env = nil
	for _, k := range slices.Sorted(maps.Keys(env)) {
		s.Options.Env = append(s.Options.Env, k+"="+env[k])
	}
	if p.limits.MemoryMB != 0 {
		s.Options.MemoryBytes = p.limits.MemoryMB << 20
	}
	if p.limits.CPUs != 0 {
		s.Options.CPUs = p.limits.CPUs
	}
	if p.limits.PIDs != 0 {
		s.Options.PidsLimit = p.limits.PIDs
	}
	return s
}

// newPool starts a pool of a profile. Its sandboxes hold their layers in
// use for as long as they live, whether in the pool or claimed.
func (m *Manager) newPool(name string, size int, p profile, layersFor func(context.Context) ([]*packages.Layer, error)) (*Pool, error) {
	rt, ok := m.runtimes[p.runtime]
	if !ok {
		_, err := m.pool(p.runtime)
		return nil, err
	}
	return NewPool(name, p.runtime, size, m.cfg.MaxReuse, m.cfg.QueueSize, func(ctx context.Context) (*Sandbox, error) {
		prof := p
		if layersFor != nil {
			layers, err := layersFor(ctx)
			if err != nil {
				return nil, err
			}
			prof.layers = layers
		}
		if layersFor == nil { // layersFor's Get already holds them for this sandbox
			for _, l := range prof.layers {
				m.store.Hold(l)
			}
		}
		spec := m.specFor(prof)
		sb, err := create(ctx, rt, m.dataDir, spec, m.log)
		if err != nil {
			for _, l := range prof.layers {
				m.store.Release(l)
			}
			return nil, err
		}
		sb.Limits = Limits{MemoryMB: spec.Options.MemoryBytes >> 20, CPUs: spec.Options.CPUs, PIDs: spec.Options.PidsLimit}
		sb.layers = prof.layers
		sb.release = func() {
			for _, l := range prof.layers {
				m.store.Release(l)
			}
		}
		if prof.screen != "" {
			if sb.Display, err = sb.StartDisplay(ctx, prof.screen); err != nil {
				sb.Destroy(ctx)
				return nil, fmt.Errorf("start the display: %w", err)
			}
		}
		return sb, nil
	}, m.log), nil
}

// template is a configured template and its pool.
type template struct {
	cfg  config.Template
	pool *Pool
}

// startTemplates starts a pool per template. A template's packages are
// installed by its pool's first creation (a failure is retried and shown in
// its pool's stats, as any creation failure is).
func (m *Manager) startTemplates() error {
	for _, name := range slices.Sorted(maps.Keys(m.cfg.Templates)) {
		t := m.cfg.Templates[name]
		rtName := t.Runtime
		if rtName == "" {
			rtName = m.cfg.Runtime
		}
		screen := ""
		if t.Display {
			screen = t.Screen
			if screen == "" {
				screen = DefaultScreen
			}
		}
		p := profile{runtime: rtName, preload: t.Preload, env: t.Env, screen: screen,
			limits: Limits{MemoryMB: t.MemoryMB, CPUs: t.CPUs, PIDs: t.PIDs}}
		req := packages.Request{Python: t.Packages.Python, JavaScript: t.Packages.JavaScript}
		plan, err := packages.Resolve(req, m.env)
		if err != nil {
			return fmt.Errorf("template %q: %w", name, err)
		}
		var layersFor func(context.Context) ([]*packages.Layer, error)
		if !plan.Empty() {
			// A package the index does not have stays missing: no retries.
			var refused atomic.Pointer[error]
			layersFor = func(ctx context.Context) ([]*packages.Layer, error) {
				if err := refused.Load(); err != nil {
					return nil, *err
				}
				layers, _, err := m.layers(ctx, plan)
				if errors.Is(err, errdefs.ErrInvalid) && packages.NotFound(err) {
					err = fmt.Errorf("template %q: %w (fix the templates file and restart)", name, err)
					refused.Store(&err)
				}
				if err != nil {
					return nil, err
				}
				return layers, nil // held once, for the sandbox about to be made
			}
		}
		size := t.PoolSize
		if size == 0 {
			size = 1
		}
		pool, err := m.newPool("template "+name, size, p, layersFor)
		if err != nil {
			return fmt.Errorf("template %q: %w", name, err)
		}
		m.templates[name] = &template{cfg: t, pool: pool}
	}
	return nil
}

// DefaultScreen is the display a request gets when it names none.
const DefaultScreen = "1280x800x24"

// Template is a configured template's settings.
func (m *Manager) Template(name string) (config.Template, error) {
	t, ok := m.templates[name]
	if !ok {
		names := slices.Sorted(maps.Keys(m.templates))
		if len(names) == 0 {
			return config.Template{}, fmt.Errorf("unknown template %q: this server has no templates (see --templates): %w", name, errdefs.ErrInvalid)
		}
		return config.Template{}, fmt.Errorf("unknown template %q; this server has: %s: %w", name, strings.Join(names, ", "), errdefs.ErrInvalid)
	}
	return t.cfg, nil
}

// Resolve turns package names into what would be installed.
func (m *Manager) Resolve(req packages.Request) (packages.Plan, error) {
	if len(req.Python) > 0 && m.env.Python == "" {
		return packages.Plan{}, fmt.Errorf("python packages need python3 in the sandbox image, which is not installed: %w", errdefs.ErrUnavailable)
	}
	if len(req.JavaScript) > 0 && m.env.Node == "" {
		return packages.Plan{}, fmt.Errorf("javascript packages need node in the sandbox image, which is not installed: %w", errdefs.ErrUnavailable)
	}
	return packages.Resolve(req, m.env)
}

// layers gets (building if needed) the layers of a plan, held in use.
func (m *Manager) layers(ctx context.Context, plan packages.Plan) ([]*packages.Layer, []LayerUse, error) {
	var layers []*packages.Layer
	var uses []LayerUse
	release := func() {
		for _, l := range layers {
			m.store.Release(l)
		}
	}
	for _, kind := range []string{packages.Python, packages.JavaScript} {
		reqs, interp, index := plan.Python, m.env.Python, m.cfg.PipIndexURL+" "+m.cfg.PipExtraIndexURL
		if kind == packages.JavaScript {
			reqs, interp, index = plan.JavaScript, m.env.Node, m.cfg.NPMRegistry
		}
		if len(reqs) == 0 {
			continue
		}
		l, built, err := m.store.Get(ctx, kind, reqs, interp, index)
		if err != nil {
			release()
			return nil, nil, err
		}
		layers = append(layers, l)
		u := LayerUse{Key: l.Key, Kind: kind, Requirements: l.Requirements, Built: built}
		if built {
			u.BuildMs = l.BuildMs
		}
		uses = append(uses, u)
	}
	return layers, uses, nil
}

// dynamicPool is the warm pool of one package set, made on first use and
// closed when unused for a while.
type dynamicPool struct {
	pool     *Pool
	layers   []*packages.Layer // held in use while the pool is open
	lastUsed time.Time
	busy     int // requests between poolFor and their done
}

// poolFor finds (or makes) the pool a target's sandboxes come from. The
// caller calls done once it has released or claimed its sandbox, so an idle
// package pool is never closed under a request.
func (m *Manager) poolFor(ctx context.Context, t Target) (_ *Pool, _ Placed, done func(), _ error) {
	p, placed, err := m.findPool(ctx, t)
	if err != nil || p.dyn == nil {
		return p, placed, func() {}, err
	}
	return p, placed, func() {
		m.dynMu.Lock()
		p.dyn.busy--
		p.dyn.lastUsed = time.Now()
		m.dynMu.Unlock()
	}, nil
}

func (m *Manager) findPool(ctx context.Context, t Target) (*Pool, Placed, error) {
	if t.Template != "" {
		if !t.Packages.Empty() {
			return nil, Placed{}, fmt.Errorf("packages cannot be added to template %q at request time; add them to the template: %w", t.Template, errdefs.ErrInvalid)
		}
		if _, err := m.Template(t.Template); err != nil {
			return nil, Placed{}, err
		}
		tp := m.templates[t.Template]
		if t.Runtime != "" && t.Runtime != tp.pool.runtime {
			return nil, Placed{}, fmt.Errorf("template %q runs on %s, not %s; leave runtime out: %w", t.Template, tp.pool.runtime, t.Runtime, errdefs.ErrInvalid)
		}
		return tp.pool, Placed{}, nil
	}
	if t.Packages.Empty() {
		p, err := m.pool(t.Runtime)
		return p, Placed{}, err
	}
	base, err := m.pool(t.Runtime)
	if err != nil {
		return nil, Placed{}, err
	}
	layers, uses, err := m.layers(ctx, t.Packages)
	if err != nil {
		return nil, Placed{}, err
	}
	key := base.runtime
	for _, l := range layers {
		key += " " + l.Kind + ":" + l.Key
	}
	m.dynMu.Lock()
	defer m.dynMu.Unlock()
	d, ok := m.dynamic[key]
	if ok {
		for _, l := range layers { // the open pool already holds them
			m.store.Release(l)
		}
	} else {
		p, err := m.newPool("packages "+key, m.cfg.PackagePoolSize, profile{runtime: base.runtime, layers: layers}, nil)
		if err != nil {
			for _, l := range layers {
				m.store.Release(l)
			}
			return nil, Placed{}, err
		}
		d = &dynamicPool{pool: p, layers: layers}
		p.dyn = d
		m.dynamic[key] = d
	}
	d.lastUsed = time.Now()
	d.busy++
	return d.pool, Placed{Layers: uses}, nil
}

// closeIdlePools closes package pools unused for idle, freeing their
// layers for eviction.
func (m *Manager) closeIdlePools(idle time.Duration) {
	m.dynMu.Lock()
	var closing []*dynamicPool
	for key, d := range m.dynamic {
		if d.busy == 0 && time.Since(d.lastUsed) > idle || idle < 0 {
			closing = append(closing, d)
			delete(m.dynamic, key)
		}
	}
	m.dynMu.Unlock()
	var wg sync.WaitGroup
	for _, d := range closing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.pool.Close()
			for _, l := range d.layers {
				m.store.Release(l)
			}
		}()
	}
	wg.Wait()
	if len(closing) > 0 {
		m.store.GC()
	}
}

// prepare readies an acquired sandbox for a target's run: its network gate
// and the environment and import policy that go with it.
func prepare(sb *Sandbox, t Target, req *agent.ExecRequest) error {
	if t.Network != nil {
		if err := sb.OpenNetwork(t.Network); err != nil {
			return err
		}
		env := ProxyEnv(t.Network)
		maps.Copy(env, req.Env) // the caller's own settings win
		req.Env = env
	}
	req.AllowedImports = t.Allowed
	return nil
}
