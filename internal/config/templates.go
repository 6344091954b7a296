package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/codecell/codecell/internal/egress"
)

// Template is a named kind of sandbox from the templates file: created
// ahead of need in a warm pool of its own, with its packages mounted and its
// modules imported, for requests that say "template": name.
type Template struct {
	Runtime  string `json:"runtime"`
	Packages struct {
		Python     []string `json:"python"`
		JavaScript []string `json:"javascript"`
	} `json:"packages"`
	Preload        []string          `json:"preload"` // nil: the server's --preload
	Env            map[string]string `json:"env"`
	MemoryMB       int64             `json:"memory_mb"`
	CPUs           float64           `json:"cpus"`
	PIDs           int64             `json:"pids"`
	Display        bool              `json:"display"`
	Screen         string            `json:"screen"`
	PoolSize       int               `json:"pool_size"` // warm sandboxes; 0 means 1
	AllowedImports []string          `json:"allowed_imports"`
	Network        *struct {
		Allow []string `json:"allow"`
	} `json:"network"`
}

var (
	templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	moduleName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// LoadTemplates reads TemplatesFile, if set, into Templates.
func (c *Config) LoadTemplates() error {
	if c.TemplatesFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.TemplatesFile)
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	var file struct {
		Templates map[string]Template `json:"templates"`
	}
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		return fmt.Errorf("templates file %s: %v", c.TemplatesFile, err)
	}
	c.Templates = file.Templates
	return nil
}

func (t Template) check(name string, c *Config) error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("template %q: "+format, append([]any{name}, a...)...))
	}
	if !templateName.MatchString(name) {
		bad("names are lower-case letters, digits, '-', '_' and '.'")
	}
	if t.Runtime != "" && t.Runtime != "runc" && t.Runtime != "gvisor" {
		bad("runtime %q: must be runc or gvisor", t.Runtime)
	}
	if t.PoolSize < 0 || t.PoolSize > 256 {
		bad("pool_size %d: must be between 0 and 256", t.PoolSize)
	}
	if t.MemoryMB != 0 && (t.MemoryMB < 128 || t.MemoryMB > 65536) {
		bad("memory_mb %d: must be between 128 and 65536", t.MemoryMB)
	}
	if t.CPUs != 0 && (t.CPUs < 0.05 || t.CPUs > 64) {
		bad("cpus %g: must be between 0.05 and 64", t.CPUs)
	}
	if t.PIDs != 0 && (t.PIDs < 16 || t.PIDs > 32768) {
		bad("pids %d: must be between 16 and 32768", t.PIDs)
	}
	if t.Screen != "" && !t.Display {
		bad("screen needs display: true")
	}
	for _, m := range t.AllowedImports {
		if !IsModuleName(m) {
			bad("allowed_imports entry %q is not a Python module name", m)
		}
	}
	if t.Network != nil {
		if _, err := egress.Parse(t.Network.Allow); err != nil {
			bad("%v", strings.TrimSuffix(err.Error(), ": invalid argument"))
		}
	}
	for k := range t.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad("env name %q", k)
		}
	}
	return errors.Join(errs...)
}

// IsModuleName accepts a Python module path such as "numpy.linalg".
func IsModuleName(s string) bool { return moduleName.MatchString(s) }

// checkIndexURL accepts an http(s) URL with a host, as pip and npm need.
func checkIndexURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(s, "'\" \n") {
		return fmt.Errorf("must be an http:// or https:// URL with a host")
	}
	return nil
}
