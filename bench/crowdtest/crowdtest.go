// Package crowdtest is the crowd of buyers of the process tests: buyers
// that buy one sale or several through one gateway, several, or a load
// balancer, as careful clients do (a buy that gets no answer is sent again
// with the same Idempotency-Key, to the next gateway), and, with Room, the
// crowd of a waiting room (join, poll, buy with the ticket). Every 202 is
// recorded in the ledger of make bench (bench.Ledger), so that a test and
// a run judge the buyers' answers alike; a test then holds the accepted
// orders against MySQL and Redis. It is for tests only, as net/http's
// httptest is.
package crowdtest

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// Options configure a crowd. Bases and Sales are required.
type Options struct {
	// Bases are the base URLs (http://host:port) the buyers send to:
	// buyer u sends first to Bases[u%len], and a buy that gets no answer
	// goes on to the next one, as behind a load balancer. One base (a
	// gateway, or a load balancer) is sent to again.
	Bases []string
	// Sales: buyer u buys in Sales[u%len]. With SkipSoldOut, in the first
	// of them from there that has not answered sold_out; the buyers stop
	// once every one has.
	Sales       []string
	SkipSoldOut bool
	// Users is the number of buyers, Prefix+"0", Prefix+"1", …; below 0
	// there is no end but Stop. Prefix defaults to "u".
	Users  int
	Prefix string
	// Workers buy for each base at once (Room: for all bases); each
	// pauses Pause after a buyer's buys.
	Workers int
	Pause   time.Duration
	// Keys is each buyer's buys (default 1), of one unit each, each with
	// an Idempotency-Key of its own: "k-"+user for the first, then
	// "k-"+user+"-"+k.
	Keys int
	// Replay sends every 202 again, with its key, to the next base: it
	// must come back byte for byte.
	Replay bool
	// Again reports whether an answer counts as none: the request is sent
	// again, with the same key, to the next base, 20 ms later. A request
	// with no answer at all (refused, reset, timeout) always is. Default
	// Retry503.
	Again func(code int) bool
	// Final are the answers a buy may end with besides a 202: "sold_out"
	// (410), "limit_reached" (409), "rate_limited" (any 429: a balancer
	// may give it itself). Default all three. Anything else fails the
	// test.
	Final []string
	// Limit, when not 0, is the sales' per_user_limit: 202s adding up to
	// more for one buyer fail the test.
	Limit int64
	// Deadline is when the buyers give up, failing the test; default
	// three minutes. Finish carries a buy begun before Stop on to its
	// answer, until the deadline; without it, Stop abandons it.
	Deadline time.Duration
	Finish   bool
	// Timeout is each request's; default 5 s.
	Timeout time.Duration
	// Room makes it a waiting room's crowd (room.go).
	Room *Room
}

// Retry503 is Options.Again for a gateway: a 503 is sent again.
func Retry503(code int) bool { return code == 503 }

// Retry503or429 sends a 503 and a 429 again.
func Retry503or429(code int) bool { return code == 503 || code == 429 }

// Retry5xx sends any answer of 500 or more again (a load balancer's 502
// and 504 included).
func Retry5xx(code int) bool { return code >= 500 }

// Retry5xxor429 sends any answer of 500 or more, and a 429, again.
func Retry5xxor429(code int) bool { return code >= 500 || code == 429 }

// Crowd is a crowd of buyers started by Start. Its methods are safe for
// concurrent use.
type Crowd struct {
	t      *testing.T
	o      Options
	tr     *http.Transport
	client *http.Client
	ledger *bench.Ledger
	// deadline ends the buyers (a failure); stop ends them at the test's
	// wish, and on cleanup.
	deadline context.Context
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	room     *room // nil unless Options.Room

	mu       sync.Mutex
	accepted map[string]map[string]string // sale → order id → user
	soldOut  map[string]bool
	codes    map[string]int // final answers, "what code status" → count
	seen     map[int]int    // every answer, those sent again included
	bad      []string

	n202      atomic.Int64
	noAnswer  atomic.Int64   // requests without any answer
	failovers atomic.Int64   // buys answered by another base than their first
	served    []atomic.Int64 // 202s per base
}

// Start starts the crowd and returns at once. When the test ends the
// buyers stop and the crowd waits for them.
func Start(t *testing.T, o Options) *Crowd {
	t.Helper()
	if len(o.Bases) == 0 || len(o.Sales) == 0 || o.Workers < 1 {
		t.Fatalf("crowdtest: %d bases, %d sales, %d workers", len(o.Bases), len(o.Sales), o.Workers)
	}
	if o.Prefix == "" {
		o.Prefix = "u"
	}
	if o.Keys == 0 {
		o.Keys = 1
	}
	if o.Again == nil {
		o.Again = Retry503
	}
	if o.Final == nil {
		o.Final = []string{"sold_out", "limit_reached", "rate_limited"}
	}
	if o.Deadline == 0 {
		o.Deadline = 3 * time.Minute
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c := &Crowd{t: t, o: o, ledger: bench.NewLedger(), stop: make(chan struct{}),
		accepted: map[string]map[string]string{}, soldOut: map[string]bool{}, codes: map[string]int{}, seen: map[int]int{},
		served: make([]atomic.Int64, len(o.Bases))}
	c.tr = &http.Transport{MaxIdleConnsPerHost: 2 * o.Workers}
	c.client = &http.Client{Timeout: o.Timeout, Transport: c.tr}
	for _, sale := range o.Sales {
		c.accepted[sale] = map[string]string{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Deadline)
	c.deadline = ctx
	if o.Room != nil {
		c.startRoom()
	} else {
		c.startBuyers()
	}
	go func() { c.wg.Wait(); cancel() }()
	t.Cleanup(func() {
		c.Stop()
		cancel()
		c.tr.CloseIdleConnections()
	})
	return c
}

func (c *Crowd) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, msg)
}

// Stop stops the buyers and waits for them; a buy in flight gets its
// answer, and is counted (with Finish, one being sent again too). It is
// safe to call twice.
func (c *Crowd) Stop() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// Wait waits for the buyers to run out of buyers (or of open sales).
func (c *Crowd) Wait() { c.wg.Wait() }

// N202 is the 202s so far.
func (c *Crowd) N202() int64 { return c.n202.Load() }

// Failovers is the buys answered by another base than their first.
func (c *Crowd) Failovers() int64 { return c.failovers.Load() }

// WaitAccepted waits until n buys have been accepted in all; an answer no
// buyer should get fails the test at once.
func (c *Crowd) WaitAccepted(n int64, timeout time.Duration) {
	c.t.Helper()
	localstack.WaitFor(c.t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool {
		c.mu.Lock()
		bad := len(c.bad)
		c.mu.Unlock()
		return bad > 0 || c.n202.Load() >= n
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failIfBadLocked()
}

func (c *Crowd) failIfBadLocked() {
	c.t.Helper()
	if len(c.bad) > 0 {
		c.t.Fatalf("%d unexpected answers, first ones: %q", len(c.bad), c.bad[:min(len(c.bad), 10)])
	}
}

// Check fails the test on any answer a buyer should never get, a buyer
// given up at the deadline, and a fault of the ledger (an order id given
// for two keys or buyers, a key answered with two orders, a buyer's 202s
// over Options.Limit); with Room, on the room's checks too (room.go). It
// logs the answers and returns the accepted orders, sale → order id →
// buyer.
func (c *Crowd) Check() map[string]map[string]string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failIfBadLocked()
	f, replays := c.ledger.Figures(c.o.Limit)
	if f.DupOrderIDs > 0 || f.IdemReserved > 0 || (c.o.Limit > 0 && f.UsersOverLimit > 0) {
		c.t.Fatalf("202s: %d order ids given twice, %d keys answered with two orders, %d buyers over the limit %d",
			f.DupOrderIDs, f.IdemReserved, f.UsersOverLimit, c.o.Limit)
	}
	if c.room != nil {
		c.room.checkLocked(c)
	}
	var fivexx int
	for code, n := range c.seen {
		if code >= 500 {
			fivexx += n
		}
	}
	keys := slices.Sorted(maps.Keys(c.codes))
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s: %d; ", k, c.codes[k])
	}
	c.t.Logf("answers %severy answer %v (%d 5xx), %d requests without an answer, %d answered by another base than their first, 202s per base %v, %d replays of a key%s",
		sb.String(), c.seen, fivexx, c.noAnswer.Load(), c.failovers.Load(), c.servedLocked(), replays, c.room.summary())
	out := make(map[string]map[string]string, len(c.accepted))
	for sale, m := range c.accepted {
		out[sale] = maps.Clone(m)
	}
	return out
}

// Accepted returns the sale's accepted orders so far, order id → buyer.
func (c *Crowd) Accepted(sale string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.accepted[sale])
}

// ServedBy returns the 202s each base gave.
func (c *Crowd) ServedBy() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servedLocked()
}

func (c *Crowd) servedLocked() []int64 {
	out := make([]int64, len(c.served))
	for i := range c.served {
		out[i] = c.served[i].Load()
	}
	return out
}

// FiveXX returns the answers of 500 or more the buyers saw, by code.
func (c *Crowd) FiveXX() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]int{}
	for code, n := range c.seen {
		if code >= 500 {
			out[code] = n
		}
	}
	return out
}
