package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds connecting to an allowed host, so a sandbox's client
// hears of an unreachable one before its own time-outs.
const dialTimeout = 10 * time.Second

// Stats counts a gate's connections by outcome.
type Stats struct {
	Allow   []string `json:"allow"`
	Allowed int64    `json:"allowed"`
	Denied  int64    `json:"denied"`
	Failed  int64    `json:"failed"` // allowed, but the host could not be reached
}

// Gate is one sandbox's proxy: a listener on a unix socket only that sandbox
// can reach, admitting the hosts of its policy.
type Gate struct {
	sandbox string
	policy  *Policy
	ln      net.Listener
	srv     *http.Server
	dialer  net.Dialer
	log     *slog.Logger

	allowed, denied, failed atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool // tunnels, closed with the gate
}

// Open starts a gate for sandbox on the unix socket path; log already
// names the sandbox.
func Open(path, sandbox string, policy *Policy, log *slog.Logger) (*Gate, error) {
	os.Remove(path) // a socket left by a gate of a sandbox that died
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	// The sandbox's user, whatever host uid it maps to, must connect.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	g := &Gate{sandbox: sandbox, policy: policy, ln: ln, dialer: net.Dialer{Timeout: dialTimeout},
		log: log, conns: map[net.Conn]bool{}}
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go g.srv.Serve(ln)
	return g, nil
}

// Stats reports the gate's policy and counts.
func (g *Gate) Stats() Stats {
	return Stats{Allow: g.policy.Entries(), Allowed: g.allowed.Load(), Denied: g.denied.Load(), Failed: g.failed.Load()}
}

// Close stops the gate and cuts every connection through it.
func (g *Gate) Close() {
	g.srv.Close()
	g.mu.Lock()
	for c := range g.conns {
		c.Close()
	}
	g.conns = nil
	g.mu.Unlock()
}

func (g *Gate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conns == nil {
		return false
	}
	g.conns[c] = true
	return true
}

func (g *Gate) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	c.Close()
}

// check decides on host:port and counts and logs the decision.
func (g *Gate) check(hostport, defaultPort string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, defaultPort
	}
	n, err := strconv.Atoi(port)
	if host == "" || err != nil {
		g.denied.Add(1)
		return "", fmt.Errorf("%q is not host:port", hostport)
	}
	dest := net.JoinHostPort(strings.Trim(host, "[]"), port)
	if !g.policy.Allows(host, n) {
		g.denied.Add(1)
		g.log.Warn("egress denied", "dest", dest)
		return dest, fmt.Errorf("egress to %s is not allowed for this sandbox (allowed: %s)", dest, g.allowList())
	}
	g.allowed.Add(1)
	g.log.Debug("egress allowed", "dest", dest)
	return dest, nil
}

func (g *Gate) allowList() string {
	if e := g.policy.Entries(); len(e) > 0 {
		return strings.Join(e, ", ")
	}
	return "none"
}

func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		g.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "codecell egress proxy: send absolute http:// URLs, or CONNECT for https", http.StatusBadRequest)
		return
	}
	dest, err := g.check(r.URL.Host, "80")
	if err != nil {
		// By hand, as for CONNECT, so the reason phrase carries the message.
		if c, _, herr := w.(http.Hijacker).Hijack(); herr == nil {
			reply(c, http.StatusForbidden, err)
			c.Close()
		}
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Host, pr.Out.Host = dest, pr.In.Host
		},
		Transport: &http.Transport{DialContext: g.dialer.DialContext, DisableKeepAlives: true,
			ResponseHeaderTimeout: 5 * time.Minute},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.failed.Add(1)
			http.Error(w, fmt.Sprintf("codecell: cannot reach %s: %v", dest, err), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// tunnel serves CONNECT: replies are written by hand so a denial's reason
// phrase, which clients such as pip print, says what happened.
func (g *Gate) tunnel(w http.ResponseWriter, r *http.Request) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if !g.track(client) {
		client.Close()
		return
	}
	defer g.untrack(client)
	dest, err := g.check(r.Host, "443")
	if err != nil {
		reply(client, http.StatusForbidden, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	upstream, err := g.dialer.DialContext(ctx, "tcp", dest)
	cancel()
	if err != nil {
		g.failed.Add(1)
		reply(client, http.StatusBadGateway, fmt.Errorf("cannot reach %s: %v", dest, err))
		return
	}
	if !g.track(upstream) {
		upstream.Close()
		return
	}
	defer g.untrack(upstream)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { pipe(upstream, buf.Reader); done <- struct{}{} }()
	go func() { pipe(client, upstream); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies until EOF, then half-closes dst so the peer sees the end.
func pipe(dst net.Conn, src io.Reader) {
	io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// reply writes a plain-text HTTP response on a hijacked connection.
func reply(c net.Conn, code int, err error) {
	msg := "codecell: " + err.Error()
	reason := strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	bw := bufio.NewWriter(c)
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Codecell-Egress: denied\r\nConnection: close\r\n\r\n%s\n",
		code, reason, len(msg)+1, msg)
	bw.Flush()
}
