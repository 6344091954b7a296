package sandbox

import (
	"fmt"
	"path/filepath"

	"github.com/codecell/codecell/internal/egress"
	"github.com/codecell/codecell/internal/oci"
)

// netDir is the host side of the sandbox's oci.NetDir.
func (sb *Sandbox) netDir() string { return filepath.Join(sb.bundle, "net") }

// OpenNetwork gives the sandbox egress to the hosts policy allows, through
// a proxy gate of its own. Programs reach it through the environment
// ProxyEnv returns. A gate already open is replaced.
func (sb *Sandbox) OpenNetwork(policy *egress.Policy) error {
	sb.CloseNetwork() // first: closing unlinks the socket path the new gate takes
	g, err := egress.Open(filepath.Join(sb.netDir(), filepath.Base(oci.ProxySocket)), sb.ID, policy, sb.log)
	if err != nil {
		return fmt.Errorf("open the sandbox's network: %w", err)
	}
	sb.gate.Store(g)
	return nil
}

// CloseNetwork takes the sandbox's egress away and cuts its connections.
func (sb *Sandbox) CloseNetwork() {
	if g := sb.gate.Swap(nil); g != nil {
		g.Close()
	}
}

// NetworkStats is the open gate's policy and counts, nil without one.
func (sb *Sandbox) NetworkStats() *egress.Stats {
	g := sb.gate.Load()
	if g == nil {
		return nil
	}
	s := g.Stats()
	return &s
}

// ProxyEnv is the environment that sends programs through the sandbox's
// gate. Loopback stays direct (a program's own local servers), unless the
// policy names a loopback host: that means the host's, reached by proxy.
func ProxyEnv(policy *egress.Policy) map[string]string {
	url := "http://" + oci.ProxyListen
	env := map[string]string{"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
	if policy.NamesLoopback() {
		env["NO_PROXY"], env["no_proxy"] = "", ""
	}
	return env
}
