package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// SIGTERM under load: /readyz fails at once, buys go on being served during
// the drain delay, no answer is a 5xx of the gateway's own, and the process
// exits 0 within its shutdown deadline.
func TestDrainOnSIGTERM(t *testing.T) {
	p := soloGateway(t, "FLASHGATE_DRAIN_DELAY=1s", "FLASHGATE_SHUTDOWN_TIMEOUT=10s")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer c.CloseIdleConnections()
	if code, body, err := httpDo(c, "PUT", "http://"+p.admin+"/admin/v1/sales/drain", `{"stock":100000000,"per_user_limit":1000000}`); err != nil || code != 201 {
		t.Fatalf("create sale: %d %s %v", code, body, err)
	}

	var (
		termSent      atomic.Bool
		acceptedAfter atomic.Int64 // 202s of buys sent after SIGTERM
		accepted      atomic.Int64
		fiveXX        atomic.Int64
		mu            sync.Mutex
		first5xx      string
		stop          = make(chan struct{})
		wg            sync.WaitGroup
	)
	// The buyers stop when the gateway has exited, or when the test
	// fails before.
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				after := termSent.Load()
				code, body, err := httpDo(c, "POST", "http://"+p.public+"/v1/sales/drain/orders",
					fmt.Sprintf(`{"user_id":"w%d-%d"}`, w, i%1000))
				if err != nil {
					// The listener closed: the client goes elsewhere. Not an answer.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if code == 202 {
					accepted.Add(1)
					if after {
						acceptedAfter.Add(1)
					}
				}
				if code >= 500 {
					fiveXX.Add(1)
					mu.Lock()
					if first5xx == "" {
						first5xx = fmt.Sprintf("%d %s", code, body)
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	localstack.WaitFor(t, 20*time.Second, "500 buys accepted before SIGTERM", func() bool { return accepted.Load() >= 500 })
	termSent.Store(true)
	p.signal(t, syscall.SIGTERM)

	// /readyz fails while buys are still served.
	var readyFailed bool
	for i := 0; i < 100 && !readyFailed; i++ {
		code, body, err := httpDo(c, "GET", "http://"+p.public+"/readyz", "")
		if err == nil && code == 503 {
			readyFailed = body == `{"status":"draining"}`
		}
		time.Sleep(5 * time.Millisecond)
	}
	// While draining, answers carry Connection: close, so that keep-alive
	// clients reconnect to a gateway that stays.
	var closeSeen bool
	for i := 0; i < 50 && !closeSeen; i++ {
		res, err := c.Post("http://"+p.public+"/v1/sales/drain/orders", "application/json",
			strings.NewReader(`{"user_id":"closer"}`))
		if err != nil {
			break // the listener has closed
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		closeSeen = res.Close
	}
	code := p.waitExit(t, 15*time.Second)
	halt()

	if code != 0 {
		t.Errorf("exit code %d after SIGTERM\n%s", code, p.out)
	}
	if !readyFailed {
		t.Errorf("/readyz never answered 503 draining after SIGTERM")
	}
	if n := fiveXX.Load(); n > 0 {
		t.Errorf("%d answers were 5xx, first: %s", n, first5xx)
	}
	if !closeSeen {
		t.Errorf("no answer during the drain carried Connection: close")
	}
	if acceptedAfter.Load() == 0 {
		t.Errorf("no buy sent after SIGTERM was served: the gateway stopped serving before the drain delay")
	}
	t.Logf("%d accepted, %d of them sent after SIGTERM", accepted.Load(), acceptedAfter.Load())
}

// SIGHUP reloads the scripts, as POST /admin/v1/scripts/reload does.
func TestSIGHUPReloadsScripts(t *testing.T) {
	p := soloGateway(t)
	reloads := func() float64 {
		return scrapeURL(t, "http://"+p.admin+"/metrics")["flashgate_script_reloads_total"]
	}
	before := reloads()
	if before < 1 {
		t.Fatalf("scripts were never loaded: %v reloads", before)
	}
	p.signal(t, syscall.SIGHUP)
	localstack.WaitFor(t, 10*time.Second, fmt.Sprintf("one reload after SIGHUP (%v before)", before), func() bool { return reloads() == before+1 })
	if code, body, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "GET", "http://"+p.public+"/readyz", ""); err != nil || code != 200 {
		t.Errorf("readyz after SIGHUP: %d %s %v", code, body, err)
	}
}
