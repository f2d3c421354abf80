package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// reserveSHA asks gateway g for the SHA of the reserve script it runs.
func reserveSHA(t *testing.T, g *gatewayProc) string {
	t.Helper()
	code, body, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "GET", "http://"+g.admin+"/admin/v1/scripts", "")
	if err != nil || code != 200 {
		t.Fatalf("GET /admin/v1/scripts: %d %s %v", code, body, err)
	}
	var v struct {
		Scripts []struct{ Name, SHA string }
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET /admin/v1/scripts: %s: %v", body, err)
	}
	for _, sc := range v.Scripts {
		if sc.Name == "reserve" && sc.SHA != "" {
			return sc.SHA
		}
	}
	t.Fatalf("no reserve script in %s", body)
	return ""
}

// replyCut is a TCP proxy between one gateway and Redis. Once told to
// drop, it still passes every command to Redis, and every reply back but
// those of the reserve script: Redis makes the reservations, the gateway
// never hears of them (it answers 503 once its Redis timeout passes, or
// dies first). It reads RESP both ways to pair each reply with its command.
type replyCut struct {
	ln      net.Listener
	target  string
	sha     string // of the reserve script; set before dropping is
	dropOn  atomic.Bool
	up, all sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	ids    map[string]bool // order ids of the reservations whose reply was dropped
	uppers []*upper        // the copiers towards Redis, which park can hold
}

// upper is one connection's copier towards Redis, as park sees it.
type upper struct {
	gw      net.Conn
	parking atomic.Bool   // a park is asked for: a read timeout means park
	parked  chan struct{} // the copier says it is parked
	resume  chan struct{} // the copier goes on
	done    chan struct{} // closed when the copier ends
}

// startReplyCut starts the proxy in front of the Redis at target. Its one
// address is one Redis to a gateway, which refuses a node of a Redis
// Cluster as such (errClusterNode), and a cluster's other nodes would be
// reached around it: on a cluster the test is skipped.
func startReplyCut(t *testing.T, target string) *replyCut {
	t.Helper()
	localstack.SingleRedisOnly(t, "a proxy in front of one Redis withholds its replies")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &replyCut{ln: ln, target: target, ids: map[string]bool{}}
	c.all.Add(1)
	go func() {
		defer c.all.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.pass(conn)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		c.mu.Lock()
		for _, conn := range c.conns {
			conn.Close()
		}
		c.mu.Unlock()
		c.all.Wait()
	})
	return c
}

func (c *replyCut) addr() string { return c.ln.Addr().String() }

// drop starts dropping the replies to the reserve script (its SHA), for good.
func (c *replyCut) drop(sha string) {
	c.sha = sha
	c.dropOn.Store(true) // publishes sha to the copiers, which load dropOn first
}

// pass relays one connection. The copier towards Redis queues, per
// command, whether to drop its reply, before it passes the command's last
// byte on: the reply cannot come back before its entry is queued.
func (c *replyCut) pass(gw net.Conn) {
	rd, err := net.Dial("tcp", c.target)
	if err != nil {
		gw.Close()
		return
	}
	c.mu.Lock()
	c.conns = append(c.conns, gw, rd)
	c.mu.Unlock()
	var qmu sync.Mutex
	var queue []bool // per command in flight, oldest first: drop its reply
	u := &upper{gw: gw, parked: make(chan struct{}, 1), resume: make(chan struct{}, 1), done: make(chan struct{})}
	c.mu.Lock()
	c.uppers = append(c.uppers, u)
	c.mu.Unlock()
	c.up.Add(1)
	c.all.Add(2)
	go func() {
		defer c.all.Done()
		defer c.up.Done()
		defer close(u.done)
		defer rd.Close()
		buf := make([]byte, 32<<10)
		var pend []byte
		for {
			n, err := gw.Read(buf)
			if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && u.parking.Load() {
				// Everything read so far has been written to Redis.
				u.parked <- struct{}{}
				<-u.resume
				continue
			}
			if n > 0 {
				pend = append(pend, buf[:n]...)
				for {
					args, used, ok := parseCommand(pend)
					if !ok {
						break
					}
					pend = pend[used:]
					d := c.dropOn.Load() && len(args) > 1 && strings.EqualFold(args[0], "evalsha") && args[1] == c.sha
					if d {
						c.note(args)
					}
					qmu.Lock()
					queue = append(queue, d)
					qmu.Unlock()
				}
				pend = append([]byte(nil), pend...)
				if _, err := rd.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer c.all.Done()
		defer gw.Close()
		buf := make([]byte, 32<<10)
		var pend []byte
		for {
			n, err := rd.Read(buf)
			if n > 0 {
				pend = append(pend, buf[:n]...)
				var out []byte
				for {
					end, ok := respEnd(pend, 0)
					if !ok {
						break
					}
					qmu.Lock()
					d := len(queue) > 0 && queue[0]
					if len(queue) > 0 { // none queued: a push, never dropped
						queue = queue[1:]
					}
					qmu.Unlock()
					if !d {
						out = append(out, pend[:end]...)
					}
					pend = pend[end:]
				}
				pend = append([]byte(nil), pend...)
				if len(out) > 0 {
					if _, err := gw.Write(out); err != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// note records the order ids of a reserve call (EVALSHA sha numkeys keys…
// sale ttl batch, the batch a line per reservation: order id, user,
// quantity and key index, tab-separated; lua/reserve.lua).
func (c *replyCut) note(args []string) {
	nk, err := strconv.Atoi(args[2])
	if err != nil || len(args) != 3+nk+3 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for line := range strings.Lines(args[3+nk+2]) {
		if id, _, ok := strings.Cut(line, "\t"); ok {
			c.ids[id] = true
		}
	}
}

// droppedIDs returns the order ids of the reservations whose reply was dropped.
func (c *replyCut) droppedIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.ids))
	for id := range c.ids {
		out = append(out, id)
	}
	return out
}

// waitForwarded waits until gateway g, sent SIGSTOP, is stopped, and all
// it sent through the proxy has been read by Redis: g's bytes read by the
// proxy (waitStoppedAndRead's check), each copier parked (between two
// reads: all it read, written), and the proxy's bytes read by Redis. A look
// at Redis after it sees everything g asked of Redis before it stopped. It
// fails the test when that is not so within 10 s.
func (c *replyCut) waitForwarded(t *testing.T, g *proc) {
	t.Helper()
	to := map[string]bool{c.addr(): true}
	redis := map[string]bool{c.target: true}
	var why string
	defer func() {
		if t.Failed() { // WaitFor failed: say what was left
			t.Logf("the last look: %s", why)
		}
	}()
	localstack.WaitFor(t, 10*time.Second, fmt.Sprintf("%s (pid %d) stopped, with what it sent read by Redis through the proxy", g.name, g.cmd.Process.Pid), func() bool {
		release := c.park(t)
		defer release()
		if why = sentUnread(g.cmd.Process.Pid, to); why == "" {
			why = unread(os.Getpid(), redis)
		}
		return why == ""
	})
}

// park holds every copier towards Redis between two reads, and returns
// the function that lets them go on. It fails the test when a copier does
// not park within 10 s.
func (c *replyCut) park(t *testing.T) (release func()) {
	t.Helper()
	c.mu.Lock()
	us := slices.Clone(c.uppers)
	c.mu.Unlock()
	var asked []*upper
	release = func() {
		for _, u := range asked {
			_ = u.gw.SetReadDeadline(time.Time{})
			u.parking.Store(false)
			select { // buffered: also for one that parks late
			case u.resume <- struct{}{}:
			default: // one that ended, asked before
			}
		}
	}
	for _, u := range us {
		u.parking.Store(true)
		_ = u.gw.SetReadDeadline(time.Now()) // the next read, or the one under way, times out
		asked = append(asked, u)
		select {
		case <-u.parked:
		case <-u.done:
		case <-time.After(10 * time.Second):
			release()
			t.Fatal("a copier of the proxy did not park")
		}
	}
	return release
}

// waitSent waits until the gateway's connections have all ended, so that
// what it sent has been passed on (its process is gone).
func (c *replyCut) waitSent(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.up.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the dead gateway's Redis connections did not end")
	}
}

// parseCommand reads one command (a RESP array of bulk strings, which is
// all a client sends) from the start of b: its arguments and its length,
// or false when b does not hold all of it yet.
func parseCommand(b []byte) ([]string, int, bool) {
	n, i, ok := respHeader(b, 0, '*')
	if !ok {
		return nil, 0, false
	}
	args := make([]string, 0, max(n, 0))
	for range n {
		l, j, ok := respHeader(b, i, '$')
		if !ok || j+l+2 > len(b) {
			return nil, 0, false
		}
		args = append(args, string(b[j:j+l]))
		i = j + l + 2
	}
	return args, i, true
}

// respHeader reads "<kind><number>\r\n" at b[i:]: the number and where the
// line ends.
func respHeader(b []byte, i int, kind byte) (int, int, bool) {
	if i >= len(b) || b[i] != kind {
		return 0, 0, false
	}
	e := bytes.Index(b[i:], []byte("\r\n"))
	if e < 0 {
		return 0, 0, false
	}
	n, err := strconv.Atoi(string(b[i+1 : i+e]))
	if err != nil {
		return 0, 0, false
	}
	return n, i + e + 2, true
}

// respEnd returns where the RESP2/RESP3 value that starts at b[i] ends, or
// false when b does not hold all of it yet.
func respEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	e := bytes.Index(b[i:], []byte("\r\n"))
	if e < 0 {
		return 0, false
	}
	next := i + e + 2
	switch b[i] {
	case '$', '!', '=': // bulk string, bulk error, verbatim string
		n, err := strconv.Atoi(string(b[i+1 : i+e]))
		if err != nil || n < 0 {
			return next, true
		}
		if next+n+2 > len(b) {
			return 0, false
		}
		return next + n + 2, true
	case '*', '~', '>', '%', '|': // array, set, push, map, attribute
		n, err := strconv.Atoi(string(b[i+1 : i+e]))
		if err != nil || n < 0 {
			return next, true
		}
		if b[i] == '%' || b[i] == '|' {
			n *= 2
		}
		for range n {
			var ok bool
			if next, ok = respEnd(b, next); !ok {
				return 0, false
			}
		}
		if b[i] == '|' { // an attribute comes before the value it describes
			return respEnd(b, next)
		}
		return next, true
	default: // simple string, error, integer, double, boolean, big number, null
		return next, true
	}
}
