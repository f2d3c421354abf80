package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// Hostile connections from one address (idle ones, slowloris ones) while
// a buyer from another is served (listener_test.go's helpers).

// readAll reads one answer from each connection, all within deadline, and
// counts their statuses.
func readAll(conns []net.Conn, deadline time.Duration) map[string]int {
	end := time.Now().Add(deadline)
	out := map[string]int{}
	for _, c := range conns {
		a, err := readAnswer(c, bufio.NewReader(c), time.Until(end))
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			out["no answer in time"]++
		case err != nil:
			out["no answer: "+err.Error()]++
		case a.hdr.Get("Content-Type") != "application/json":
			out["not JSON: "+strconv.Itoa(a.code)]++
		default:
			out[a.status]++
		}
	}
	return out
}

// Issue 12's fault test: thousands of idle connections and a few hundred
// slowloris ones (a header byte every 100 ms, never finished) from one
// address, while a buyer from another is served and the process stays up.
// Each hostile connection is cut by http.read_timeout with a 408 in JSON.
func TestIdleAndSlowlorisFlood(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Both ends of every connection live in this process; leave room.
	idleN, slowN := 2000, 200
	if room := (int(lim.Cur) - 1000) / 2; idleN+slowN > room {
		idleN, slowN = max(room*10/11, 10), max(room/11, 1)
	}
	g := startGateway(t, func(c *config.Config) { c.HTTP.ReadTimeout = 2 * time.Second })
	g.mustSale("flood", `{"stock":100,"per_user_limit":100}`)

	idle := make([]net.Conn, 0, idleN)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range idleN {
		idle = append(idle, dialFrom(t, "127.0.0.1", g.srv.Addr()))
	}
	stopSlow := make(chan struct{})
	var slowWG sync.WaitGroup
	var slowCut atomic.Int64
	for i := range slowN {
		c := dialFrom(t, "127.0.0.1", g.srv.Addr())
		slowWG.Add(1)
		go func() {
			defer slowWG.Done()
			defer c.Close()
			msg := "POST /v1/sales/flood/orders HTTP/1.1\r\nHost: x\r\nX-Slow-" + strconv.Itoa(i) + ": "
			if _, err := io.WriteString(c, msg); err != nil {
				slowCut.Add(1)
				return
			}
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopSlow:
					return
				case <-tick.C:
				}
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write([]byte{'a'}); err != nil {
					slowCut.Add(1) // the server closed it
					return
				}
			}
		}()
	}
	defer func() {
		close(stopSlow)
		slowWG.Wait()
	}()

	buyer := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer buyer.CloseIdleConnections()
	for i := range 5 {
		res, err := buyer.Post(g.base+"/v1/sales/flood/orders", "application/json",
			strings.NewReader(`{"user_id":"buyer-`+strconv.Itoa(i)+`"}`))
		if err != nil {
			t.Fatalf("buyer during the flood: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 202 {
			t.Errorf("buyer during the flood: %d %s", res.StatusCode, body)
		}
	}
	if r := g.do("GET", g.base+"/healthz", "", nil); r.code != 200 {
		t.Errorf("/healthz during the flood: %d %s", r.code, r.raw)
	}

	// The idle connections are all cut by the read timeout, each with a
	// 408 in JSON; so are the slowloris ones, whose next byte then fails.
	statuses := readAll(idle, 30*time.Second)
	if statuses["request_timeout"] != idleN {
		t.Errorf("idle connections' answers: %v, want %d request_timeout", statuses, idleN)
	}
	for deadline := time.Now().Add(30 * time.Second); slowCut.Load() < int64(slowN) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := slowCut.Load(); n != int64(slowN) {
		t.Errorf("%d of %d slowloris connections cut by the server", n, slowN)
	}
	g.checkLedger("flood")
}
