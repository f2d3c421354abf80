package gateway

import (
	"context"
	"fmt"
	"github.com/flashgate/flashgate/sale/saletest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// buyAnswer is what one buyer was told.
type buyAnswer struct {
	code    int
	raw     string
	orderID string
}

// TestRedisFaults runs buyers through a faultProxy between the gateway and
// Redis: replies slower than a buy may wait, replies slow but in time, the
// reply of a script that ran lost to a reset (go-redis sends the call
// again), and a black hole. Half the buyers send an Idempotency-Key and,
// after a 503, send the same buy again once the fault is over, as a
// careful client does; the others buy once. Each buyer is a user of its
// own, under a per-user limit of 10, so that a reservation made twice
// shows as two orders of one user rather than as a refusal.
//
// Whatever the fault: every answer is 202 or 503 (invariant 7); every 202's
// order is in Redis, the buyer's (no 202 without a reservation); no buy is
// reserved twice (each user holds at most one order, a keyed buyer exactly
// the one its 202s name, byte for byte the same buyAnswer on a repeat); and the
// sale's ledger adds up (sold = units held = outbox units, one entry per
// order record). A 503 may still have reserved (Redis ran the script, the
// reply came too late): nothing was promised, and a keyed repeat gets that
// reservation's buyAnswer, not a second one.
func TestRedisFaults(t *testing.T) {
	timeout := config.Default().Redis.Timeout
	tests := []struct {
		name  string
		fault fault
		delay time.Duration
		pick  func(n int) bool
		// during checks the answers given under the fault, with the
		// fault still on.
		during func(t *testing.T, r *faultRun, answers []buyAnswer)
	}{
		{name: "replies slower than a buy waits", fault: slowReplies, delay: 3 * timeout,
			// No reply can arrive before its buy's deadline.
			during: func(t *testing.T, r *faultRun, answers []buyAnswer) { r.all503(t, answers) }},
		{name: "replies slow but in time", fault: slowReplies, delay: timeout / 10},
		{name: "reset after the script ran", fault: resetAfterScript, pick: func(n int) bool { return n%4 != 3 },
			during: func(t *testing.T, r *faultRun, answers []buyAnswer) {
				if n := r.proxy.resets.Load(); n == 0 {
					t.Fatal("no script call was reset after Redis ran it: the fault did not happen")
				} else {
					t.Logf("%d replies lost after the script ran", n)
				}
			}},
		{name: "black hole", fault: blackHole,
			during: func(t *testing.T, r *faultRun, answers []buyAnswer) {
				r.all503(t, answers)
				// Nothing reached Redis, so nothing was reserved.
				if sold := r.direct.HGet(context.Background(), r.g.keys.Meta(r.sale), "sold").Val(); sold != "0" {
					t.Errorf("sold %s during the black hole, want 0", sold)
				}
				// A scrape is bounded by the Redis timeout, and has no sale
				// totals it could not compute.
				if m := r.g.scrape(); len(m) == 0 {
					t.Error("an empty /metrics page")
				} else if _, ok := m["flashgate_sales"]; ok {
					t.Error("sale totals while Redis cannot buyAnswer")
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newFaultRun(t)
			r.proxy.set(tc.fault, tc.delay, tc.pick)
			answers := r.buyOnce()
			if tc.during != nil {
				tc.during(t, r, answers)
			}
			r.proxy.set(passThrough, 0, nil)
			final := r.repeatKeyed(answers)
			r.check(answers, final)
		})
	}
}

// faultRun is one sale's buyers through a faultProxy.
type faultRun struct {
	t      *testing.T
	proxy  *faultProxy
	g      *testGateway
	direct *redis.Client // to Redis itself, past the proxy
	sale   string
	keyed  int // buyers 0..keyed-1 send an Idempotency-Key; the others do not
	buyers int
}

func newFaultRun(t *testing.T) *faultRun {
	if localstack.Cluster() {
		// A cluster client learns the nodes' own addresses and would go
		// around a proxy of one of them.
		t.Skip("a proxy stands in front of one Redis, not a cluster")
	}
	proxy := newFaultProxy(t, localstack.RedisAddr)
	g := startGateway(t, func(c *config.Config) { c.Redis.Addrs = []string{proxy.addr()} })
	direct := redis.NewClient(&redis.Options{Addr: localstack.RedisAddr})
	t.Cleanup(func() { direct.Close() })
	r := &faultRun{t: t, proxy: proxy, g: g, direct: direct, sale: "fault", keyed: 40, buyers: 80}
	g.mustSale(r.sale, `{"stock":1000,"per_user_limit":10}`)
	if proxy.accepted.Load() == 0 {
		t.Fatal("the gateway reached Redis around the proxy: startGateway must build its Redis client from cfg.Redis.Addrs")
	}
	return r
}

func (r *faultRun) user(i int) string {
	if i < r.keyed {
		return fmt.Sprintf("k%d", i)
	}
	return fmt.Sprintf("n%d", i)
}

// buy sends buyer i's buy once.
func (r *faultRun) buy(i int) buyAnswer {
	var hdr map[string]string
	if i < r.keyed {
		hdr = map[string]string{"Idempotency-Key": fmt.Sprintf("key-%d", i)}
	}
	res := r.g.do("POST", r.g.base+"/v1/sales/"+r.sale+"/orders", `{"user_id":"`+r.user(i)+`","quantity":1}`, hdr)
	return buyAnswer{code: res.code, raw: string(res.raw), orderID: res.str("order_id")}
}

// buyOnce sends every buyer's buy at once and returns the answers.
func (r *faultRun) buyOnce() []buyAnswer {
	answers := make([]buyAnswer, r.buyers)
	saletest.Burst(r.buyers, r.buyers, func(i int) { answers[i] = r.buy(i) })
	for i, a := range answers {
		if a.code != 202 && a.code != 503 {
			r.t.Errorf("buyer %s under the fault: %d %s, want 202 or 503", r.user(i), a.code, a.raw)
		}
	}
	return answers
}

func (r *faultRun) all503(t *testing.T, answers []buyAnswer) {
	for i, a := range answers {
		if a.code != 503 || !strings.Contains(a.raw, `"unavailable"`) {
			t.Errorf("buyer %s: %d %s, want 503 unavailable", r.user(i), a.code, a.raw)
		}
	}
}

// repeatKeyed sends the keyed buyers' buys again, with the fault over:
// until an buyAnswer other than 503 for those that had a 503, once for the
// others. It returns the keyed buyers' final answers.
func (r *faultRun) repeatKeyed(first []buyAnswer) []buyAnswer {
	final := make([]buyAnswer, r.keyed)
	var wg sync.WaitGroup
	for i := range r.keyed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			a := r.buy(i)
			for a.code == 503 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				a = r.buy(i)
			}
			final[i] = a
		}()
	}
	wg.Wait()
	for i, a := range final {
		switch {
		case a.code != 202:
			r.t.Errorf("keyed buyer %s after the fault: %d %s, want 202", r.user(i), a.code, a.raw)
		case first[i].code == 202 && a.raw != first[i].raw:
			r.t.Errorf("keyed buyer %s: repeat answered %s, the first buyAnswer was %s", r.user(i), a.raw, first[i].raw)
		}
	}
	return final
}

// check holds Redis to the answers given.
func (r *faultRun) check(first, final []buyAnswer) {
	t := r.t
	t.Helper()
	ctx := context.Background()
	records, err := r.direct.HGetAll(ctx, r.g.keys.Orders(r.sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	held, err := r.direct.HGetAll(ctx, r.g.keys.Users(r.sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	orders := map[string][]string{} // user → order ids
	for id, v := range records {
		rec, err := scripts.ParseRecord(v)
		if err != nil || rec.Quantity != 1 {
			t.Errorf("order %s: record %q (%v)", id, v, err)
			continue
		}
		orders[rec.UserID] = append(orders[rec.UserID], id)
	}
	accepted := func(i int, a buyAnswer) {
		if a.code != 202 {
			return
		}
		if ids := orders[r.user(i)]; len(ids) != 1 || ids[0] != a.orderID {
			t.Errorf("buyer %s was answered 202 %s; Redis holds its orders %v", r.user(i), a.orderID, ids)
		}
	}
	orphans := 0
	for i := range r.buyers {
		u := r.user(i)
		if n := len(orders[u]); n > 1 {
			t.Errorf("buyer %s: %d orders %v from one buy", u, n, orders[u])
		}
		if want := itoa(len(orders[u])); len(orders[u]) > 0 && held[u] != want {
			t.Errorf("buyer %s holds %q units, has %s orders", u, held[u], want)
		}
		accepted(i, first[i])
		if i < r.keyed {
			accepted(i, final[i])
		} else if first[i].code == 503 && len(orders[u]) == 1 {
			orphans++
		}
		delete(orders, u)
	}
	for u, ids := range orders {
		t.Errorf("orders %v of a user %q no buyer was", ids, u)
	}
	sold := r.g.checkLedger(r.sale)
	codes := map[int]int{}
	for _, a := range first {
		codes[a.code]++
	}
	t.Logf("under the fault: %v; sold %d; %d unkeyed 503s had reserved", codes, sold, orphans)
}
