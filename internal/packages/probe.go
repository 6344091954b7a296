package packages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// probePython prints what the interpreter has: its version, its standard
// library (by its own list, not ours), every top-level module on its path,
// and every installed distribution with its version.
const probePython = `
import importlib.metadata as md, json, pkgutil, platform, sys
dists = {}
for d in md.distributions():
    name = d.metadata.get("Name")
    if name:
        dists.setdefault(name, d.version)
print(json.dumps({"version": platform.python_version(), "stdlib": sorted(sys.stdlib_module_names),
    "modules": sorted({m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)), "dists": dists}))
`

const probeNode = `console.log(JSON.stringify({version: process.version, builtins: require("module").builtinModules}))`

var errMissing = errors.New("not installed")

// Probe reads what the sandbox image has. The sandboxes run the host's /usr
// read-only, so its python3 and node, run with the sandbox's environment,
// are the sandboxes' interpreters. A missing node leaves JavaScript out.
func Probe(ctx context.Context, env []string) (*Env, error) {
	e := &Env{Stdlib: map[string]bool{}, Modules: map[string]bool{}, Dists: map[string]string{}, NodeBuiltins: map[string]bool{}}
	var py struct {
		Version string            `json:"version"`
		Stdlib  []string          `json:"stdlib"`
		Modules []string          `json:"modules"`
		Dists   map[string]string `json:"dists"`
	}
	if err := runJSON(ctx, env, &py, "python3", "-c", probePython); errors.Is(err, errMissing) {
		return e, nil // no Python in the image: no Python packages either
	} else if err != nil {
		return nil, fmt.Errorf("probe the sandbox's python3: %w", err)
	}
	e.Python = py.Version
	for _, m := range py.Stdlib {
		e.Stdlib[m] = true
	}
	for _, m := range py.Modules {
		e.Modules[m] = true
	}
	for n, v := range py.Dists {
		e.Dists[Normalize(n)] = v
	}
	var node struct {
		Version  string   `json:"version"`
		Builtins []string `json:"builtins"`
	}
	if err := runJSON(ctx, env, &node, "node", "-e", probeNode); err == nil {
		e.Node = node.Version
		for _, b := range node.Builtins {
			e.NodeBuiltins[b] = true
		}
	}
	return e, nil
}

func runJSON(ctx context.Context, env []string, v any, name string, args ...string) error {
	path := ""
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p
		}
	}
	bin := ""
	for _, dir := range strings.Split(path, ":") {
		if p, err := exec.LookPath(dir + "/" + name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		return fmt.Errorf("%s is not on the sandbox's PATH %s: %w", name, path, errMissing)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir = env, "/"
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return err
	}
	return json.Unmarshal(out, v)
}
