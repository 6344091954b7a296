package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// SessionConfig is what the session benchmark needs.
type SessionConfig struct {
	URL     string
	Runtime string
	Client  *http.Client
	Python  string   // for the baselines
	Preload []string // what the baseline interpreter imports, as the zygote does
	N       int
	Out     io.Writer
}

// call sends a request and decodes a JSON answer into out (if not nil).
func (c SessionConfig) call(ctx context.Context, method, path string, body any, out any) error {
	b, err := c.raw(ctx, method, path, body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// raw sends a request and returns the answer's body.
func (c SessionConfig) raw(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	resp, err := c.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

// waitWarm waits until the runtime's pool has a warm sandbox, so a create
// measures the claim, not the pool's refill.
func (c SessionConfig) waitWarm(ctx context.Context) error {
	for ctx.Err() == nil {
		var h struct {
			Pools map[string]struct{ Idle int } `json:"pools"`
		}
		if err := c.call(ctx, "GET", "/healthz", nil, &h); err == nil && h.Pools[c.Runtime].Idle > 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// timed runs fn n times, one after another; fn times the part that counts.
func timed(n int, fn func() (time.Duration, error)) Figures {
	var lat []time.Duration
	var busy time.Duration
	failures := 0
	for range n {
		d, err := fn()
		if err != nil {
			failures++
			continue
		}
		lat = append(lat, d)
		busy += d
	}
	f := Figures{N: n, Failures: failures}
	f.P50, f.P99 = percentiles(lat)
	if len(lat) > 0 {
		f.Throughput = float64(len(lat)) / busy.Seconds()
	}
	return f
}

func clock(fn func() error) (time.Duration, error) {
	t := time.Now()
	err := fn()
	return time.Since(t), err
}

// RunSessions measures session create, a stateful step and reset, each
// beside what one would do without codecell: start an interpreter that
// imports the same modules, or send a line to a plain python3 reading
// statements from a pipe.
func RunSessions(ctx context.Context, c SessionConfig) error {
	start := "import " + strings.Join(append([]string{"sys"}, c.Preload...), ", ") + "\nprint('ready', flush=True)\n"
	startPython := func() error {
		out, err := exec.CommandContext(ctx, c.Python, "-c", start).Output()
		if err != nil || string(out) != "ready\n" {
			return fmt.Errorf("baseline interpreter: %v %q", err, out)
		}
		return nil
	}
	nSlow := max(c.N/10, 10)
	label := "codecell/" + c.Runtime
	row := func(name, who string, f Figures, base *Figures) {
		extra := ""
		if base != nil {
			if x := float64(base.P50) / float64(max(f.P50, 1)); x >= 1 {
				extra = fmt.Sprintf("  %5.1fx faster p50", x)
			} else {
				extra = fmt.Sprintf("  %5.1fx slower p50 (the price of isolation and HTTP)", 1/x)
			}
		}
		if f.Failures > 0 {
			extra += fmt.Sprintf("  (%d failed)", f.Failures)
		}
		fmt.Fprintf(c.Out, "%-44s %-16s p50 %7.2f ms  p99 %7.2f ms%s\n", name, who, ms(f.P50), ms(f.P99), extra)
	}

	baseStart := timed(nSlow, func() (time.Duration, error) { return clock(startPython) })
	row("session create (warm pool)", "baseline", baseStart, nil)
	var ids []string
	create := timed(nSlow, func() (time.Duration, error) {
		if err := c.waitWarm(ctx); err != nil {
			return 0, err
		}
		return clock(func() error {
			var info struct{ ID string }
			err := c.call(ctx, "POST", "/v1/sandboxes", map[string]any{"runtime": c.Runtime}, &info)
			if err == nil {
				ids = append(ids, info.ID)
			}
			return err
		})
	})
	row("session create (warm pool)", label, create, &baseStart)
	if len(ids) == 0 {
		return fmt.Errorf("no %s session could be created", c.Runtime)
	}
	for _, id := range ids[1:] {
		c.call(ctx, "DELETE", "/v1/sandboxes/"+id, nil, nil)
	}
	id := ids[0]
	defer c.call(ctx, "DELETE", "/v1/sandboxes/"+id, nil, nil)

	r, err := startREPL(c.Python)
	if err != nil {
		return err
	}
	r.step("x = 0")
	baseStep := timed(c.N, func() (time.Duration, error) { return clock(func() error { return r.step("x += 1") }) })
	r.close()
	row("step x += 1", "baseline", baseStep, nil)
	path := "/v1/sandboxes/" + id
	c.call(ctx, "POST", path+"/exec", map[string]any{"code": "x = 0"}, nil)
	step := timed(c.N, func() (time.Duration, error) {
		return clock(func() error {
			var out struct{ Status string }
			if err := c.call(ctx, "POST", path+"/exec", map[string]any{"code": "x += 1"}, &out); err != nil || out.Status != "ok" {
				return fmt.Errorf("step: %v %q", err, out.Status)
			}
			return nil
		})
	})
	row("step x += 1", label, step, &baseStep)
	var last struct{ Value string }
	if err := c.call(ctx, "POST", path+"/exec", map[string]any{"code": "x"}, &last); err != nil || last.Value != fmt.Sprint(c.N) {
		return fmt.Errorf("after %d steps x is %q, not %d: %v", c.N, last.Value, c.N, err)
	}

	row("reset", "baseline", baseStart, nil)
	reset := timed(nSlow, func() (time.Duration, error) {
		c.call(ctx, "POST", path+"/exec", map[string]any{"code": "y = 1"}, nil) // a kernel to replace
		time.Sleep(50 * time.Millisecond)                                       // the zygote's next child is forked
		return clock(func() error { return c.call(ctx, "POST", path+"/reset", nil, nil) })
	})
	row("reset", label, reset, &baseStart)
	return nil
}

// repl is a plain python3 reading statements line by line: the baseline of
// a stateful step.
type repl struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startREPL(python string) (*repl, error) {
	cmd := exec.Command(python, "-c", "import sys\nfor line in sys.stdin:\n    exec(line)\n    print('ok', flush=True)\n")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &repl{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (r *repl) step(code string) error {
	if _, err := io.WriteString(r.in, code+"\n"); err != nil {
		return err
	}
	line, err := r.out.ReadString('\n')
	if err != nil || line != "ok\n" {
		return fmt.Errorf("baseline repl: %v %q", err, line)
	}
	return nil
}

func (r *repl) close() {
	r.in.Close()
	r.cmd.Wait()
}

// IdleMemory opens n sessions, runs one step in each (so each holds a live
// kernel, as an agent's session between steps does), waits for the pool to
// refill, and reports the memory the sandboxes' cgroups gained per session.
func IdleMemory(ctx context.Context, c SessionConfig, n int, inUse func() (int64, error), poolFull func() bool) (float64, error) {
	settle := func() (int64, error) {
		for !poolFull() {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // spares forked after a claim settle
		return inUse()
	}
	before, err := settle()
	if err != nil {
		return 0, err
	}
	var ids []string
	defer func() {
		for _, id := range ids {
			c.call(ctx, "DELETE", "/v1/sandboxes/"+id, nil, nil)
		}
	}()
	for i := range n {
		var info struct{ ID string }
		if err := c.call(ctx, "POST", "/v1/sandboxes", map[string]any{"runtime": c.Runtime}, &info); err != nil {
			return 0, fmt.Errorf("session %d of %d: %w", i+1, n, err)
		}
		ids = append(ids, info.ID)
		var out struct{ Status string }
		if err := c.call(ctx, "POST", "/v1/sandboxes/"+info.ID+"/exec", map[string]any{"code": "x = 1"}, &out); err != nil || out.Status != "ok" {
			return 0, fmt.Errorf("step in session %d: %v %q", i+1, err, out.Status)
		}
	}
	after, err := settle()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n) / (1 << 20), nil
}

// RunDisplay measures starting a sandbox's X server (reported by the agent
// when a session with a display is created) and screenshots of a 1280x800
// screen with a window on it, beside a 64x64 region: the fixed cost of the
// round trip, without the pixels.
func RunDisplay(ctx context.Context, c SessionConfig) error {
	label := "codecell/" + c.Runtime
	nSlow := max(c.N/10, 10)
	var starts []time.Duration
	var id string
	for i := range nSlow {
		if err := c.waitWarm(ctx); err != nil {
			return err
		}
		var info struct {
			ID      string
			Display struct {
				StartMs float64 `json:"start_ms"`
			}
		}
		if err := c.call(ctx, "POST", "/v1/sandboxes", map[string]any{"runtime": c.Runtime, "display": true, "screen": "1280x800x24"}, &info); err != nil {
			return err
		}
		starts = append(starts, time.Duration(info.Display.StartMs*float64(time.Millisecond)))
		if i == nSlow-1 {
			id = info.ID
		} else {
			c.call(ctx, "DELETE", "/v1/sandboxes/"+info.ID, nil, nil)
		}
	}
	defer c.call(ctx, "DELETE", "/v1/sandboxes/"+id, nil, nil)
	p50, p99 := percentiles(starts)
	fmt.Fprintf(c.Out, "%-44s %-16s p50 %7.2f ms  p99 %7.2f ms\n", "display start (Xvfb 1280x800x24)", label, ms(p50), ms(p99))
	code := "import tkinter as tk\nroot = tk.Tk()\nroot.geometry('600x400+100+100')\ntk.Label(root, text='codecell', font=('TkDefaultFont', 40)).pack()\nroot.update()"
	if err := c.call(ctx, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"code": code}, nil); err != nil {
		return err
	}
	shot := func(query string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return clock(func() error {
				b, err := c.raw(ctx, "GET", "/v1/sandboxes/"+id+"/screenshot"+query, nil)
				if err == nil && !bytes.HasPrefix(b, []byte("\x89PNG")) {
					err = fmt.Errorf("screenshot is not a PNG")
				}
				return err
			})
		}
	}
	base := timed(c.N, shot("?x=0&y=0&w=64&h=64"))
	fmt.Fprintf(c.Out, "%-44s %-16s p50 %7.2f ms  p99 %7.2f ms\n", "screenshot", "64x64 region", ms(base.P50), ms(base.P99))
	full := timed(c.N, shot(""))
	fmt.Fprintf(c.Out, "%-44s %-16s p50 %7.2f ms  p99 %7.2f ms\n", "screenshot", label+" 1280x800", ms(full.P50), ms(full.P99))
	return nil
}
