package egress

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	p, err := Parse([]string{"pypi.org", "*.example.com:443", "10.1.2.3:8080", "192.168.0.0/16", "[::1]:9000", "Files.PythonHosted.org."})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		host string
		port int
		want bool
	}{
		{"name any port", "pypi.org", 8443, true},
		{"name is case-insensitive", "PyPI.org", 443, true},
		{"other name", "evil.org", 443, false},
		{"suffix is not the name", "notpypi.org", 443, false},
		{"subdomain of a plain name", "x.pypi.org", 443, false},
		{"wildcard subdomain", "a.b.example.com", 443, true},
		{"wildcard wrong port", "a.example.com", 80, false},
		{"wildcard excludes the apex", "example.com", 443, false},
		{"ip and port", "10.1.2.3", 8080, true},
		{"ip other port", "10.1.2.3", 8081, false},
		{"cidr", "192.168.7.9", 22, true},
		{"outside cidr", "192.169.0.1", 22, false},
		{"v6 bracketed", "[::1]", 9000, true},
		{"v6 other port", "::1", 9001, false},
		{"trailing dot entry", "files.pythonhosted.org", 443, true},
		{"ip rules do not match names", "localhost", 8080, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Allows(tc.host, tc.port); got != tc.want {
				t.Errorf("Allows(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
			}
		})
	}
	if (&Policy{}).Allows("pypi.org", 443) {
		t.Error("an empty policy allowed a host")
	}
}

func TestPolicyRejects(t *testing.T) {
	for _, e := range []string{"", "http://pypi.org", "pypi.org:0", "pypi.org:99999", "a..b", "-x.org", "*.", "host/path", "a b"} {
		if _, err := Parse([]string{e}); err == nil || !strings.Contains(err.Error(), "network.allow entry") {
			t.Errorf("Parse(%q) err = %v, want an error naming the entry", e, err)
		}
	}
}

// gate opens a gate allowing allow, and an HTTP client that uses it as proxy.
func gate(t *testing.T, allow ...string) (*Gate, *http.Client, string) {
	t.Helper()
	p, err := Parse(allow)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	g, err := Open(sock, "cc-test", p, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	dial := func(network, addr string) (net.Conn, error) { return net.Dial("unix", sock) }
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		Dial: dial, DisableKeepAlives: true}}
	return g, c, sock
}

func TestGatePlainHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello "+r.URL.Path) }))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	g, c, _ := gate(t, host)

	resp, err := c.Get(srv.URL + "/a")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello /a" {
		t.Fatalf("allowed GET = %d %q, want 200 \"hello /a\"", resp.StatusCode, body)
	}

	resp, err = c.Get("http://127.0.0.2:1/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "egress to 127.0.0.2:1 is not allowed for this sandbox (allowed: "+host+")") {
		t.Fatalf("denied GET = %d %q", resp.StatusCode, body)
	}
	if s := g.Stats(); s.Allowed != 1 || s.Denied != 1 {
		t.Fatalf("stats = %+v, want 1 allowed, 1 denied", s)
	}
}

func TestGateConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server that upper-cases one line
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, strings.ToUpper(line))
	}()
	g, _, sock := gate(t, ln.Addr().String())

	connect := func(dest string) (string, *bufio.Reader, net.Conn) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+dest+" HTTP/1.1\r\nHost: "+dest+"\r\n\r\n")
		br := bufio.NewReader(c)
		status, _ := br.ReadString('\n')
		return strings.TrimSpace(status), br, c
	}
	status, br, c := connect(ln.Addr().String())
	defer c.Close()
	if status != "HTTP/1.1 200 Connection established" {
		t.Fatalf("allowed CONNECT answered %q", status)
	}
	br.ReadString('\n') // blank line
	io.WriteString(c, "ping\n")
	if got, _ := br.ReadString('\n'); got != "PING\n" {
		t.Fatalf("through the tunnel got %q, want PING", got)
	}

	status, _, c2 := connect("example.org:443")
	defer c2.Close()
	want := "HTTP/1.1 403 codecell: egress to example.org:443 is not allowed for this sandbox (allowed: " + ln.Addr().String() + ")"
	if status != want {
		t.Fatalf("denied CONNECT answered %q, want %q", status, want)
	}
	if s := g.Stats(); s.Allowed != 1 || s.Denied != 1 {
		t.Fatalf("stats = %+v", s)
	}
}
