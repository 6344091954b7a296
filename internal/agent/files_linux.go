package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
)

// requestError is a failure the request caused (a bad path, a full disk, a
// region off the screen), with the class the host maps to an HTTP status.
type requestError struct {
	code string // ErrCodeInvalid, ErrCodeNotFound or ErrCodeTooLarge
	msg  string
}

func (e *requestError) Error() string { return e.msg }

// relPath turns a path given by the user (relative to /workspace, or
// absolute inside it) into one relative to /workspace, refusing the rest.
// Symlinks are judged later, by os.Root, as each component is opened.
func relPath(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", &requestError{ErrCodeInvalid, "path is empty or holds a NUL byte"}
	}
	if path.IsAbs(p) {
		clean := path.Clean(p)
		if clean != workspace && !strings.HasPrefix(clean, workspace+"/") {
			return "", &requestError{ErrCodeInvalid, fmt.Sprintf("path %q is outside /workspace", p)}
		}
		p = strings.TrimPrefix(strings.TrimPrefix(clean, workspace), "/")
	}
	clean := path.Clean("/" + p)[1:] // no way above the root
	if clean == "" {
		clean = "."
	}
	if p != "" && clean != path.Clean(p) {
		return "", &requestError{ErrCodeInvalid, fmt.Sprintf("path %q leaves /workspace", p)}
	}
	return clean, nil
}

// staysInside walks rel from /workspace one component at a time, following
// symlinks by hand, and refuses a path that leaves /workspace on the way.
// os.Root already refuses that where the kernel's openat2 honours
// RESOLVE_BENEATH, but gVisor (2022) ignores it. The check races with the
// sandbox's own code, which has the agent's uid and so gains nothing by it.
func staysInside(rel string) error {
	inside := func(p string) bool { return p == "/" || p == workspace || strings.HasPrefix(p, workspace+"/") }
	escape := &requestError{ErrCodeInvalid, fmt.Sprintf("%s: the path leaves /workspace through a symlink or ..", path.Join(workspace, rel))}
	cur, parts, hops := workspace, strings.Split(rel, "/"), 0
	for len(parts) > 0 {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
		default:
			next := path.Join(cur, name)
			fi, err := os.Lstat(next)
			switch {
			case err != nil:
				cur = next // does not exist (yet): nothing below it can lead out
			case fi.Mode()&fs.ModeSymlink != 0:
				if hops++; hops > 40 {
					return &requestError{ErrCodeInvalid, fmt.Sprintf("%s: too many symlinks", path.Join(workspace, rel))}
				}
				target, err := os.Readlink(next)
				if err != nil {
					return err
				}
				if path.IsAbs(target) {
					cur = "/"
				}
				parts = append(strings.Split(target, "/"), parts...)
			default:
				cur = next
			}
		}
		if !inside(cur) {
			return escape
		}
	}
	if cur != workspace && !strings.HasPrefix(cur, workspace+"/") {
		return escape
	}
	return nil
}

// classify turns an os error into a requestError the user can act on.
func classify(op, p string, err error) error {
	var fe *requestError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return &requestError{ErrCodeNotFound, fmt.Sprintf("%s %s: no such file or directory in /workspace", op, p)}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EFBIG), errors.Is(err, syscall.EDQUOT):
		return &requestError{ErrCodeTooLarge, fmt.Sprintf("%s %s: /workspace is full (its size is the server's --workspace-mb)", op, p)}
	case strings.Contains(err.Error(), "escapes from parent"), strings.Contains(err.Error(), "path escapes"):
		return &requestError{ErrCodeInvalid, fmt.Sprintf("%s %s: the path leaves /workspace through a symlink or ..", op, p)}
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, fs.ErrExist):
		return &requestError{ErrCodeInvalid, fmt.Sprintf("%s %s: %v", op, p, errors.Unwrap(err))}
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// files serves one file request; read and tar_read send their bytes in
// chunks through emit.
func (a *Agent) files(req *FileRequest, emit func([]byte)) (*FileResult, error) {
	rel, err := relPath(req.Path)
	if err != nil {
		return nil, err
	}
	if err := staysInside(rel); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	res := &FileResult{Path: path.Join(workspace, rel)}
	switch req.Action {
	case "read":
		err = readFile(root, rel, res, emit)
	case "write":
		err = writeFile(root, rel, req.Data)
		res.Size = int64(len(req.Data))
	case "delete":
		if rel == "." {
			return nil, &requestError{ErrCodeInvalid, "refusing to delete /workspace itself; delete what is in it"}
		}
		if _, err = root.Lstat(rel); err == nil {
			err = root.RemoveAll(rel)
		}
	case "list":
		res.Type, res.Entries, err = list(root, rel)
	case "tar_read":
		err = tarRead(root, rel, emit)
	case "tar_write":
		res.Size, err = tarWrite(root, rel, req.Data)
	default:
		return nil, &requestError{ErrCodeInvalid, fmt.Sprintf("unknown file action %q", req.Action)}
	}
	if err != nil {
		return nil, classify(req.Action, res.Path, err)
	}
	return res, nil
}

const chunk = 64 << 10

func readFile(root *os.Root, rel string, res *FileResult, emit func([]byte)) error {
	f, err := root.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return &requestError{ErrCodeInvalid, fmt.Sprintf("%s is a directory; list it, or fetch it as a tar", path.Join(workspace, rel))}
	}
	buf := make([]byte, chunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			res.Size += int64(n)
			emit(append([]byte(nil), buf[:n]...))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(root *os.Root, rel string, data []byte) error {
	if rel == "." {
		return &requestError{ErrCodeInvalid, "path names /workspace itself; name a file in it"}
	}
	if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		root.Remove(rel) // no half-written file left behind
		return err
	}
	return f.Close()
}

// list describes rel (following symlinks inside /workspace) and, for a
// directory, its entries.
func list(root *os.Root, rel string) (string, []FileEntry, error) {
	st, err := root.Stat(rel)
	if err != nil {
		return "", nil, err
	}
	if !st.IsDir() {
		e := entry(st)
		e.Name = path.Base(rel)
		return e.Type, []FileEntry{e}, nil
	}
	dir, err := root.Open(rel)
	if err != nil {
		return "", nil, err
	}
	defer dir.Close()
	infos, err := dir.Readdir(-1)
	if err != nil {
		return "", nil, err
	}
	entries := make([]FileEntry, 0, len(infos))
	for _, fi := range infos {
		entries = append(entries, entry(fi))
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return "dir", entries, nil
}

func entry(fi fs.FileInfo) FileEntry {
	kind := "file"
	switch {
	case fi.IsDir():
		kind = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		kind = "symlink"
	case !fi.Mode().IsRegular():
		kind = "other"
	}
	return FileEntry{Name: fi.Name(), Type: kind, Size: fi.Size(), Mode: fmt.Sprintf("%04o", fi.Mode().Perm()), MTime: fi.ModTime().UTC()}
}

// tarRead sends the tree at rel as a tar stream. Symlinks go in as
// symlinks; they are not followed.
func tarRead(root *os.Root, rel string, emit func([]byte)) error {
	w := &chunkWriter{emit: emit}
	tw := tar.NewWriter(w)
	sub, err := root.OpenRoot(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	err = fs.WalkDir(sub.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = sub.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = p
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := sub.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	w.flush()
	return nil
}

// tarWrite unpacks a tar stream under rel: files and directories only. The
// whole stream is checked before anything is written.
func tarWrite(root *os.Root, rel string, data []byte) (int64, error) {
	if err := checkTar(data); err != nil {
		return 0, err
	}
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return 0, err
	}
	sub, err := root.OpenRoot(rel)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	tr := tar.NewReader(bytes.NewReader(data))
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		name, _ := relPath(hdr.Name) // checked above
		if err := staysInside(path.Join(rel, name)); err != nil {
			return total, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = sub.MkdirAll(name, 0o755)
		case tar.TypeReg:
			if err = sub.MkdirAll(path.Dir(name), 0o755); err != nil {
				break
			}
			var f *os.File
			if f, err = sub.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode).Perm()|0o600); err != nil {
				break
			}
			var n int64
			n, err = io.Copy(f, tr)
			total += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return total, err
		}
	}
}

func checkTar(data []byte) error {
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &requestError{ErrCodeInvalid, fmt.Sprintf("the body is not a valid tar stream: %v", err)}
		}
		if name, err := relPath(hdr.Name); err != nil || name == "." && hdr.Typeflag != tar.TypeDir {
			return &requestError{ErrCodeInvalid, fmt.Sprintf("tar entry %q leaves the target directory", hdr.Name)}
		}
		if hdr.Typeflag != tar.TypeDir && hdr.Typeflag != tar.TypeReg {
			return &requestError{ErrCodeInvalid, fmt.Sprintf("tar entry %q is a %s; only files and directories are accepted", hdr.Name, tarKind(hdr.Typeflag))}
		}
	}
}

func tarKind(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "FIFO"
	}
	return fmt.Sprintf("entry of type %q", t)
}

// chunkWriter passes what is written on in chunks of at most `chunk` bytes.
type chunkWriter struct {
	buf  []byte
	emit func([]byte)
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for len(w.buf) >= chunk {
		w.emit(append([]byte(nil), w.buf[:chunk]...))
		w.buf = w.buf[chunk:]
	}
	return len(p), nil
}

func (w *chunkWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}
