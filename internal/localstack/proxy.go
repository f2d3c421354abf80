package localstack

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards the TCP connections it accepts on a loopback port of its
// own to upstream, counts them, and cuts them all at once on demand, as a
// network failure would. Pointed at a port where nothing listens, it is a
// dead node that counts the attempts to reach it. Its methods are safe for
// concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

// NewProxy listens on 127.0.0.1:0 and forwards to upstream (host:port); the
// test's cleanup closes it and waits for its goroutines.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(func() {
		_ = p.ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr returns the proxy's address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted counts the connections accepted so far, forwarded or not.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		for _, pair := range [][2]net.Conn{{c, u}, {u, c}} {
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(pair[0], pair[1])
				_ = pair[0].Close()
				_ = pair[1].Close()
			}()
		}
	}
}

// Cut closes every connection through the proxy, both sides, and returns
// once they are closed: nothing sent after it reaches upstream. The proxy
// goes on accepting new connections.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
