//go:build !linux

package runtime

import "syscall"

// dieWithParent: OCI runtimes exist only on Linux; this keeps the module building.
func dieWithParent() *syscall.SysProcAttr { return nil }
