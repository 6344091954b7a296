package agent

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"golang.org/x/image/draw"
)

// The sandbox's X server. Its socket lives in the sandbox's own /tmp and its
// abstract socket in the sandbox's own network namespace, so no other
// sandbox, nor the host's other processes, can reach it.
const (
	displayName = ":0"
	xSocketDir  = "/tmp/.X11-unix"
)

type display struct {
	pid                  int
	width, height, depth int

	mu   sync.Mutex
	conn *xgb.Conn // for screenshots, made on first use
}

// parseScreen reads "WIDTHxHEIGHTxDEPTH".
func parseScreen(s string) (w, h, d int, err error) {
	parts := strings.Split(s, "x")
	if len(parts) != 3 {
		return 0, 0, 0, &requestError{ErrCodeInvalid, fmt.Sprintf("screen %q: want WIDTHxHEIGHTxDEPTH, like 1280x800x24", s)}
	}
	var v [3]int
	for i, p := range parts {
		if v[i], err = strconv.Atoi(p); err != nil {
			return 0, 0, 0, &requestError{ErrCodeInvalid, fmt.Sprintf("screen %q: %q is not a number", s, p)}
		}
	}
	if v[0] < 64 || v[0] > 7680 || v[1] < 64 || v[1] > 4320 || (v[2] != 16 && v[2] != 24) {
		return 0, 0, 0, &requestError{ErrCodeInvalid, fmt.Sprintf("screen %q: width 64-7680, height 64-4320, depth 16 or 24", s)}
	}
	return v[0], v[1], v[2], nil
}

// startDisplay starts Xvfb (once) and waits until it takes connections.
func (a *Agent) startDisplay(screen string) (*DisplayInfo, error) {
	w, h, d, err := parseScreen(screen)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if x := a.display; x != nil {
		if x.width != w || x.height != h || x.depth != d {
			return nil, &requestError{ErrCodeInvalid, fmt.Sprintf("the display already runs at %dx%dx%d", x.width, x.height, x.depth)}
		}
		return x.info(0), nil
	}
	xvfb, err := exec.LookPath("Xvfb")
	if err != nil {
		return nil, errors.New("Xvfb is not installed (apt-get install xvfb)")
	}
	start := time.Now()
	if err := os.MkdirAll(xSocketDir, 0o1777); err != nil {
		return nil, err
	}
	os.Chmod(xSocketDir, 0o1777|os.ModeSticky)
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	// -br: a black root window, so what windows draw stands out.
	p, exit, err := a.reaper.start(xvfb, []string{"Xvfb", displayName, "-screen", "0", fmt.Sprintf("%dx%dx%d", w, h, d),
		"-nolisten", "tcp", "-br", "-noreset"}, &os.ProcAttr{
		Dir: "/", Env: a.env, Files: []*os.File{devnull, devnull, devnull},
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("start Xvfb: %w", err)
	}
	x := &display{pid: p.Pid, width: w, height: h, depth: d}
	p.Release()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		select {
		case info := <-exit:
			code, sig := exitStatus(info.status)
			return nil, fmt.Errorf("Xvfb exited at start (status %d %s)", code, sig)
		default:
		}
		if c, err := xgb.NewConnDisplay(displayName); err == nil {
			x.conn = c
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(x.pid, syscall.SIGKILL)
			return nil, errors.New("Xvfb did not take connections within 20s")
		}
	}
	a.display = x
	return x.info(time.Since(start)), nil
}

// envFor is a run's environment: the sandbox's, the request's, and DISPLAY
// for a session's kernels once there is a display, or for a run that asked
// for one (a stateless sandbox keeps its X server, but only runs that ask
// are pointed at it).
func (a *Agent) envFor(req *ExecRequest) []string {
	env := envList(a.env, req.Env)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.display != nil && (req.Kernel || req.Display != "") {
		env = append(env, "DISPLAY="+displayName)
	}
	return env
}

// requireDisplay returns the running display, or the error that says how to
// get one.
func (a *Agent) requireDisplay() (*display, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.display == nil {
		return nil, &requestError{ErrCodeInvalid, "this sandbox has no display; create it with \"display\": true"}
	}
	return a.display, nil
}

func (x *display) info(took time.Duration) *DisplayInfo {
	return &DisplayInfo{Display: displayName, Width: x.width, Height: x.height, Depth: x.depth,
		StartMs: float64(took.Microseconds()) / 1000}
}

// screenshot reads the screen, or a region of it, from the X server and
// encodes it as PNG, scaled by req.Scale if set.
func (a *Agent) screenshot(req *ScreenshotRequest) ([]byte, error) {
	x, err := a.requireDisplay()
	if err != nil {
		return nil, err
	}
	r := image.Rect(req.X, req.Y, req.X+req.W, req.Y+req.H)
	if req.W == 0 && req.H == 0 {
		r = image.Rect(0, 0, x.width, x.height)
	}
	if r.Dx() <= 0 || r.Dy() <= 0 || !r.In(image.Rect(0, 0, x.width, x.height)) {
		return nil, &requestError{ErrCodeInvalid, fmt.Sprintf("region x=%d y=%d w=%d h=%d is not inside the %dx%d screen", req.X, req.Y, req.W, req.H, x.width, x.height)}
	}
	if req.Scale < 0 || req.Scale > 1 {
		return nil, &requestError{ErrCodeInvalid, fmt.Sprintf("scale %g: must be more than 0 and at most 1", req.Scale)}
	}
	img, err := x.grab(r)
	if err != nil {
		return nil, err
	}
	var out image.Image = img
	if req.Scale > 0 && req.Scale < 1 {
		dst := image.NewRGBA(image.Rect(0, 0, max(1, int(float64(r.Dx())*req.Scale)), max(1, int(float64(r.Dy())*req.Scale))))
		draw.ApproxBiLinear.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
		out = dst
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (x *display) bounds() image.Rectangle { return image.Rect(0, 0, x.width, x.height) }

// connect (re)opens the agent's own connection to the X server; under x.mu.
func (x *display) connect() error {
	if x.conn != nil {
		return nil
	}
	c, err := xgb.NewConnDisplay(displayName)
	if err != nil {
		return fmt.Errorf("connect to the display: %w", err)
	}
	x.conn = c
	return nil
}

// grab reads r of the root window (ZPixmap, 32 bits per pixel, BGRX).
func (x *display) grab(r image.Rectangle) (*image.RGBA, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.connect(); err != nil {
		return nil, err
	}
	root := xproto.Setup(x.conn).DefaultScreen(x.conn).Root
	reply, err := xproto.GetImage(x.conn, xproto.ImageFormatZPixmap, xproto.Drawable(root),
		int16(r.Min.X), int16(r.Min.Y), uint16(r.Dx()), uint16(r.Dy()), 0xffffffff).Reply()
	if err != nil {
		x.conn.Close()
		x.conn = nil // the next screenshot reconnects
		return nil, fmt.Errorf("read the screen: %w", err)
	}
	img := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	if x.depth == 16 {
		for i := 0; i+1 < len(reply.Data) && i/2*4+3 < len(img.Pix); i += 2 {
			v := uint16(reply.Data[i]) | uint16(reply.Data[i+1])<<8 // RGB565
			j := i / 2 * 4
			img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = uint8(v>>11)<<3, uint8(v>>5)<<2, uint8(v)<<3, 0xff
		}
		return img, nil
	}
	for i := 0; i+3 < len(reply.Data) && i+3 < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = reply.Data[i+2], reply.Data[i+1], reply.Data[i], 0xff
	}
	return img, nil
}
