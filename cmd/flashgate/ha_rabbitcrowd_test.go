package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// rabbitAnswer is one answer a buyer got, 429s included.
type rabbitAnswer struct {
	sale, user, orderID string
	code                int
	status              string
	at                  time.Time
}

// rabbitCrowd buys across gateways and sales, one unit per buyer and
// Idempotency-Key, recording every answer. Unlike haCrowd it retries no
// 503: with Redis healthy every 5xx is a failure. A 429 is retried with
// the same key, as a client does; a buy without an answer is retried too,
// and counted as a failure (the gateways are never touched). Every eighth
// buyer repeats its accepted buy on the other gateway and must get the
// same response, byte for byte.
type rabbitCrowd struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	answers []rabbitAnswer
	codes   map[int]int
	bad     []string
	nBad    int
}

func startRabbitCrowd(t *testing.T, gws []*gatewayProc, sales []string, workers int) *rabbitCrowd {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c := &rabbitCrowd{t: t, ctx: ctx, cancel: cancel, codes: map[int]int{}}
	t.Cleanup(c.stop)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for w := range workers {
		c.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for n := 0; ctx.Err() == nil; n++ {
				sale := sales[rng.IntN(len(sales))]
				user := fmt.Sprintf("w%d-u%d", w, n)
				g := rng.IntN(len(gws))
				body, ok := c.buy(hc, gws[g], sale, user)
				if ok && n%8 == 0 {
					c.replay(hc, gws[(g+1)%len(gws)], sale, user, body)
				}
				time.Sleep(5 * time.Millisecond) // a steady load, not a flood of MySQL rows
			}
		})
	}
	return c
}

// buy sends one buyer's request until an answer other than 429 comes (or
// the crowd stops), with the same key, and reports the 202's body.
func (c *rabbitCrowd) buy(hc *http.Client, g *gatewayProc, sale, user string) (string, bool) {
	for c.ctx.Err() == nil {
		code, id, body, err := crowdtest.Buy(hc, "http://"+g.public, sale, user)
		now := time.Now()
		if err != nil {
			c.fail(fmt.Sprintf("sale %s user %s on %s: no answer: %v", sale, user, g.public, err))
			time.Sleep(20 * time.Millisecond)
			continue
		}
		status := statusOf(body)
		c.record(rabbitAnswer{sale: sale, user: user, orderID: id, code: code, status: status, at: now})
		switch {
		case code == 202 && id != "":
			return body, true
		case code == 429:
			time.Sleep(20 * time.Millisecond)
			continue
		case code == 410 && status == "sold_out", code == 409 && status == "limit_reached":
			return "", false
		default:
			c.fail(fmt.Sprintf("sale %s user %s on %s: %d %s", sale, user, g.public, code, body))
			return "", false
		}
	}
	return "", false
}

// replay repeats an accepted buy with its key: the first response again.
func (c *rabbitCrowd) replay(hc *http.Client, g *gatewayProc, sale, user, first string) {
	for c.ctx.Err() == nil {
		code, _, body, err := crowdtest.Buy(hc, "http://"+g.public, sale, user)
		if err != nil {
			c.fail(fmt.Sprintf("replay sale %s user %s on %s: no answer: %v", sale, user, g.public, err))
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if code == 429 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if code != 202 || body != first {
			c.fail(fmt.Sprintf("replay sale %s user %s on %s: %d %s, first %s", sale, user, g.public, code, body, first))
		}
		return
	}
}

func (c *rabbitCrowd) record(a rabbitAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers = append(c.answers, a)
	c.codes[a.code]++
}

func (c *rabbitCrowd) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nBad++
	if len(c.bad) < 10 {
		c.bad = append(c.bad, msg)
	}
}

func (c *rabbitCrowd) stop() { c.cancel(); c.wg.Wait() }

// acceptedAfter returns the order id of a 202 answered after t.
func (c *rabbitCrowd) acceptedAfter(t time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range slices.Backward(c.answers) {
		if !a.at.After(t) {
			break
		}
		if a.code == 202 {
			return a.orderID, true
		}
	}
	return "", false
}

// waitAccepted waits (30 s at most) for a 202 answered after t and
// returns its order id.
func (c *rabbitCrowd) waitAccepted(t time.Time, what string) string {
	c.t.Helper()
	var id string
	localstack.WaitFor(c.t, 30*time.Second, what, func() bool {
		var ok bool
		id, ok = c.acceptedAfter(t)
		return ok
	})
	return id
}

// check fails the test on any answer outside the contract, a 5xx above
// all, and returns every answer, once the crowd has stopped.
func (c *rabbitCrowd) check() []rabbitAnswer {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	fivexx := 0
	for code, n := range c.codes {
		if code >= 500 {
			fivexx += n
		}
	}
	c.t.Logf("answers to buyers %v (%d 5xx), %d outside the contract", c.codes, fivexx, c.nBad)
	if c.nBad > 0 || fivexx > 0 {
		c.t.Fatalf("%d answers outside the contract (%d 5xx), first ones: %q", c.nBad, fivexx, c.bad)
	}
	return c.answers
}
