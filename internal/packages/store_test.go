package packages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeBuild is an installer stand-in that lays out what pip --prefix
// does: size bytes of package under lib/python3.11/site-packages.
func writeBuild(calls *atomic.Int64, size int, fail map[string]bool) BuildFunc {
	return func(ctx context.Context, kind string, reqs []string, dir string) error {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond) // long enough for concurrent callers to pile up
		site := filepath.Join(dir, "lib", "python3.11", "site-packages")
		if err := os.MkdirAll(site, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(site, "pkg.py"), make([]byte, size), 0o644); err != nil {
			return err
		}
		if fail[reqs[0]] {
			return errors.New("ERROR: No matching distribution found for " + reqs[0])
		}
		return nil
	}
}

func TestStoreBuildsOnceAndReuses(t *testing.T) {
	var calls atomic.Int64
	dir := t.TempDir()
	s, err := NewStore(dir, 1<<20, time.Minute, writeBuild(&calls, 100, nil), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	layers := make([]*Layer, 8)
	for i := range layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, _, err := s.Get(context.Background(), Python, []string{"b", "a"}, "3.11.2", "idx")
			if err != nil {
				t.Error(err)
				return
			}
			layers[i] = l
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("8 concurrent Gets built %d times, want 1", calls.Load())
	}
	l, built, err := s.Get(context.Background(), Python, []string{"a", "b"}, "3.11.2", "idx")
	if err != nil || built || l.Key != layers[0].Key {
		t.Fatalf("same set in another order: key %s built %v err %v, want key %s reused", l.Key, built, err, layers[0].Key)
	}
	if l.Site != "lib/python3.11/site-packages" || l.SizeBytes != 100 {
		t.Fatalf("layer site %q size %d, want lib/python3.11/site-packages and 100", l.Site, l.SizeBytes)
	}
	if Key(Python, []string{"a", "b"}, "3.12.0", "idx") == l.Key || Key(Python, []string{"a", "b"}, "3.11.2", "other") == l.Key {
		t.Fatal("another interpreter or index gave the same key")
	}
}

func TestStoreFailureLeavesNothing(t *testing.T) {
	var calls atomic.Int64
	dir := t.TempDir()
	s, _ := NewStore(dir, 1<<20, time.Minute, writeBuild(&calls, 10, map[string]bool{"nope": true}), slog.New(slog.DiscardHandler))
	_, _, err := s.Get(context.Background(), Python, []string{"nope"}, "3.11.2", "idx")
	if err == nil || err.Error() != "install python packages nope: ERROR: No matching distribution found for nope" {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a failed build left %d entries in the store", len(entries))
	}
	// A later request tries again rather than remembering the failure.
	s.Get(context.Background(), Python, []string{"nope"}, "3.11.2", "idx")
	if calls.Load() != 2 {
		t.Fatalf("builds = %d, want 2", calls.Load())
	}
}

func TestStoreEvictsLeastRecentlyUnused(t *testing.T) {
	var calls atomic.Int64
	s, _ := NewStore(t.TempDir(), 3000, time.Minute, writeBuild(&calls, 1000, nil), slog.New(slog.DiscardHandler))
	get := func(name string) *Layer {
		l, _, err := s.Get(context.Background(), Python, []string{name}, "3.11.2", "idx")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := get("a") // held: never evicted
	b := get("b")
	s.Release(b)
	time.Sleep(10 * time.Millisecond)
	c := get("c")
	s.Release(c)
	time.Sleep(10 * time.Millisecond)
	s.Release(get("b")) // b is now more recent than c
	time.Sleep(10 * time.Millisecond)
	s.Release(get("d")) // 4000 bytes > 3000: the least recently used unheld one (c) goes
	var have []string
	for _, l := range s.List() {
		have = append(have, l.Requirements[0])
	}
	if fmt.Sprint(have) != "[d b a]" {
		t.Fatalf("layers after eviction (most recent first) = %v, want [d b a]", have)
	}
	if err := s.Delete(a.Key); err == nil {
		t.Fatal("deleted a layer in use")
	}
	s.Release(a)
	if err := s.Delete(a.Key); err != nil {
		t.Fatal(err)
	}
}
