package agent

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// System V IPC objects outlive the processes that made them: a segment,
// semaphore set or message queue a run leaves in the sandbox's IPC namespace
// would be there, contents and all, for the next run. (POSIX message queues
// live in /dev/mqueue and are emptied with the other directories.)
var sysvKinds = []struct {
	name       string
	ctl        func(id, cmd int, buf unsafe.Pointer) (int, error)
	info, stat int // the *_INFO and *_STAT commands of this kind
}{
	{"shared memory segment", shmctl, 14, 13},
	{"semaphore set", semctl, 19, 18},
	{"message queue", msgctl, 12, 11},
}

func shmctl(id, cmd int, buf unsafe.Pointer) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_SHMCTL, uintptr(id), uintptr(cmd), uintptr(buf))
	return errnoResult(r, e)
}

func semctl(id, cmd int, buf unsafe.Pointer) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, uintptr(cmd), uintptr(buf), 0, 0)
	return errnoResult(r, e)
}

func msgctl(id, cmd int, buf unsafe.Pointer) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), uintptr(cmd), uintptr(buf))
	return errnoResult(r, e)
}

func errnoResult(r uintptr, e unix.Errno) (int, error) {
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// removeSysVIPC deletes every System V IPC object of the namespace. *_INFO
// gives the highest slot in use and *_STAT turns a slot into an id, which
// works where /proc/sysvipc does not exist (gVisor).
func removeSysVIPC() error {
	buf := make([]byte, 512) // larger than any of the kernel's *_ds and *_info structs
	for _, k := range sysvKinds {
		highest, err := k.ctl(0, k.info, unsafe.Pointer(&buf[0]))
		if err != nil {
			return fmt.Errorf("list System V %ss: %w", k.name, err)
		}
		for slot := 0; slot <= highest; slot++ {
			id, err := k.ctl(slot, k.stat, unsafe.Pointer(&buf[0]))
			if err != nil {
				continue // an empty slot
			}
			if _, err := k.ctl(id, unix.IPC_RMID, nil); err != nil {
				return fmt.Errorf("remove System V %s %d: %w", k.name, id, err)
			}
		}
	}
	return nil
}
