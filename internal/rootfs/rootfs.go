// Package rootfs lays out, under the data directory, what every sandbox's
// root is made of: an empty read-only skeleton whose real content comes from
// read-only bind mounts of the host's /usr, and a generated minimal /etc that
// holds no host secrets (no shadow, no ssh keys, no host names).
package rootfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/codecell/codecell/internal/oci"
)

// Layout is what Prepare made.
type Layout struct {
	Root     string   // skeleton used as the OCI root
	Etc      string   // generated /etc
	HostDirs []string // host directories to bind read-only at the same path
}

// hostTop are the host top-level entries a sandbox sees. On a merged-/usr host
// most are symlinks into /usr, which the skeleton copies as symlinks.
var hostTop = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcCopy are the host /etc entries programs need to start (dynamic loader
// cache, alternatives symlinks, fonts, matplotlib and python site config).
var etcCopy = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "fonts", "matplotlibrc",
	"python3", "python3.11", "mime.types", "localtime", "timezone", "ssl/certs",
	"ca-certificates.conf", "debian_version", "os-release", "protocols", "services",
}

// Prepare (re)creates the layout under dir for a sandbox user uid:gid.
func Prepare(dir string, uid, gid uint32) (Layout, error) {
	l := Layout{Root: filepath.Join(dir, "root"), Etc: filepath.Join(dir, "etc")}
	if err := os.RemoveAll(dir); err != nil {
		return l, fmt.Errorf("clear rootfs dir: %w", err)
	}
	// runc gives a tmpfs the mode of the directory it is mounted on, so the
	// skeleton's mount points carry the modes the mounts should have.
	for d, mode := range map[string]os.FileMode{"proc": 0o555, "dev": 0o755, "etc": 0o755, "tmp": 0o777 | os.ModeSticky,
		"workspace": 0o755, strings.TrimPrefix(oci.AgentDir, "/"): 0o755} {
		p := filepath.Join(l.Root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return l, err
		}
		if err := os.Chmod(p, mode); err != nil {
			return l, err
		}
	}
	for _, d := range oci.MountPoints {
		if err := os.MkdirAll(filepath.Join(l.Root, d), 0o755); err != nil {
			return l, err
		}
	}
	if err := os.WriteFile(filepath.Join(l.Root, oci.AgentPath), nil, 0o755); err != nil {
		return l, err
	}
	for _, top := range hostTop {
		fi, err := os.Lstat(top)
		if err != nil {
			continue
		}
		dst := filepath.Join(l.Root, top)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(top)
			if err != nil {
				return l, err
			}
			if err := os.Symlink(target, dst); err != nil {
				return l, err
			}
		case fi.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return l, err
			}
			l.HostDirs = append(l.HostDirs, top)
		}
	}
	if err := writeEtc(l.Etc, uid, gid); err != nil {
		return l, fmt.Errorf("generate /etc: %w", err)
	}
	return l, nil
}

func writeEtc(etc string, uid, gid uint32) error {
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/workspace:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", uid, gid),
		"group":         fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", gid),
		"hosts":         "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname":      "sandbox\n",
		"resolv.conf":   "",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, name := range etcCopy {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(etc, name)); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies a file, symlink or directory, keeping symlinks as symlinks.
// A missing source is not an error: hosts differ.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, b, 0o644)
		}
		return nil
	})
}
