package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scrubbedDirs are emptied between stateless runs.
var scrubbedDirs = []string{workspace, "/tmp", "/dev/shm"}

// scrub returns the sandbox to the state it had before the first run: only
// the agent and the zygote alive, and no file any run wrote.
func (a *Agent) scrub() error {
	if a.zygote != nil && !a.zygote.alive() {
		return errors.New("python zygote died")
	}
	keep := map[int]bool{os.Getpid(): true}
	if a.zygote != nil {
		for _, pid := range a.zygote.keep() {
			keep[pid] = true
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
	for _, dir := range scrubbedDirs {
		if err := emptyDir(dir); err != nil {
			return err
		}
	}
	if a.zygote != nil {
		return a.zygote.prefork()
	}
	return nil
}

// livePids lists the processes of this PID namespace that are not zombies.
func livePids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // already gone
		}
		// The state follows the parenthesised command name, which may itself hold ") ".
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// emptyDir removes everything below dir, restoring permissions a run may
// have taken away (a directory with mode 000 cannot be emptied otherwise).
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("scrub %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
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
