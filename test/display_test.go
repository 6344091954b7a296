package e2e

import (
	"bytes"
	endian "encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/codecell/codecell/internal/testutil"
)

type displayInfo struct {
	Display              string
	Width, Height, Depth int
	StartMs              float64 `json:"start_ms"`
}

func (s *server) screenshot(t *testing.T, id, query string) image.Image {
	t.Helper()
	resp, err := http.Get(s.URL + "/v1/sandboxes/" + id + "/screenshot" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("screenshot%s: %d %s", query, resp.StatusCode, b)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

func rgb(img image.Image, x, y int) color.RGBA {
	r, g, b, _ := img.At(x, y).RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}
}

var (
	black = color.RGBA{0, 0, 0, 0xff}
	green = color.RGBA{0, 0xff, 0, 0xff}
)

// a window with a green background at 50,60, 200x100.
const greenWindow = "import tkinter as tk\nroot = tk.Tk()\nroot.geometry('200x100+50+60')\nroot.configure(bg='#00ff00')\nroot.update()"

func TestDisplayScreenshots(t *testing.T) {
	s := shared(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			var info struct {
				ID      string
				Display *displayInfo
			}
			resp := s.post(t, "/v1/sandboxes", map[string]any{"runtime": rt, "display": true, "screen": "640x480x24"}, &info)
			if resp.StatusCode != 201 || info.Display == nil || info.Display.Display != ":0" || info.Display.Width != 640 || info.Display.Height != 480 || info.Display.StartMs <= 0 {
				t.Fatalf("create: %d %+v", resp.StatusCode, info)
			}
			t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil) })
			if st := s.step(t, info.ID, "python", "import os\nos.environ['DISPLAY']", 0); value(st) != "':0'" {
				t.Fatalf("DISPLAY in the kernel: %+v", st)
			}
			if st := s.step(t, info.ID, "python", greenWindow, 0); st.Status != "ok" {
				t.Fatalf("tkinter: %+v", st)
			}
			var img image.Image
			// The window manager-less X server maps the window at once, but
			// drawing reaches the server asynchronously: give it a moment.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				img = s.screenshot(t, info.ID, "")
				if rgb(img, 150, 110) == green || time.Now().After(deadline) {
					break
				}
			}
			if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 480 {
				t.Fatalf("screenshot is %v", b)
			}
			for _, p := range []struct {
				x, y int
				want color.RGBA
			}{{51, 61, green}, {150, 110, green}, {248, 158, green}, {49, 110, black}, {251, 110, black}, {150, 59, black}, {150, 161, black}, {600, 400, black}} {
				if got := rgb(img, p.x, p.y); got != p.want {
					t.Errorf("pixel %d,%d is %v, want %v", p.x, p.y, got, p.want)
				}
			}
			region := s.screenshot(t, info.ID, "?x=40&y=50&w=220&h=120")
			if b := region.Bounds(); b.Dx() != 220 || b.Dy() != 120 || rgb(region, 5, 5) != black || rgb(region, 15, 15) != green {
				t.Errorf("region: %v, corner %v, inside %v", b, rgb(region, 5, 5), rgb(region, 15, 15))
			}
			half := s.screenshot(t, info.ID, "?scale=0.5")
			if b := half.Bounds(); b.Dx() != 320 || b.Dy() != 240 || rgb(half, 75, 55) != green {
				t.Errorf("scaled: %v, %v", b, rgb(half, 75, 55))
			}
			for _, q := range []string{"?x=600&y=0&w=100&h=10", "?w=10", "?scale=2", "?x=abc"} {
				var e apiError
				if code := s.do(t, "GET", "/v1/sandboxes/"+info.ID+"/screenshot"+q, &e); code != 400 || e.Error.Code != "invalid_request" {
					t.Errorf("screenshot%s: %d %+v", q, code, e)
				}
			}
			// A reset ends the episode's windows but keeps the screen.
			s.post(t, "/v1/sandboxes/"+info.ID+"/reset", nil, nil)
			waitFor(t, "the window to go with the reset", func() bool { return rgb(s.screenshot(t, info.ID, ""), 150, 110) == black })
		})
	}
}

func TestDisplayMatplotlibWindow(t *testing.T) {
	s := shared(t)
	var info struct{ ID string }
	s.post(t, "/v1/sandboxes", map[string]any{"display": true, "screen": "800x600x24"}, &info)
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+info.ID, nil) })
	st := s.step(t, info.ID, "python", "import matplotlib\nmatplotlib.use('TkAgg')\nimport matplotlib.pyplot as plt\nplt.plot([0, 1], [0, 1], color='red', linewidth=6)\nplt.show(block=False)\nplt.pause(0.5)", 0)
	if st.Status != "ok" || len(st.Outputs) != 0 {
		t.Fatalf("plot: %+v", st)
	}
	red := 0
	waitFor(t, "red pixels of the plot", func() bool {
		img := s.screenshot(t, info.ID, "")
		red = 0
		for y := 0; y < 600; y++ {
			for x := 0; x < 800; x++ {
				if c := rgb(img, x, y); c.R > 200 && c.G < 60 && c.B < 60 {
					red++
				}
			}
		}
		return red > 500
	})
}

// Two sandboxes with displays each see only their own screen.
func TestDisplaysAreIsolated(t *testing.T) {
	testutil.RequiresRoot(t)
	s := shared(t)
	var a, b struct{ ID string }
	s.post(t, "/v1/sandboxes", map[string]any{"display": true, "screen": "640x480x24"}, &a)
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+a.ID, nil) })
	s.post(t, "/v1/sandboxes", map[string]any{"display": true, "screen": "640x480x24"}, &b)
	t.Cleanup(func() { s.do(t, "DELETE", "/v1/sandboxes/"+b.ID, nil) })
	s.step(t, a.ID, "python", greenWindow, 0)
	waitFor(t, "the window in sandbox A", func() bool { return rgb(s.screenshot(t, a.ID, ""), 150, 110) == green })
	if c := rgb(s.screenshot(t, b.ID, ""), 150, 110); c != black {
		t.Fatalf("sandbox B's screen shows %v where A's window is", c)
	}
	// B cannot reach A's X server: its only display is its own, and X
	// clients in B get B's screen.
	st := s.step(t, b.ID, "python", "import os, tkinter as tk\nr = tk.Tk()\nprint(sorted(os.listdir('/tmp/.X11-unix')), r.winfo_screenwidth())\nprint(len([w for w in r.tk.call('winfo', 'children', '.')]))", 0)
	if st.Stdout != "['X0'] 640\n0\n" {
		t.Fatalf("sandbox B: %+v", st)
	}
	var e apiError
	id := s.createSandbox(t, nil).ID
	if code := s.do(t, "GET", "/v1/sandboxes/"+id+"/screenshot", &e); code != 400 || !strings.Contains(e.Error.Message, "no display") {
		t.Fatalf("screenshot without a display: %d %+v", code, e)
	}
}

// Mouse and keyboard through XTEST: a click on a button runs its command, and
// typed text, Unicode included, lands in an Entry.
func TestDisplayInput(t *testing.T) {
	s := shared(t)
	id := s.displaySandbox(t, "640x480x24")
	app := "import tkinter as tk\nroot = tk.Tk()\nroot.geometry('300x200+0+0')\nlabel = tk.Label(root, text='before')\nlabel.place(x=10, y=10)\n" +
		"tk.Button(root, text='Press', command=lambda: label.config(text='after')).place(x=10, y=60, width=100, height=40)\n" +
		"entry = tk.Entry(root)\nentry.place(x=10, y=120, width=250, height=30)\nroot.update()"
	if st := s.step(t, id, "python", app, 0); st.Status != "ok" {
		t.Fatalf("app: %+v", st)
	}
	var out struct{ Screenshot []byte }
	resp := s.post(t, "/v1/sandboxes/"+id+"/input", map[string]any{"actions": []map[string]any{
		{"type": "move", "x": 200, "y": 300},
		{"type": "click", "x": 60, "y": 80},
		{"type": "click", "x": 100, "y": 135},
		{"type": "type", "text": "Grüße ✓ abcx"},
		{"type": "key", "keys": "backspace"},
		{"type": "wait", "ms": 50},
	}, "screenshot": true}, &out)
	if resp.StatusCode != 200 {
		t.Fatalf("input: %d", resp.StatusCode)
	}
	if img, err := png.Decode(bytes.NewReader(out.Screenshot)); err != nil || img.Bounds().Dx() != 640 {
		t.Fatalf("screenshot after input: %v", err)
	}
	// The app sees the events once its loop runs.
	st := s.step(t, id, "python", "import time\nfor _ in range(30):\n    root.update()\n    time.sleep(0.01)\n(label.cget('text'), entry.get())", 0)
	if value(st) != "('after', 'Grüße ✓ abc')" {
		t.Fatalf("after the input: %+v (value %s)", st, value(st))
	}
	for _, bad := range []struct {
		action map[string]any
		want   string
	}{
		{map[string]any{"type": "click", "x": 700, "y": 10}, "action 0 (click): point 700,10 is not on the 640x480 screen"},
		{map[string]any{"type": "key", "keys": "ctrl+nope"}, `unknown key "nope"`},
		{map[string]any{"type": "click", "x": 1, "y": 1, "button": "fourth"}, `button "fourth"`},
		{map[string]any{"type": "jump"}, "unknown type"},
		{map[string]any{"type": "wait", "ms": 60000}, "ms 60000"},
	} {
		var e apiError
		if resp := s.post(t, "/v1/sandboxes/"+id+"/input", map[string]any{"actions": []any{bad.action}}, &e); resp.StatusCode != 400 || !strings.Contains(e.Error.Message, bad.want) {
			t.Errorf("%v: %d %+v, want 400 with %q", bad.action, resp.StatusCode, e, bad.want)
		}
	}
}

// capture_screenshot returns the screen while the cell's windows are alive:
// a mainloop() does not hang the step, and a window the code destroys is
// captured before it goes.
func TestDisplayCaptureScreenshot(t *testing.T) {
	s := shared(t)
	id := s.displaySandbox(t, "640x480x24")
	capture := func(code string) (step, image.Image) {
		t.Helper()
		var st step
		var raw struct{ Screenshot []byte }
		body := map[string]any{"code": code, "capture_screenshot": true}
		resp := s.post(t, "/v1/sandboxes/"+id+"/exec", body, nil)
		b := readAll(resp)
		json.Unmarshal([]byte(b), &st)
		json.Unmarshal([]byte(b), &raw)
		if resp.StatusCode != 200 || len(raw.Screenshot) == 0 {
			t.Fatalf("%q: %d %s", code, resp.StatusCode, b[:min(len(b), 400)])
		}
		img, err := png.Decode(bytes.NewReader(raw.Screenshot))
		if err != nil {
			t.Fatal(err)
		}
		return st, img
	}
	// The script ends in mainloop(): the step returns after the settle time.
	start := time.Now()
	st, img := capture(greenWindow + "\nroot.mainloop()\nprint('after mainloop')")
	if st.Status != "ok" || st.Stdout != "after mainloop\n" || rgb(img, 150, 110) != green || rgb(img, 10, 10) != black {
		t.Fatalf("mainloop: %+v, pixel %v", st, rgb(img, 150, 110))
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("mainloop held the step for %v", took)
	}
	// The window stays for later steps.
	if st, img := capture("root.title()"); st.Status != "ok" || rgb(img, 150, 110) != green {
		t.Fatalf("window gone after the step: %+v", st)
	}
	// A window destroyed at the end of the cell is captured before it goes.
	st, img = capture("root.destroy()\nimport tkinter as tk\nr2 = tk.Tk()\nr2.geometry('100x50+300+300')\nr2.configure(bg='#0000ff')\nr2.update()\nr2.destroy()")
	if st.Status != "ok" || rgb(img, 350, 325) != (color.RGBA{0, 0, 0xff, 0xff}) {
		t.Fatalf("destroyed window: %+v, pixel %v", st, rgb(img, 350, 325))
	}
	// Without a display there is nothing to capture: null, not an error.
	plain := s.createSandbox(t, nil).ID
	resp := s.post(t, "/v1/sandboxes/"+plain+"/exec", map[string]any{"code": "1", "capture_screenshot": true}, nil)
	if b := readAll(resp); resp.StatusCode != 200 || !strings.Contains(b, `"screenshot":null`) {
		t.Fatalf("no display: %s", b)
	}
}

// A stateless run may ask for a display too; runs that do not ask get none,
// even in a sandbox that kept its X server from an earlier run.
func TestExecuteWithDisplay(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "runc")
	s := startServer(t, "", "--pool-size", "1", "--gvisor-pool-size", "0")
	code := "import tkinter as tk\nr = tk.Tk()\nprint(r.winfo_screenwidth(), r.winfo_screenheight())"
	with := s.exec(t, map[string]any{"code": code, "display": true})
	if with.Status != "ok" || with.Stdout != "1280 800\n" {
		t.Fatalf("with a display: %+v", with)
	}
	without := s.exec(t, map[string]any{"code": code})
	if without.Status != "error" || !strings.Contains(without.Stderr, "no display name") {
		t.Fatalf("without a display: %+v", without)
	}
	again := s.exec(t, map[string]any{"code": code, "display": true})
	if again.Status != "ok" || again.Stdout != "1280 800\n" {
		t.Fatalf("again with a display: %+v", again)
	}
}

// The live view in a real browser: headless Chromium opens the page for a
// sandbox running a tkinter app, sees a frame that is not blank, and clicks
// the app's button through the page; the app's label changes.
func TestLiveViewInBrowser(t *testing.T) {
	testutil.RequiresBinary(t, "node")
	testutil.RequiresBinary(t, "chromium")
	if _, err := os.Stat("browser/node_modules/playwright-core"); err != nil {
		t.Skip("needs playwright-core in test/browser (make deps runs npm install there)")
	}
	s := shared(t)
	id := s.displaySandbox(t, "640x480x24")
	app := "import tkinter as tk\nroot = tk.Tk()\nroot.geometry('300x200+0+0')\nlabel = tk.Label(root, text='before')\nlabel.place(x=10, y=10)\n" +
		"tk.Button(root, text='Press', command=lambda: label.config(text='clicked in the browser')).place(x=10, y=60, width=100, height=40)\nroot.update()"
	if st := s.step(t, id, "python", app, 0); st.Status != "ok" {
		t.Fatalf("app: %+v", st)
	}
	browse := func(query string) {
		t.Helper()
		cmd := exec.Command("node", "liveview.js", s.URL+"/ui/sandboxes/"+id+query, "60", "80")
		cmd.Dir = "browser"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("browser: %v\n%s", err, out)
		}
		var seen struct{ Lit, Frames, Width int }
		if err := json.Unmarshal(out, &seen); err != nil || seen.Lit < 1000 || seen.Frames < 1 || seen.Width != 640 {
			t.Fatalf("what the browser saw: %s", out)
		}
	}
	label := func() string {
		st := s.step(t, id, "python", "import time\nfor _ in range(30):\n    root.update()\n    time.sleep(0.01)\nlabel.cget('text')", 0)
		return value(st)
	}
	browse("") // view only: the click stays in the browser
	if got := label(); got != "'before'" {
		t.Fatalf("a view-only page passed a click on: label %s", got)
	}
	browse("?control=1")
	if got := label(); got != "'clicked in the browser'" {
		t.Fatalf("the click did not reach the app: label %s", got)
	}
	if code := s.do(t, "GET", "/ui/sandboxes/sb-nonexistent", &apiError{}); code != 404 {
		t.Fatalf("page of an unknown sandbox: %d", code)
	}
}

// "record": true returns an animated PNG of the screen during the step: its
// frames follow what the code drew.
func TestDisplayRecording(t *testing.T) {
	s := shared(t)
	id := s.displaySandbox(t, "320x240x24")
	code := "import tkinter as tk, time\nroot = tk.Tk()\nroot.geometry('100x100+10+10')\n" +
		"for colour in ('#ff0000', '#00ff00', '#0000ff'):\n    root.configure(bg=colour)\n    root.update()\n    time.sleep(0.4)"
	var out struct {
		Status    string
		Recording []byte
	}
	resp := s.post(t, "/v1/sandboxes/"+id+"/exec", map[string]any{"code": code, "record": true, "record_fps": 10}, &out)
	if resp.StatusCode != 200 || out.Status != "ok" || !bytes.HasPrefix(out.Recording, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("recording: %d %s %d bytes", resp.StatusCode, out.Status, len(out.Recording))
	}
	// Walk the chunks: acTL gives the frame count; each frame's data (the
	// IDAT, then each fdAT without its sequence number) is rebuilt into a
	// plain PNG and its colour read at the window's centre.
	rec := out.Recording
	var ihdr []byte
	frames := 0
	var colours []string
	frame := func(data []byte) {
		var p bytes.Buffer
		p.WriteString("\x89PNG\r\n\x1a\n")
		for _, c := range []struct {
			typ  string
			data []byte
		}{{"IHDR", ihdr}, {"IDAT", data}, {"IEND", nil}} {
			var n [4]byte
			endian.BigEndian.PutUint32(n[:], uint32(len(c.data)))
			p.Write(n[:])
			p.WriteString(c.typ)
			p.Write(c.data)
			endian.BigEndian.PutUint32(n[:], crc32.ChecksumIEEE(append([]byte(c.typ), c.data...)))
			p.Write(n[:])
		}
		img, err := png.Decode(&p)
		if err != nil {
			t.Fatalf("frame %d: %v", len(colours), err)
		}
		name := map[color.RGBA]string{{0xff, 0, 0, 0xff}: "red", green: "green", {0, 0, 0xff, 0xff}: "blue", black: "black"}[rgb(img, 60, 60)]
		if len(colours) == 0 || colours[len(colours)-1] != name {
			colours = append(colours, name)
		}
	}
	for i := 8; i+8 <= len(rec); {
		n := int(endian.BigEndian.Uint32(rec[i:]))
		data := rec[i+8 : i+8+n]
		switch string(rec[i+4 : i+8]) {
		case "IHDR":
			ihdr = data
		case "acTL":
			frames = int(endian.BigEndian.Uint32(data))
		case "IDAT":
			frame(data)
		case "fdAT":
			frame(data[4:])
		}
		i += 12 + n
	}
	// Red, green and blue each lasted 0.4 s at 10 frames a second; frames
	// that did not change are merged into one longer frame.
	if got := strings.Join(colours, ","); !strings.HasSuffix(got, "red,green,blue") || frames < 3 || frames > 12 {
		t.Fatalf("recording: %d frames, colours %s", frames, got)
	}
	// Without a display there is no recording, and no error.
	plain := s.createSandbox(t, nil).ID
	resp = s.post(t, "/v1/sandboxes/"+plain+"/exec", map[string]any{"code": "1", "record": true}, nil)
	if b := readAll(resp); resp.StatusCode != 200 || !strings.Contains(b, `"recording":null`) {
		t.Fatalf("no display: %s", b)
	}
}

// pygame and plain X programs draw on the display too; a pygame window the
// code closes at the end of the step is captured before it goes.
func TestDisplayPygameAndX11Programs(t *testing.T) {
	testutil.RequiresBinary(t, "xeyes")
	s := shared(t)
	id := s.displaySandbox(t, "640x480x24")
	var out struct {
		Status, Stdout, Stderr string
		Screenshot             []byte
	}
	code := "import pygame\npygame.init()\nscreen = pygame.display.set_mode((200, 100))\nscreen.fill((255, 0, 255))\npygame.display.flip()\nprint('drawn')\npygame.quit()"
	s.post(t, "/v1/sandboxes/"+id+"/exec", map[string]any{"code": code, "capture_screenshot": true}, &out)
	if out.Status != "ok" || out.Stdout != "drawn\n" || len(out.Screenshot) == 0 {
		t.Fatalf("pygame: %+v", out)
	}
	img, err := png.Decode(bytes.NewReader(out.Screenshot))
	if err != nil {
		t.Fatal(err)
	}
	magenta := 0
	for y := 0; y < 480; y++ {
		for x := 0; x < 640; x++ {
			if rgb(img, x, y) == (color.RGBA{0xff, 0, 0xff, 0xff}) {
				magenta++
			}
		}
	}
	if magenta != 200*100 {
		t.Fatalf("the pygame window before quit: %d magenta pixels, want 20000", magenta)
	}
	// xeyes, a plain X client, started from the shell.
	s.step(t, id, "bash", "xeyes -geometry 150x100+300+200 &", 0)
	waitFor(t, "xeyes on the screen", func() bool {
		img := s.screenshot(t, id, "?x=300&y=200&w=150&h=100")
		lit := 0
		for y := 0; y < 100; y++ {
			for x := 0; x < 150; x++ {
				if rgb(img, x, y) != black {
					lit++
				}
			}
		}
		return lit > 1000
	})
}

// displaySandbox creates a session with a display, deleted after the test.
func (s *server) displaySandbox(t *testing.T, screen string) string {
	t.Helper()
	return s.createSandbox(t, map[string]any{"display": true, "screen": screen}).ID
}
