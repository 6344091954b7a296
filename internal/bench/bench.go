// Package bench measures codecell over HTTP beside baselines without it, in
// the same process and run, and prints p50/p99 latency and throughput:
// stateless runs against plain `python3 -c` subprocesses, sessions against a
// fresh interpreter and a plain python3 fed statements through a pipe.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"sync"
	"time"
)

// Scenario is one snippet at one concurrency.
type Scenario struct {
	Name        string
	Code        string
	Concurrency int
}

// Figures summarise one measured series.
type Figures struct {
	N          int
	P50, P99   time.Duration
	Throughput float64 // runs per second
	Failures   int
}

func (f Figures) String() string {
	return fmt.Sprintf("p50 %7.2f ms  p99 %7.2f ms  %7.1f runs/s", ms(f.P50), ms(f.P99), f.Throughput)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measure runs fn n times on conc workers.
func measure(ctx context.Context, n, conc int, fn func(context.Context) error) Figures {
	lat := make([]time.Duration, 0, n)
	var mu sync.Mutex
	var failures int
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t := time.Now()
				err := fn(ctx)
				d := time.Since(t)
				mu.Lock()
				if err != nil {
					failures++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := time.Since(start)
	f := Figures{N: n, Failures: failures, Throughput: float64(len(lat)) / total.Seconds()}
	f.P50, f.P99 = percentiles(lat)
	return f
}

// percentiles sorts lat and returns its median and 99th percentile.
func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
}

// HTTPRunner posts snippets to /v1/execute.
type HTTPRunner struct {
	URL     string
	Runtime string
	Client  *http.Client
}

func (h HTTPRunner) run(ctx context.Context, code, want string) error {
	body, _ := json.Marshal(map[string]any{"code": code, "runtime": h.Runtime})
	req, _ := http.NewRequestWithContext(ctx, "POST", h.URL+"/v1/execute", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || out.Status != "ok" || out.Stdout != want {
		return fmt.Errorf("run failed: %d %s", resp.StatusCode, b)
	}
	return nil
}

func subprocess(ctx context.Context, python, code, want string) error {
	out, err := exec.CommandContext(ctx, python, "-c", code).Output()
	if err != nil {
		return err
	}
	if string(out) != want {
		return fmt.Errorf("baseline printed %q", out)
	}
	return nil
}

// Config is what to measure.
type Config struct {
	Runners   []HTTPRunner
	Python    string // for the baseline
	N         int
	Scenarios []Scenario
	Out       io.Writer
}

// Run measures every scenario for every runner and the baseline.
func Run(ctx context.Context, c Config) error {
	wants := map[string]string{}
	for _, s := range c.Scenarios {
		out, err := exec.CommandContext(ctx, c.Python, "-c", s.Code).Output()
		if err != nil {
			return fmt.Errorf("baseline %q: %w", s.Code, err)
		}
		wants[s.Code] = string(out)
	}
	fmt.Fprintf(c.Out, "%-44s %-12s %s\n", "scenario", "target", "figures")
	for _, s := range c.Scenarios {
		want := wants[s.Code]
		label := fmt.Sprintf("%s, %d client(s)", s.Name, s.Concurrency)
		base := measure(ctx, c.N, s.Concurrency, func(ctx context.Context) error { return subprocess(ctx, c.Python, s.Code, want) })
		fmt.Fprintf(c.Out, "%-44s %-12s %s\n", label, "baseline", base)
		for _, r := range c.Runners {
			// Warm up: every sandbox of the pool runs the snippet once.
			measure(ctx, 16, s.Concurrency, func(ctx context.Context) error { return r.run(ctx, s.Code, want) })
			f := measure(ctx, c.N, s.Concurrency, func(ctx context.Context) error { return r.run(ctx, s.Code, want) })
			speedup := float64(base.P50) / float64(max(f.P50, 1))
			fail := ""
			if f.Failures > 0 {
				fail = fmt.Sprintf("  (%d failed)", f.Failures)
			}
			fmt.Fprintf(c.Out, "%-44s %-12s %s  %5.1fx faster p50%s\n", label, "codecell/"+r.Runtime, f, speedup, fail)
		}
	}
	return nil
}
