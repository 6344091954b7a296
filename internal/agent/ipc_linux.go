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
type sysvKind struct {
	name       string
	ctl        func(id, cmd int, buf unsafe.Pointer) (int, error)
	private    func() (int, error) // makes a throw-away object
	info, stat int                 // the *_INFO and *_STAT commands of this kind
}

var sysvKinds = []sysvKind{
	{"shared memory segment", shmctl, func() (int, error) { return sysvGet(unix.SYS_SHMGET, 0, 1, 0o600) }, 14, 13},
	{"semaphore set", semctl, func() (int, error) { return sysvGet(unix.SYS_SEMGET, 0, 1, 0o600) }, 19, 18},
	{"message queue", msgctl, func() (int, error) { return sysvGet(unix.SYS_MSGGET, 0, 0o600, 0) }, 12, 11},
}

func sysvGet(nr uintptr, a, b, c int) (int, error) {
	r, _, e := unix.Syscall(nr, uintptr(a), uintptr(b), uintptr(c))
	return errnoResult(r, e)
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

// ipcCleaner removes every System V IPC object of the sandbox's namespace.
type ipcCleaner struct {
	// byID is set under gVisor, whose *_INFO does not say which slots are in
	// use. Its ids are handed out in increasing order, so those made since
	// the last scrub lie between seen and the id of a fresh probe object.
	byID bool
	seen [3]int
}

func (c *ipcCleaner) removeAll() error {
	buf := make([]byte, 512) // larger than any of the kernel's *_ds and *_info structs
	p := unsafe.Pointer(&buf[0])
	for i, k := range sysvKinds {
		var ids []int
		if c.byID {
			probe, err := k.private()
			if err != nil {
				return fmt.Errorf("probe System V %ss: %w", k.name, err)
			}
			for id := c.seen[i] + 1; id <= probe; id++ {
				if _, err := k.ctl(id, unix.IPC_STAT, p); err == nil {
					ids = append(ids, id)
				}
			}
			c.seen[i] = probe
		} else {
			// Linux: *_INFO gives the highest slot in use, *_STAT turns a slot into an id.
			highest, err := k.ctl(0, k.info, p)
			if err != nil {
				return fmt.Errorf("list System V %ss: %w", k.name, err)
			}
			for slot := 0; slot <= highest; slot++ {
				if id, err := k.ctl(slot, k.stat, p); err == nil {
					ids = append(ids, id)
				}
			}
		}
		for _, id := range ids {
			if _, err := k.ctl(id, unix.IPC_RMID, nil); err != nil {
				return fmt.Errorf("remove System V %s %d: %w", k.name, id, err)
			}
		}
	}
	return nil
}
