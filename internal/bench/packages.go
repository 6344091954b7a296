package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// RunPackages measures creating a session with a package the first time
// (installed into a new layer in a build sandbox, then a sandbox made with
// it) and the second time (the layer and its warm pool reused), beside a
// plain session create and beside pip installing the same package on the
// host. names are distinct packages on index, one per first create.
func RunPackages(ctx context.Context, c SessionConfig, index string, names []string) error {
	row := func(name, who string, f Figures) {
		extra := ""
		if f.Failures > 0 {
			extra = fmt.Sprintf("  (%d failed)", f.Failures)
		}
		fmt.Fprintf(c.Out, "%-44s %-16s p50 %8.2f ms  p99 %8.2f ms%s\n", name, who, ms(f.P50), ms(f.P99), extra)
	}
	create := func(pkg string) (time.Duration, error) {
		if err := c.waitWarmPool(ctx, pkg); err != nil {
			return 0, err
		}
		var info struct {
			ID string `json:"id"`
		}
		body := map[string]any{"runtime": c.Runtime}
		if pkg != "" {
			body["packages"] = map[string]any{"python": []string{pkg}}
		}
		d, err := clock(func() error { return c.call(ctx, "POST", "/v1/sandboxes", body, &info) })
		if err == nil {
			err = c.call(ctx, "DELETE", "/v1/sandboxes/"+info.ID, nil, nil)
		}
		return d, err
	}
	i := 0
	pip := timed(len(names), func() (time.Duration, error) {
		dir, err := os.MkdirTemp("", "codecell-bench-pip")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		name := names[i]
		i++
		return clock(func() error {
			out, err := exec.CommandContext(ctx, c.Python, "-m", "pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check",
				"--prefix", dir, "--index-url", index, name).CombinedOutput()
			if err != nil {
				return fmt.Errorf("pip: %v: %s", err, out)
			}
			return nil
		})
	})
	row("pip install of one small wheel (host)", "baseline", pip)
	plain := timed(len(names), func() (time.Duration, error) { return create("") })
	row("session create, no packages", "codecell/"+c.Runtime, plain)
	i = 0
	first := timed(len(names), func() (time.Duration, error) { i++; return create(names[i-1]) })
	row("session create, new package (build+start)", "codecell/"+c.Runtime, first)
	i = 0
	second := timed(len(names), func() (time.Duration, error) { i++; return create(names[i-1]) })
	row("session create, same package again", "codecell/"+c.Runtime, second)
	return nil
}

// waitWarmPool waits until the pool sandboxes with pkg come from has a warm
// one (pkg "": the runtime's own pool; a package whose pool does not exist
// yet: nothing to wait for).
func (c SessionConfig) waitWarmPool(ctx context.Context, pkg string) error {
	if pkg == "" {
		return c.waitWarm(ctx)
	}
	var layers struct {
		Layers []struct {
			Key          string   `json:"key"`
			Requirements []string `json:"requirements"`
		} `json:"layers"`
	}
	if err := c.call(ctx, "GET", "/v1/layers", nil, &layers); err != nil {
		return err
	}
	for _, l := range layers.Layers {
		if strings.Join(l.Requirements, " ") != pkg {
			continue
		}
		name := "packages " + c.Runtime + " python:" + l.Key
		for ctx.Err() == nil {
			var h struct {
				Pools map[string]struct{ Idle int } `json:"pools"`
			}
			if err := c.call(ctx, "GET", "/healthz", nil, &h); err == nil && h.Pools[name].Idle > 0 {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return ctx.Err()
}
