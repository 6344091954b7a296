package agent

import (
	"fmt"
	"io"
	"net"
	"time"
)

// serveProxy carries each connection to listen on to the host's egress
// proxy at socket. The sandbox has no other way out: this only spares
// programs a unix-socket proxy, which none of them speak.
func serveProxy(listen, socket string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("egress proxy listener: %w", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // out of fds: let runs close some
				continue
			}
			go forward(c.(*net.TCPConn), socket)
		}
	}()
	return nil
}

func forward(c *net.TCPConn, socket string) {
	defer c.Close()
	up, err := net.Dial("unix", socket)
	if err != nil {
		// No gate: this sandbox was not given network access (or lost it).
		msg := "codecell: this sandbox has no network access; create it with \"network\": {\"allow\": [hosts]}\n"
		fmt.Fprintf(c, "HTTP/1.1 403 codecell: this sandbox has no network access\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(msg), msg)
		return
	}
	u := up.(*net.UnixConn)
	defer u.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		u.CloseWrite()
		close(done)
	}()
	io.Copy(c, u)
	c.CloseWrite()
	<-done
}
