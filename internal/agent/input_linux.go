package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// Mouse and keyboard input, injected into the sandbox's X server through the
// XTEST extension, as a real device's events would arrive.

const maxWait = 10 * time.Second // longest "wait" action

// X core event types XTEST fakes.
const (
	keyPress      = 2
	keyRelease    = 3
	buttonPress   = 4
	buttonRelease = 5
	motionNotify  = 6
)

var buttons = map[string]byte{"": 1, "left": 1, "middle": 2, "right": 3}

// keysyms names the keys `key` accepts besides single characters.
var keysyms = map[string]xproto.Keysym{
	"ctrl": 0xffe3, "control": 0xffe3, "shift": 0xffe1, "alt": 0xffe9, "super": 0xffeb, "meta": 0xffe7,
	"enter": 0xff0d, "return": 0xff0d, "tab": 0xff09, "escape": 0xff1b, "esc": 0xff1b, "space": 0x20,
	"backspace": 0xff08, "delete": 0xffff, "insert": 0xff63, "home": 0xff50, "end": 0xff57,
	"pageup": 0xff55, "pagedown": 0xff56, "left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
	"f1": 0xffbe, "f2": 0xffbf, "f3": 0xffc0, "f4": 0xffc1, "f5": 0xffc2, "f6": 0xffc3,
	"f7": 0xffc4, "f8": 0xffc5, "f9": 0xffc6, "f10": 0xffc7, "f11": 0xffc8, "f12": 0xffc9,
}

// runeKeysym is X's keysym for a character: Latin-1 is itself, the rest of
// Unicode is 0x01000000 plus the code point.
func runeKeysym(r rune) xproto.Keysym {
	if (r >= 0x20 && r <= 0x7e) || (r >= 0xa0 && r <= 0xff) {
		return xproto.Keysym(r)
	}
	return xproto.Keysym(0x01000000 + r)
}

// keyboard maps keysyms to keycodes and borrows unused keycodes for keysyms
// the layout lacks.
type keyboard struct {
	min, max xproto.Keycode
	perCode  int
	syms     []xproto.Keysym  // perCode per keycode, from min
	spares   []xproto.Keycode // keycodes with nothing on them
	next     int              // the spare to borrow next
}

func (x *display) keyboard() (*keyboard, error) {
	setup := xproto.Setup(x.conn)
	k := &keyboard{min: setup.MinKeycode, max: setup.MaxKeycode}
	reply, err := xproto.GetKeyboardMapping(x.conn, k.min, byte(k.max-k.min+1)).Reply()
	if err != nil {
		return nil, err
	}
	k.perCode, k.syms = int(reply.KeysymsPerKeycode), reply.Keysyms
	for code := int(k.max); code >= int(k.min); code-- {
		empty := true
		for _, s := range k.syms[(code-int(k.min))*k.perCode : (code-int(k.min)+1)*k.perCode] {
			empty = empty && s == 0
		}
		if empty {
			k.spares = append(k.spares, xproto.Keycode(code))
		}
	}
	return k, nil
}

// find returns the keycode for sym and whether Shift selects it.
func (k *keyboard) find(sym xproto.Keysym) (xproto.Keycode, bool, bool) {
	for i, s := range k.syms {
		if s == sym && i%k.perCode < 2 {
			return k.min + xproto.Keycode(i/k.perCode), i%k.perCode == 1, true
		}
	}
	return 0, false, false
}

// input carries out actions in order; with screenshot set it returns the
// screen after the last one.
func (a *Agent) input(req *InputRequest) ([]byte, error) {
	x, err := a.requireDisplay()
	if err != nil {
		return nil, err
	}
	if err := x.inject(req.Actions); err != nil {
		return nil, err
	}
	if !req.Screenshot {
		return nil, nil
	}
	return a.screenshot(&ScreenshotRequest{})
}

func (x *display) inject(actions []InputAction) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.connect(); err != nil {
		return err
	}
	if err := xtest.Init(x.conn); err != nil {
		return fmt.Errorf("the X server has no XTEST extension: %w", err)
	}
	root := xproto.Setup(x.conn).DefaultScreen(x.conn).Root
	fake := func(typ, detail byte, px, py int) {
		xtest.FakeInput(x.conn, typ, detail, 0, root, int16(px), int16(py), 0)
	}
	kb, err := x.keyboard()
	if err != nil {
		return err
	}
	shift, _, _ := kb.find(keysyms["shift"])
	press := func(sym xproto.Keysym, down bool) error {
		code, shifted, ok := kb.find(sym)
		if !ok {
			if len(kb.spares) == 0 {
				return fmt.Errorf("no free keycode to type keysym %#x", sym)
			}
			// The layout lacks it: put it on a spare keycode, as xdotool
			// does. Each such character gets a keycode of its own, because
			// clients read the new mapping when they get to the events, by
			// when later characters may have been mapped too; only when the
			// spares run out is one reused, after the clients caught up.
			if kb.next == len(kb.spares) {
				x.conn.Sync()
				time.Sleep(50 * time.Millisecond)
				kb.next = 0
			}
			code, shifted = kb.spares[kb.next], false
			kb.next++
			m := make([]xproto.Keysym, kb.perCode)
			m[0], m[1] = sym, sym
			if err := xproto.ChangeKeyboardMappingChecked(x.conn, 1, code, byte(kb.perCode), m).Check(); err != nil {
				return err
			}
			copy(kb.syms[int(code-kb.min)*kb.perCode:], m)
		}
		switch {
		case down && shifted:
			fake(keyPress, byte(shift), 0, 0)
			fake(keyPress, byte(code), 0, 0)
		case down:
			fake(keyPress, byte(code), 0, 0)
		case shifted:
			fake(keyRelease, byte(code), 0, 0)
			fake(keyRelease, byte(shift), 0, 0)
		default:
			fake(keyRelease, byte(code), 0, 0)
		}
		return nil
	}
	for i, act := range actions {
		fail := func(format string, args ...any) error {
			return &requestError{ErrCodeInvalid, fmt.Sprintf("action %d (%s): %s", i, act.Type, fmt.Sprintf(format, args...))}
		}
		inside := func(px, py int) bool { return px >= 0 && py >= 0 && px < x.width && py < x.height }
		button, ok := buttons[act.Button]
		if !ok {
			return fail("button %q: use left, middle or right", act.Button)
		}
		switch act.Type {
		case "move", "click", "scroll":
			if !inside(act.X, act.Y) {
				return fail("point %d,%d is not on the %dx%d screen", act.X, act.Y, x.width, x.height)
			}
			fake(motionNotify, 0, act.X, act.Y)
			switch act.Type {
			case "click":
				for range max(act.Count, 1) {
					fake(buttonPress, button, 0, 0)
					fake(buttonRelease, button, 0, 0)
				}
			case "scroll":
				for _, s := range []struct {
					n        int
					neg, pos byte
				}{{act.DY, 4, 5}, {act.DX, 6, 7}} {
					b := s.pos
					if s.n < 0 {
						b = s.neg
					}
					for range abs(s.n) {
						fake(buttonPress, b, 0, 0)
						fake(buttonRelease, b, 0, 0)
					}
				}
			}
		case "down":
			fake(buttonPress, button, 0, 0)
		case "up":
			fake(buttonRelease, button, 0, 0)
		case "drag":
			if act.From == nil || act.To == nil || !inside(act.From.X, act.From.Y) || !inside(act.To.X, act.To.Y) {
				return fail("needs from and to, both on the %dx%d screen", x.width, x.height)
			}
			fake(motionNotify, 0, act.From.X, act.From.Y)
			fake(buttonPress, button, 0, 0)
			fake(motionNotify, 0, act.To.X, act.To.Y)
			fake(buttonRelease, button, 0, 0)
		case "key":
			var syms []xproto.Keysym
			for _, name := range strings.Split(strings.ToLower(act.Keys), "+") {
				if sym, ok := keysyms[name]; ok {
					syms = append(syms, sym)
				} else if r, size := utf8.DecodeRuneInString(name); size == len(name) && size > 0 {
					syms = append(syms, runeKeysym(r))
				} else {
					return fail("unknown key %q in %q; keys are single characters or %s", name, act.Keys, strings.Join(keyNames(), ", "))
				}
			}
			for _, s := range syms {
				if err := press(s, true); err != nil {
					return fail("%v", err)
				}
			}
			for j := len(syms) - 1; j >= 0; j-- {
				if err := press(syms[j], false); err != nil {
					return fail("%v", err)
				}
			}
		case "type":
			if !utf8.ValidString(act.Text) {
				return fail("text is not valid UTF-8")
			}
			for _, r := range act.Text {
				sym := runeKeysym(r)
				if r == '\n' {
					sym = keysyms["enter"]
				} else if r == '\t' {
					sym = keysyms["tab"]
				}
				if err := press(sym, true); err != nil {
					return fail("%v", err)
				}
				if err := press(sym, false); err != nil {
					return fail("%v", err)
				}
			}
		case "wait":
			d := time.Duration(act.Ms) * time.Millisecond
			if d < 0 || d > maxWait {
				return fail("ms %d: must be between 0 and %d", act.Ms, maxWait.Milliseconds())
			}
			x.conn.Sync() // what came before has reached the server
			time.Sleep(d)
		default:
			return fail("unknown type; use move, click, down, up, drag, scroll, key, type or wait")
		}
	}
	x.conn.Sync()
	return nil
}

func keyNames() []string {
	names := make([]string, 0, len(keysyms))
	for n := range keysyms {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
