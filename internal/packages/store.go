package packages

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/codecell/codecell/internal/errdefs"
)

// Layer kinds.
const (
	Python     = "python"
	JavaScript = "javascript"
)

// Layer is a built set of packages on the host, mounted read-only into the
// sandboxes that asked for that set.
type Layer struct {
	Key          string    `json:"key"`
	Kind         string    `json:"kind"`
	Requirements []string  `json:"requirements"`
	Interpreter  string    `json:"interpreter"`
	Index        string    `json:"index"`
	SizeBytes    int64     `json:"size_bytes"`
	BuiltAt      time.Time `json:"built_at"`
	BuildMs      float64   `json:"build_ms"`
	// Site and Bin are where the packages and their commands are, relative
	// to the layer's content.
	Site string `json:"site"`
	Bin  string `json:"bin"`

	Dir string `json:"-"` // the content, on the host
}

// BuildFunc installs reqs of kind into dir (empty, writable by sandboxes)
// and returns the installer's message on failure.
type BuildFunc func(ctx context.Context, kind string, reqs []string, dir string) error

// Store keeps layers under a directory: one per key, built once, evicted
// least recently used when their total passes the budget. Layers in use are
// never evicted.
type Store struct {
	dir          string
	budget       int64
	buildTimeout time.Duration
	build        BuildFunc
	log          *slog.Logger

	builds chan struct{} // bounds builds running at once

	mu       sync.Mutex
	inflight map[string]*buildCall
	refs     map[string]int
}

type buildCall struct {
	done  chan struct{}
	layer *Layer
	err   error
}

// NewStore opens the store in dir, removing builds a previous server left
// half done.
func NewStore(dir string, budget int64, buildTimeout time.Duration, build BuildFunc, log *slog.Logger) (*Store, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("layer dir: %w", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".build-") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return &Store{dir: dir, budget: budget, buildTimeout: buildTimeout, build: build, log: log, builds: make(chan struct{}, 2),
		inflight: map[string]*buildCall{}, refs: map[string]int{}}, nil
}

// Key names the layer of reqs for an interpreter and index: the same set
// asked for in any order is the same layer.
func Key(kind string, reqs []string, interpreter, index string) string {
	sorted := append([]string(nil), reqs...)
	sort.Strings(sorted)
	h := sha256.Sum256([]byte(kind + "\x00" + interpreter + "\x00" + index + "\x00" + strings.Join(sorted, "\x00")))
	return hex.EncodeToString(h[:12])
}

// Get returns the layer for reqs, building it if it is not there (once,
// however many callers ask at the same time), and holds it in use until
// Release. built reports whether this call waited for a build.
func (s *Store) Get(ctx context.Context, kind string, reqs []string, interpreter, index string) (l *Layer, built bool, err error) {
	key := Key(kind, reqs, interpreter, index)
	s.mu.Lock()
	if l, err := s.load(key); err == nil {
		s.refs[key]++
		s.mu.Unlock()
		now := time.Now()
		os.Chtimes(filepath.Join(s.dir, key, "layer.json"), now, now) // recently used
		return l, false, nil
	}
	c, ok := s.inflight[key]
	if !ok {
		c = &buildCall{done: make(chan struct{})}
		s.inflight[key] = c
		go s.run(c, key, kind, reqs, interpreter, index)
	}
	s.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, false, fmt.Errorf("waiting for the %s packages %s to install: %w", kind, strings.Join(reqs, " "), ctx.Err())
	}
	if c.err != nil {
		return nil, true, c.err
	}
	s.mu.Lock()
	if _, err := s.load(key); err != nil { // evicted or deleted before we held it
		s.mu.Unlock()
		return s.Get(ctx, kind, reqs, interpreter, index)
	}
	s.refs[key]++
	s.mu.Unlock()
	s.GC() // only now: the new layer is held, so it is not what goes
	return c.layer, true, nil
}

// Hold marks one more use of a layer already held.
func (s *Store) Hold(l *Layer) {
	s.mu.Lock()
	s.refs[l.Key]++
	s.mu.Unlock()
}

// Release ends a use of a layer from Get or Hold.
func (s *Store) Release(l *Layer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs[l.Key]--; s.refs[l.Key] <= 0 {
		delete(s.refs, l.Key)
	}
}

// run builds a layer into a scratch directory and moves it into place only
// when the install succeeded, so no half-built layer is ever used.
func (s *Store) run(c *buildCall, key, kind string, reqs []string, interpreter, index string) {
	defer func() {
		s.mu.Lock()
		delete(s.inflight, key)
		s.mu.Unlock()
		close(c.done)
	}()
	b := make([]byte, 4)
	rand.Read(b)
	tmp := filepath.Join(s.dir, ".build-"+key+"-"+hex.EncodeToString(b))
	content := filepath.Join(tmp, "content")
	if err := os.MkdirAll(content, 0o755); err != nil {
		c.err = err
		return
	}
	s.builds <- struct{}{} // each build is a sandbox with 1 GiB: two at a time
	defer func() { <-s.builds }()
	ctx, cancel := context.WithTimeout(context.Background(), s.buildTimeout)
	defer cancel()
	start := time.Now()
	if err := s.build(ctx, kind, reqs, content); err != nil {
		os.RemoveAll(tmp)
		c.err = fmt.Errorf("install %s packages %s: %w", kind, strings.Join(reqs, " "), err)
		s.log.Warn("layer build failed", "kind", kind, "key", key, "err", err)
		return
	}
	l := &Layer{Key: key, Kind: kind, Requirements: reqs, Interpreter: interpreter, Index: index,
		BuiltAt: time.Now().UTC(), BuildMs: float64(time.Since(start).Microseconds()) / 1000}
	if err := l.locate(content); err != nil {
		os.RemoveAll(tmp)
		c.err = fmt.Errorf("install %s packages %s: %w", kind, strings.Join(reqs, " "), err)
		return
	}
	l.SizeBytes = du(content)
	meta, _ := json.MarshalIndent(l, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "layer.json"), meta, 0o644); err != nil {
		os.RemoveAll(tmp)
		c.err = err
		return
	}
	final := filepath.Join(s.dir, key)
	s.mu.Lock()
	err := os.Rename(tmp, final)
	s.mu.Unlock()
	if err != nil {
		os.RemoveAll(tmp)
		c.err = fmt.Errorf("store layer: %w", err)
		return
	}
	l.Dir = filepath.Join(final, "content")
	c.layer = l
	s.log.Info("layer built", "kind", kind, "key", key, "packages", strings.Join(reqs, " "), "size_bytes", l.SizeBytes, "build_ms", l.BuildMs)
}

// locate finds where the installer put the packages: pip --prefix follows
// the interpreter's install scheme (Debian's adds local/ and dist-packages).
func (l *Layer) locate(content string) error {
	if l.Kind == JavaScript {
		l.Site, l.Bin = "node_modules", "node_modules/.bin"
		return nil
	}
	for _, pattern := range []string{"lib/python3*/site-packages", "local/lib/python3*/dist-packages", "lib/python3*/dist-packages"} {
		if m, _ := filepath.Glob(filepath.Join(content, pattern)); len(m) == 1 {
			l.Site, _ = filepath.Rel(content, m[0])
			l.Bin = filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(l.Site))), "bin")
			return nil
		}
	}
	// pip succeeded without installing anything (the image had it all,
	// extras included): an empty layer.
	l.Site, l.Bin = "lib/site-packages", "bin"
	return os.MkdirAll(filepath.Join(content, l.Site), 0o755)
}

// load reads a built layer's description.
func (s *Store) load(key string) (*Layer, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, key, "layer.json"))
	if err != nil {
		return nil, err
	}
	var l Layer
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	l.Dir = filepath.Join(s.dir, key, "content")
	return &l, nil
}

// LayerInfo is a layer with its use.
type LayerInfo struct {
	Layer
	LastUsed time.Time `json:"last_used"`
	InUse    int       `json:"in_use"`
}

// List describes every built layer, most recently used first.
func (s *Store) List() []LayerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list()
}

func (s *Store) list() []LayerInfo {
	entries, _ := os.ReadDir(s.dir)
	var out []LayerInfo
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		l, err := s.load(e.Name())
		if err != nil {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.dir, e.Name(), "layer.json"))
		if err != nil {
			continue
		}
		out = append(out, LayerInfo{Layer: *l, LastUsed: fi.ModTime().UTC(), InUse: s.refs[l.Key]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out
}

// GC removes the least recently used layers not in use until the rest fit
// the budget.
func (s *Store) GC() {
	s.mu.Lock()
	defer s.mu.Unlock()
	layers := s.list()
	var total int64
	for _, l := range layers {
		total += l.SizeBytes
	}
	for i := len(layers) - 1; i >= 0 && total > s.budget; i-- {
		l := layers[i]
		if l.InUse > 0 {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, l.Key)); err != nil {
			s.log.Warn("remove layer", "key", l.Key, "err", err)
			continue
		}
		total -= l.SizeBytes
		s.log.Info("layer evicted", "key", l.Key, "packages", strings.Join(l.Requirements, " "), "size_bytes", l.SizeBytes)
	}
}

// Delete removes a layer that is not in use.
func (s *Store) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := hex.DecodeString(key); err != nil || len(key) != 24 {
		return fmt.Errorf("no layer %q: keys are 24 hex digits: %w", key, errdefs.ErrNotFound)
	}
	if _, err := s.load(key); err != nil {
		return fmt.Errorf("no layer %q: %w", key, errdefs.ErrNotFound)
	}
	if s.refs[key] > 0 {
		return fmt.Errorf("layer %q is mounted in %d sandboxes: %w", key, s.refs[key], errdefs.ErrConflict)
	}
	return os.RemoveAll(filepath.Join(s.dir, key))
}

func du(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// NotFound reports whether an install failed because the index has no such
// package or version (as pip and npm word it), which trying again will not
// change.
func NotFound(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "No matching distribution found") || strings.Contains(msg, "npm error 404") || strings.Contains(msg, "E404")
}
