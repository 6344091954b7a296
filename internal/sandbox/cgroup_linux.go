package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const cgroupRoot = "/sys/fs/cgroup"

// memoryCgroupFile returns the file that counts OOM kills of a cgroup, for
// cgroup v2 (memory.events) or v1 (memory.oom_control).
func memoryCgroupFile(cg string) string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return filepath.Join(cgroupRoot, cg, "memory.events")
	}
	return filepath.Join(cgroupRoot, "memory", cg, "memory.oom_control")
}

// oomKills is how many processes the kernel's OOM killer has killed in cg.
func oomKills(cg string) int64 {
	f, err := os.Open(memoryCgroupFile(cg))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// cgroupDirs lists where cg lives: one directory per v1 hierarchy, or one on v2.
func cgroupDirs(cg string) []string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return []string{filepath.Join(cgroupRoot, cg)}
	}
	hier, _ := os.ReadDir(cgroupRoot)
	var dirs []string
	for _, h := range hier {
		dirs = append(dirs, filepath.Join(cgroupRoot, h.Name(), cg))
	}
	return dirs
}

// removeCgroup removes cg's (empty) directories; the runtime usually has.
func removeCgroup(cg string) {
	for _, d := range cgroupDirs(cg) {
		os.Remove(d)
	}
}

// leftoverCgroups lists sandbox cgroups that exist under the parent.
func leftoverCgroups() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range cgroupDirs(cgroupParent) {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "cc-") && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, cgroupParent+"/"+e.Name())
			}
		}
	}
	return out
}

// setLimits changes a running sandbox's memory, CPU and pids limits; a zero
// leaves that one as it is.
func setLimits(cg string, memoryBytes int64, cpus float64, pids int64) error {
	const period = 100000 // µs, as the OCI spec's default
	quota := int64(cpus * period)
	var files map[string]string
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		dir := filepath.Join(cgroupRoot, cg)
		files = map[string]string{
			filepath.Join(dir, "memory.max"): strconv.FormatInt(memoryBytes, 10),
			filepath.Join(dir, "cpu.max"):    fmt.Sprintf("%d %d", quota, period),
			filepath.Join(dir, "pids.max"):   strconv.FormatInt(pids, 10),
		}
	} else {
		files = map[string]string{
			filepath.Join(cgroupRoot, "memory", cg, "memory.limit_in_bytes"): strconv.FormatInt(memoryBytes, 10),
			filepath.Join(cgroupRoot, "cpu", cg, "cpu.cfs_quota_us"):         strconv.FormatInt(quota, 10),
			filepath.Join(cgroupRoot, "pids", cg, "pids.max"):                strconv.FormatInt(pids, 10),
		}
	}
	set := map[string]bool{"memory": memoryBytes > 0, "cpu": cpus > 0, "pids": pids > 0}
	for file, val := range files {
		if !set[strings.SplitN(filepath.Base(file), ".", 2)[0]] {
			continue
		}
		if err := writeLimit(file, val); err != nil {
			return fmt.Errorf("set %s to %s: %w", filepath.Base(file), val, err)
		}
	}
	return nil
}

// writeLimit writes a cgroup limit. On v1 the memory limit may not exceed
// memory+swap (which runc sets equal to it: no swap), so that one moves
// with it: raised first when the limit grows, lowered after when it shrinks.
func writeLimit(file, val string) error {
	memsw := strings.Replace(file, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", 1)
	if memsw == file {
		return os.WriteFile(file, []byte(val), 0)
	}
	if _, err := os.Stat(memsw); err != nil {
		return os.WriteFile(file, []byte(val), 0) // no swap accounting on this host
	}
	if err := os.WriteFile(file, []byte(val), 0); err != nil {
		if err := os.WriteFile(memsw, []byte(val), 0); err != nil {
			return err
		}
		return os.WriteFile(file, []byte(val), 0)
	}
	return os.WriteFile(memsw, []byte(val), 0)
}

// MemoryInUse is the memory the cgroups of every sandbox use together, as
// the kernel accounts it (anonymous memory, page tables, tmpfs, page cache).
func MemoryInUse() (int64, error) {
	file := filepath.Join(cgroupRoot, "memory", cgroupParent, "memory.usage_in_bytes")
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		file = filepath.Join(cgroupRoot, cgroupParent, "memory.current")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
