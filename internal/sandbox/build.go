package sandbox

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/codecell/codecell/internal/agent"
	"github.com/codecell/codecell/internal/config"
	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/errdefs"
	"github.com/codecell/codecell/internal/oci"
	"github.com/codecell/codecell/internal/packages"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// buildPolicy is where a build sandbox may go: the index, the registry and
// the configured extra hosts, nothing else.
func (m *Manager) buildPolicy(kind string) (*egress.Policy, error) {
	var hosts []string
	urls := []string{m.cfg.NPMRegistry}
	if kind == packages.Python {
		urls = []string{m.cfg.PipIndexURL, m.cfg.PipExtraIndexURL}
	}
	for _, s := range urls {
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, u.Host)
		if u.Hostname() == "pypi.org" { // PyPI serves its files from another host
			hosts = append(hosts, "files.pythonhosted.org")
		}
	}
	return egress.Parse(append(hosts, m.cfg.PackageHosts...))
}

// buildLayer installs reqs into dir inside a sandbox of their own: the
// installer, and whatever a package runs while it installs, sees only the
// index through the egress proxy and writes only dir.
func (m *Manager) buildLayer(ctx context.Context, kind string, reqs []string, dir string) error {
	rt, ok := m.runtimes[m.cfg.Runtime]
	if !ok {
		return fmt.Errorf("runtime %s is not running: %w", m.cfg.Runtime, errdefs.ErrUnavailable)
	}
	policy, err := m.buildPolicy(kind)
	if err != nil {
		return err
	}
	// The sandbox's user writes the layer; in a user namespace it is a
	// mapped host uid.
	uid := int(m.cfg.SandboxUID)
	if m.cfg.UserNS && rt.Name() == "runc" {
		uid += int(m.cfg.UserNSBase)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		return err
	}
	spec := m.specFor(profile{runtime: rt.Name(), preload: []string{}})
	spec.Options.Mounts = append(spec.Options.Mounts, specs.Mount{Destination: oci.BuildDir, Type: "bind", Source: dir,
		Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	spec.Options.MemoryBytes = max(spec.Options.MemoryBytes, 1<<30)
	spec.Options.TmpBytes = max(spec.Options.TmpBytes, 1<<30)
	sb, err := create(ctx, rt, m.dataDir, spec, m.log)
	if err != nil {
		return fmt.Errorf("start the install sandbox: %w", err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	if err := sb.OpenNetwork(policy); err != nil {
		return err
	}
	env := ProxyEnv(policy)
	env["HOME"] = "/tmp"
	timeout := m.cfg.BuildTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := sb.Exec(ctx, &agent.ExecRequest{Language: "bash", Code: installScript(kind, reqs, m.cfg), Env: env,
		TimeoutMs: timeout.Milliseconds(), OutputCap: 64 << 10}, nil)
	if err != nil {
		return err
	}
	if res.Status == StatusOK {
		return nil
	}
	out := tail(strings.TrimSpace(string(res.Stdout) + "\n" + string(res.Stderr)))
	switch res.Status {
	case StatusTimeout:
		return fmt.Errorf("the install took longer than %s (--build-timeout): %s: %w", m.cfg.BuildTimeout, out, errdefs.ErrUnavailable)
	case StatusOOM, StatusKilled:
		return fmt.Errorf("the install sandbox was killed (%s): %s: %w", res.Status, out, errdefs.ErrUnavailable)
	}
	// The gate saw whether the index answered: an index that is down is the
	// server's problem (503), a package it does not have the request's (400).
	if st := sb.NetworkStats(); st != nil && st.Failed > 0 {
		return fmt.Errorf("the package index at %s cannot be reached: %s: %w", indexOf(kind, m.cfg), out, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %w", out, errdefs.ErrInvalid)
}

func indexOf(kind string, cfg config.Config) string {
	if kind == packages.JavaScript {
		return cfg.NPMRegistry
	}
	return strings.TrimSpace(cfg.PipIndexURL + " " + cfg.PipExtraIndexURL)
}

// installScript is the bash the build sandbox runs. Requirements passed
// a strict grammar (no quotes, no options) and index URLs the config's
// check, so single quotes are enough.
func installScript(kind string, reqs []string, cfg config.Config) string {
	q := func(s string) string { return "'" + s + "'" }
	args := make([]string, len(reqs))
	for i, r := range reqs {
		args[i] = q(r)
	}
	if kind == packages.JavaScript {
		return "exec npm install --prefix " + oci.BuildDir + " --registry " + q(cfg.NPMRegistry) +
			" --no-audit --no-fund --no-update-notifier --no-package-lock --cache /tmp/.npm --loglevel error " + strings.Join(args, " ")
	}
	// --prefix, unlike --target, sees the image's own distributions, so a
	// dependency Debian already ships is not installed again.
	cmd := "exec python3 -m pip install --no-input --disable-pip-version-check --no-cache-dir --progress-bar off" +
		" --no-warn-script-location --retries 1 --timeout 30 --prefix " + oci.BuildDir + " --index-url " + q(cfg.PipIndexURL)
	if cfg.PipExtraIndexURL != "" {
		cmd += " --extra-index-url " + q(cfg.PipExtraIndexURL)
	}
	return cmd + " " + strings.Join(args, " ")
}

// tail keeps the end of an installer's output, where its error is.
func tail(s string) string {
	lines := strings.Split(s, "\n")
	var kept []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "npm error A complete log") || strings.HasPrefix(l, "npm error   /") {
			continue
		}
		kept = append(kept, l)
	}
	if len(kept) > 8 {
		kept = kept[len(kept)-8:]
	}
	return strings.Join(kept, " | ")
}
