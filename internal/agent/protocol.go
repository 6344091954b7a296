package agent

import "time"

// Request is one host → agent message.
type Request struct {
	ID   uint64       `json:"id"`
	Op   string       `json:"op"`
	Exec *ExecRequest `json:"exec,omitempty"`
	File *FileRequest `json:"file,omitempty"`
	// Target is the request a "cancel" stops: its client has gone.
	Target     uint64             `json:"target,omitempty"`
	Display    *DisplayRequest    `json:"display,omitempty"`
	Screenshot *ScreenshotRequest `json:"screenshot,omitempty"`
	Input      *InputRequest      `json:"input,omitempty"`
}

// InputRequest is mouse and keyboard input for the display, in order.
type InputRequest struct {
	Actions    []InputAction `json:"actions"`
	Screenshot bool          `json:"screenshot,omitempty"` // answer the screen after the last action
}

// InputAction is one step of input. Type is move {x,y}, click {x,y,button,
// count}, down/up {button}, drag {from,to,button}, scroll {x,y,dx,dy}, key
// {keys: "ctrl+s"}, type {text} or wait {ms}. Buttons are left (default),
// middle, right.
type InputAction struct {
	Type   string `json:"type"`
	X      int    `json:"x,omitempty"`
	Y      int    `json:"y,omitempty"`
	Button string `json:"button,omitempty"`
	Count  int    `json:"count,omitempty"`
	From   *Point `json:"from,omitempty"`
	To     *Point `json:"to,omitempty"`
	DX     int    `json:"dx,omitempty"`
	DY     int    `json:"dy,omitempty"`
	Keys   string `json:"keys,omitempty"`
	Text   string `json:"text,omitempty"`
	Ms     int    `json:"ms,omitempty"`
}

// Point is a position on the screen.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// DisplayRequest starts the sandbox's X server; later processes get DISPLAY.
type DisplayRequest struct {
	Screen string `json:"screen"` // WIDTHxHEIGHTxDEPTH
}

// DisplayInfo describes a running X server.
type DisplayInfo struct {
	Display string  `json:"display"` // the DISPLAY value
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	Depth   int     `json:"depth"`
	StartMs float64 `json:"start_ms"` // how long the start took; 0 if it was running
}

// ScreenshotRequest asks for a PNG of the screen or of a region (W and H
// zero: the whole screen), scaled by Scale (0: not scaled).
type ScreenshotRequest struct {
	X, Y, W, H int
	Scale      float64
}

// FileRequest acts on a path under /workspace; the agent refuses paths that
// leave it, through "..", an absolute path or a symlink.
type FileRequest struct {
	Action string `json:"action"` // read, write, delete, list, tar_read, tar_write
	Path   string `json:"path"`
	Data   []byte `json:"data,omitempty"` // write: the content; tar_write: a tar stream
}

// FileResult answers a FileRequest; read and tar_read bytes come before it
// in "output" events of stream "data".
type FileResult struct {
	Path    string      `json:"path"`           // absolute
	Type    string      `json:"type,omitempty"` // list: what path is (file, dir, symlink, other)
	Size    int64       `json:"size"`           // bytes read or written
	Entries []FileEntry `json:"entries,omitempty"`
}

// FileEntry is one directory entry.
type FileEntry struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file, dir, symlink, other
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"` // octal permissions, "0644"
	MTime time.Time `json:"mtime"`
}

// Error classes an "error" event carries in Code, for the host to map.
const (
	ErrCodeInvalid  = "invalid"
	ErrCodeNotFound = "not_found"
	ErrCodeTooLarge = "too_large"
)

// ExecRequest runs one program to completion.
type ExecRequest struct {
	Language  string            `json:"language"`
	Code      string            `json:"code"`
	Stdin     []byte            `json:"stdin,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Files     map[string][]byte `json:"files,omitempty"` // relative to /workspace
	TimeoutMs int64             `json:"timeout_ms"`
	OutputCap int               `json:"output_cap"` // bytes kept per stream
	Stream    bool              `json:"stream,omitempty"`
	// Kernel runs the code in the sandbox's persistent interpreter of the
	// language (a session's), started on first use with Env; Stdin and Files
	// do not apply.
	Kernel bool `json:"kernel,omitempty"`
	// CaptureScreenshot (kernel runs, with a display) returns the screen as
	// the cell leaves it, after SettleMs for drawing to finish (default 300),
	// or as it was before the cell destroyed its windows.
	CaptureScreenshot bool `json:"capture_screenshot,omitempty"`
	SettleMs          int  `json:"settle_ms,omitempty"`
	// Record (kernel runs, with a display) returns the screen during the
	// cell as an animated PNG at RecordFPS frames a second (default 5).
	Record    bool `json:"record,omitempty"`
	RecordFPS int  `json:"record_fps,omitempty"`
	// Display (a WIDTHxHEIGHTxDEPTH screen) starts the sandbox's X server
	// first, if it is not running; it then stays for later runs.
	Display string `json:"display,omitempty"`
	// AllowedImports, when set, makes Python refuse to import any other
	// top-level module from the run's own code (a guard-rail for agents,
	// not a boundary); for a kernel, the first run's list holds.
	AllowedImports []string `json:"allowed_imports,omitempty"`

	cancel <-chan struct{} // closed when the host cancels the request
}

// ExecResult is how a run ended.
type ExecResult struct {
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	TimedOut        bool    `json:"timed_out,omitempty"`
	Stdout          []byte  `json:"stdout"`
	Stderr          []byte  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
	DurationMs      float64 `json:"duration_ms"`
	CPUMs           float64 `json:"cpu_ms"`
	MaxRSSKB        int64   `json:"max_rss_kb"`

	// Kernel runs only.
	Value           string     `json:"value,omitempty"`   // repr of a final expression's value
	Outputs         []Output   `json:"outputs,omitempty"` // figures and display() calls, in order
	Error           *CellError `json:"error,omitempty"`
	SyntaxError     bool       `json:"syntax_error,omitempty"`     // the cell did not parse
	Screenshot      []byte     `json:"screenshot,omitempty"`       // PNG, if asked for and there is a display
	Recording       []byte     `json:"recording,omitempty"`        // APNG, if asked for and there is a display
	Interrupted     bool       `json:"interrupted,omitempty"`      // stopped by SIGINT at its time-out; state kept
	KernelRestarted bool       `json:"kernel_restarted,omitempty"` // the kernel died or ignored the interrupt; state lost
}

// Output is one rich output of a cell.
type Output struct {
	Mime string `json:"mime"`
	Data string `json:"data"`           // base64 for images, text otherwise
	Text string `json:"text,omitempty"` // plain-text alternative of HTML
}

// CellError is an exception a Python cell raised.
type CellError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Ready is sent once the agent can run code.
type Ready struct {
	Python   string            `json:"python,omitempty"`
	Loaded   []string          `json:"loaded"`
	Failed   map[string]string `json:"failed,omitempty"`
	ZygoteUp bool              `json:"zygote_up"`
}

// Event is one agent → host message.
type Event struct {
	ID      uint64       `json:"id"`
	Type    string       `json:"type"`
	Stream  string       `json:"stream,omitempty"`
	Data    []byte       `json:"data,omitempty"`
	Result  *ExecResult  `json:"result,omitempty"`
	Ready   *Ready       `json:"ready,omitempty"`
	Error   string       `json:"error,omitempty"`
	Code    string       `json:"code,omitempty"`  // an ErrCode*, with Error
	Count   int          `json:"count,omitempty"` // answer to "processes"
	File    *FileResult  `json:"file,omitempty"`
	Display *DisplayInfo `json:"display,omitempty"`
}

// Event types and ops, named once.
const (
	OpExec  = "exec"
	OpScrub = "scrub"
	// OpProcesses counts the processes the code started that are still
	// running (not the agent, zygote or kernels): a session is not idle
	// while a server it started runs.
	OpProcesses = "processes"
	OpFile      = "file"
	// OpCancel stops the exec named by Target as its time-out would: a
	// kernel cell is interrupted first, so the session keeps its state.
	// Answered by nothing; the exec itself still answers.
	OpCancel = "cancel"
	// OpDisplay starts the X server (answered by "done" with Display);
	// OpScreenshot answers "done" with a PNG in Data.
	OpDisplay    = "display"
	OpScreenshot = "screenshot"
	OpInput      = "input" // answered "done", with a PNG in Data if asked

	EvReady  = "ready"
	EvOutput = "output"
	EvResult = "result"
	EvDone   = "done"
	EvError  = "error"
)

// Options configure the agent; they arrive as command-line flags.
type Options struct {
	Preload []string // Python modules the zygote imports before the first run
	GVisor  bool     // the sandbox runs under gVisor, whose IPC calls differ from Linux's
	// ProxyListen is a TCP address on the sandbox's loopback whose
	// connections the agent carries to ProxySocket, the host's egress proxy
	// for this sandbox. Programs use it as HTTP(S)_PROXY; when the host has
	// not opened the socket they get a 403 that says so.
	ProxyListen, ProxySocket string
}
