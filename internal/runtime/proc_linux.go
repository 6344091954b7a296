package runtime

import "syscall"

// dieWithParent kills the runtime process when the daemon dies, so the
// agent's stdin closes and the sandbox ends with it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
