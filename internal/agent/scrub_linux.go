package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// exitWait bounds how long a scrub waits for exiting runs before it kills.
const exitWait = 100 * time.Millisecond

// scrubbedDirs are emptied between stateless runs.
var scrubbedDirs = []string{workspace, "/tmp", "/dev/shm", "/dev/mqueue"}

// scrub returns the sandbox to the state it had before the first run: only
// the agent and the zygote alive, no file any run wrote, no IPC object left.
func (a *Agent) scrub() error {
	if a.zygote != nil && !a.zygote.alive() {
		return errors.New("python zygote died")
	}
	keep := map[int]bool{os.Getpid(): true}
	spare := "" // nothing in the scrubbed directories outlives the scrub, but the X socket
	a.mu.Lock()
	if a.display != nil {
		keep[a.display.pid] = true // the screen outlives episodes; their windows do not
		spare = xSocketDir
	}
	a.mu.Unlock()
	if a.zygote != nil {
		for _, pid := range a.zygote.keep() {
			keep[pid] = true
		}
	}
	// The last run usually reported its end a moment ago and is still
	// exiting; once it is reaped, one pass over /proc is mostly all it takes.
	a.mu.Lock()
	exiting := a.exiting
	a.exiting = nil
	a.mu.Unlock()
	wait := time.NewTimer(exitWait)
	defer wait.Stop()
waiting:
	for _, ch := range exiting {
		select {
		case <-ch:
		case <-wait.C:
			break waiting
		}
	}
	// A forking process can add children while we kill; a few passes catch
	// them, since a process that got SIGKILL forks no more.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, pid := range livePids() {
			if !keep[pid] {
				syscall.Kill(pid, syscall.SIGKILL)
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes survived the scrub", left)
		}
		time.Sleep(time.Millisecond)
	}
	// The kernels died above; a cell that was running has let go of them.
	a.kmu.Lock()
	a.kernels.forget()
	a.kmu.Unlock()
	for _, dir := range scrubbedDirs {
		if err := emptyDir(dir, spare); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err // (gVisor before 2023 mounts no /dev/mqueue)
		}
	}
	if err := a.ipc.removeAll(); err != nil {
		return err
	}
	if a.zygote != nil {
		return a.zygote.prefork()
	}
	return nil
}

// livePids lists the processes of this PID namespace. A killed process
// stays listed until it is reaped; both reapers here (the agent as PID 1, and
// the zygote for its runs) do so at once, so the scrub loop ends.
func livePids() []int {
	f, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// emptyDir removes everything below dir but spare, restoring permissions a
// run may have taken away (a directory with mode 000 cannot be emptied
// otherwise).
func emptyDir(dir, spare string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("scrub %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if p == spare && spare != "" {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			filepath.Walk(p, func(q string, fi os.FileInfo, err error) error {
				if err == nil && fi.IsDir() {
					os.Chmod(q, 0o700)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("scrub %s: %w", p, err)
			}
		}
	}
	return nil
}
