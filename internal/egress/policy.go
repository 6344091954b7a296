// Package egress is the only way out of a sandbox: an HTTP proxy (CONNECT and
// plain HTTP) that the server runs for each sandbox given network access,
// listening on a unix socket bound into that sandbox alone, and admitting
// only the hosts of that sandbox's allow-list.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/codecell/codecell/internal/errdefs"
)

// Policy is a parsed allow-list. The zero Policy allows nothing.
type Policy struct {
	entries []string
	rules   []rule
}

// rule is one entry: a host name (or *.suffix), or an address or CIDR
// prefix, with a port or 0 for any port.
type rule struct {
	name     string // lower case, without the "*." of a wildcard
	wildcard bool   // name matches its subdomains only
	prefix   netip.Prefix
	port     int
}

// Parse checks an allow-list. Entries are "host", "*.domain", "1.2.3.4",
// "10.0.0.0/8", "[::1]", each with an optional ":port"; without a port any
// port of that host is allowed.
func Parse(entries []string) (*Policy, error) {
	p := &Policy{}
	for _, e := range entries {
		r, err := parseRule(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("network.allow entry %q: %v; use host, *.domain, an IP address or CIDR, each with an optional :port: %w", e, err, errdefs.ErrInvalid)
		}
		p.entries = append(p.entries, strings.TrimSpace(e))
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func parseRule(e string) (rule, error) {
	var r rule
	if e == "" {
		return r, fmt.Errorf("empty")
	}
	host := e
	if h, port, err := net.SplitHostPort(e); err == nil {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return r, fmt.Errorf("port %q is not 1-65535", port)
		}
		host, r.port = h, n
	} else if strings.HasPrefix(e, "[") && strings.HasSuffix(e, "]") {
		host = e[1 : len(e)-1]
	}
	if pfx, err := netip.ParsePrefix(host); err == nil {
		r.prefix = pfx.Masked()
		return r, nil
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		r.prefix = netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen())
		return r, nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.wildcard, host = true, rest
	}
	if !validName(host) {
		return r, fmt.Errorf("%q is not a host name", host)
	}
	r.name = host
	return r, nil
}

// validName accepts DNS names: dot-separated labels of letters, digits and
// hyphens (underscores too, which some real hosts use).
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Allows reports whether host:port may be reached. host is a name or an IP
// literal as the client sent it; names are matched as names, never by what
// they resolve to, and IP rules only match IP literals.
func (p *Policy) Allows(host string, port int) bool {
	if p == nil {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	addr, addrErr := netip.ParseAddr(host)
	for _, r := range p.rules {
		if r.port != 0 && r.port != port {
			continue
		}
		switch {
		case r.prefix.IsValid():
			if addrErr == nil && r.prefix.Contains(addr.Unmap()) {
				return true
			}
		case r.wildcard:
			if strings.HasSuffix(host, "."+r.name) {
				return true
			}
		case host == r.name:
			return true
		}
	}
	return false
}

// Entries is the allow-list as given.
func (p *Policy) Entries() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.entries...)
}

// NamesLoopback reports whether an entry is a loopback host, which a
// sandbox must then reach through the proxy rather than its own loopback.
func (p *Policy) NamesLoopback() bool {
	if p == nil {
		return false
	}
	for _, r := range p.rules {
		if r.prefix.IsValid() && r.prefix.Addr().IsLoopback() || r.name == "localhost" {
			return true
		}
	}
	return false
}
