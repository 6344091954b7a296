// Package localindex serves a Python package index (PEP 503 simple API,
// with wheels it builds itself) and an npm registry (package documents and
// tarballs) on loopback, so tests and benchmarks install packages for real
// on machines that cannot reach PyPI or npm.
package localindex

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/codecell/codecell/internal/packages"
)

// Wheel is a pure-Python distribution: Files maps paths inside the wheel
// (such as "cv2/__init__.py") to their content.
type Wheel struct {
	Name     string // distribution name, as on the index
	Version  string
	Requires []string // Requires-Dist lines
	Files    map[string]string
}

// NPMPackage is an npm package version whose tarball holds package.json
// (generated) and Files (such as "index.js").
type NPMPackage struct {
	Name    string
	Version string
	Main    string
	Files   map[string]string
}

// Server is a running index and registry.
type Server struct {
	URL      string // http://127.0.0.1:port
	Requests atomic.Int64
	hitsMu   sync.Mutex
	hits     map[string]int
	files    map[string][]byte
	simple   map[string][]string // normalized project -> wheel file names
	npm      map[string]map[string]any
	srv      *http.Server
}

// Start serves wheels and npm packages on a loopback port.
func Start(wheels []Wheel, pkgs []NPMPackage) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), hits: map[string]int{}, files: map[string][]byte{}, simple: map[string][]string{}, npm: map[string]map[string]any{}}
	for _, w := range wheels {
		b, name, err := buildWheel(w)
		if err != nil {
			ln.Close()
			return nil, err
		}
		s.files[name] = b
		s.simple[packages.Normalize(w.Name)] = append(s.simple[packages.Normalize(w.Name)], name)
	}
	for _, p := range pkgs {
		b, err := buildTarball(p)
		if err != nil {
			ln.Close()
			return nil, err
		}
		base := p.Name[strings.LastIndex(p.Name, "/")+1:]
		file := fmt.Sprintf("%s-%s.tgz", base, p.Version)
		s.files["npm/"+p.Name+"/"+file] = b
		sha1sum := sha1.Sum(b)
		sha512sum := sha512.Sum512(b)
		doc := s.npm[p.Name]
		if doc == nil {
			doc = map[string]any{"name": p.Name, "dist-tags": map[string]string{}, "versions": map[string]any{}}
			s.npm[p.Name] = doc
		}
		doc["dist-tags"].(map[string]string)["latest"] = p.Version
		doc["versions"].(map[string]any)[p.Version] = map[string]any{
			"name": p.Name, "version": p.Version, "main": p.Main,
			"dist": map[string]string{"tarball": s.URL + "/files/npm/" + p.Name + "/" + file,
				"shasum": hex.EncodeToString(sha1sum[:]), "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:])},
		}
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// PipIndex is the URL to give pip's --index-url.
func (s *Server) PipIndex() string { return s.URL + "/simple/" }

// NPMRegistry is the URL to give npm's --registry.
func (s *Server) NPMRegistry() string { return s.URL + "/npm/" }

// Hits is how many requests asked for path.
func (s *Server) Hits(path string) int {
	s.hitsMu.Lock()
	defer s.hitsMu.Unlock()
	return s.hits[path]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	s.hitsMu.Lock()
	s.hits[r.URL.Path]++
	s.hitsMu.Unlock()
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/files/"):
		b, ok := s.files[strings.TrimPrefix(p, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	case strings.HasPrefix(p, "/simple/"):
		project := strings.Trim(strings.TrimPrefix(p, "/simple/"), "/")
		names, ok := s.simple[packages.Normalize(project)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html><html><body>\n")
		sort.Strings(names)
		for _, n := range names {
			sum := sha256.Sum256(s.files[n])
			fmt.Fprintf(w, "<a href=\"%s/files/%s#sha256=%x\">%s</a>\n", s.URL, html.EscapeString(n), sum, html.EscapeString(n))
		}
		fmt.Fprintf(w, "</body></html>\n")
	case strings.HasPrefix(p, "/npm/"):
		name := strings.Replace(strings.TrimPrefix(p, "/npm/"), "%2f", "/", 1)
		name = strings.Replace(name, "%2F", "/", 1)
		doc, ok := s.npm[name]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"Not found"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	default:
		http.NotFound(w, r)
	}
}

func buildWheel(w Wheel) ([]byte, string, error) {
	dist := strings.ReplaceAll(packages.Normalize(w.Name), "-", "_")
	info := fmt.Sprintf("%s-%s.dist-info", dist, w.Version)
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", w.Name, w.Version)
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files := map[string]string{
		info + "/METADATA": meta,
		info + "/WHEEL":    "Wheel-Version: 1.0\nGenerator: codecell-localindex\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for k, v := range w.Files {
		files[k] = v
	}
	names := slices.Sorted(maps.Keys(files)) // archives come out the same every time
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		f, err := zw.Create(n)
		if err != nil {
			return nil, "", err
		}
		f.Write([]byte(files[n]))
		sum := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n]))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	f, err := zw.Create(info + "/RECORD")
	if err != nil {
		return nil, "", err
	}
	f.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), fmt.Sprintf("%s-%s-py3-none-any.whl", dist, w.Version), nil
}

func buildTarball(p NPMPackage) ([]byte, error) {
	pj, _ := json.Marshal(map[string]string{"name": p.Name, "version": p.Version, "main": p.Main})
	files := map[string]string{"package.json": string(pj)}
	for k, v := range p.Files {
		files[k] = v
	}
	names := slices.Sorted(maps.Keys(files)) // archives come out the same every time
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		tw.Write([]byte(files[n]))
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
