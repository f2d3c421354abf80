package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fault is what a faultProxy does to the traffic between a gateway and
// Redis.
type fault int

const (
	passThrough fault = iota
	// slowReplies holds every chunk of Redis's replies for the proxy's
	// delay before passing it on: Redis has run the command, the client
	// waits.
	slowReplies
	// resetAfterScript lets the script calls (EVALSHA) that pick chooses
	// reach Redis, waits until Redis has begun to answer (so the script
	// has run), drops the answer and resets the client's connection: the
	// reply that go-redis retries after.
	resetAfterScript
	// blackHole drops every connection it has and holds new ones open
	// without a byte either way, as a dead or partitioned Redis does.
	blackHole
)

// faultProxy is a TCP proxy between a gateway and Redis that injects a
// fault. It reads the client's side as RESP commands (go-redis sends
// arrays of bulk strings), so that it knows where a script call ends. It
// is safe for concurrent use; it stops when the test ends.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	fault fault
	delay time.Duration
	pick  func(n int) bool // resetAfterScript: which script calls (from 0) to reset
	calls int              // script calls seen under resetAfterScript
	conns map[net.Conn]struct{}
	shut  bool // closing: no new connection is relayed or held

	resets   atomic.Int64 // replies dropped after Redis ran the script
	accepted atomic.Int64 // connections accepted
	wg       sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

// set switches to fault f from now on. Entering or leaving blackHole drops
// the connections the proxy has: those it relayed, then those it held.
func (p *faultProxy) set(f fault, delay time.Duration, pick func(int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if (f == blackHole) != (p.fault == blackHole) {
		p.dropLocked()
	}
	p.fault, p.delay, p.pick, p.calls = f, delay, pick, 0
}

func (p *faultProxy) dropLocked() {
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.shut = true
	p.dropLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

// track remembers c, so that a black hole or the end of the test closes
// it, and returns the fault in force; once the proxy is closing it closes
// c instead and returns ok false.
func (p *faultProxy) track(c net.Conn) (f fault, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		c.Close()
		return 0, false
	}
	p.conns[c] = struct{}{}
	return p.fault, true
}

func (p *faultProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		f, ok := p.track(c)
		if !ok {
			return
		}
		if f == blackHole {
			continue // say nothing; closed by the next set or the cleanup
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.forget(c)
			c.Close()
			continue
		}
		if _, ok := p.track(up); !ok {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c, up)
	}
}

// serve relays one connection: commands one way, replies the other.
func (p *faultProxy) serve(c, up net.Conn) {
	defer p.wg.Done()
	var doomed atomic.Bool // the last command sent is a script call whose reply is to be lost
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if doomed.Load() {
					// Redis answered, so it ran the script: the client
					// never hears of it.
					p.resets.Add(1)
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0) // a reset, not a clean close
					}
					break
				}
				p.mu.Lock()
				delay := p.delay
				slow := p.fault == slowReplies
				p.mu.Unlock()
				if slow {
					time.Sleep(delay)
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.Close()
		up.Close()
	}()
	r := bufio.NewReader(c)
	for {
		cmd, name, err := readCommand(r)
		if err != nil {
			break
		}
		if name == "evalsha" && p.doom() {
			doomed.Store(true)
			_, _ = up.Write(cmd)
			break // the client sends nothing more before its reply
		}
		if _, err := up.Write(cmd); err != nil {
			break
		}
	}
	if !doomed.Load() {
		c.Close()
		up.Close()
	}
	<-done
	p.forget(c, up)
}

// doom counts a script call and reports whether its reply is to be lost.
func (p *faultProxy) doom() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault != resetAfterScript {
		return false
	}
	n := p.calls
	p.calls++
	return p.pick == nil || p.pick(n)
}

var errRESP = errors.New("not a RESP array of bulk strings")

// readCommand reads one RESP command (*N then N bulk strings) and returns
// its bytes as sent and its name in lower case.
func readCommand(r *bufio.Reader) (raw []byte, name string, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, "", err
	}
	if len(line) < 4 || line[0] != '*' {
		return nil, "", errRESP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
	if err != nil {
		return nil, "", errRESP
	}
	raw = append(raw, line...)
	for i := range n {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, "", err
		}
		if len(line) < 4 || line[0] != '$' {
			return nil, "", errRESP
		}
		size, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
		if err != nil || size < 0 {
			return nil, "", errRESP
		}
		raw = append(raw, line...)
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return nil, "", err
		}
		if i == 0 {
			name = strings.ToLower(string(raw[start : start+size]))
		}
	}
	return raw, name, nil
}
