package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
)

// A bucketed sale (buckets_test.go) under a burst of buyers while an
// admin locks it or the script cache is lost: the buckets still sell as
// one sale, and its records add up (checkBuckets).

// A lock of a bucketed sale applies to every bucket by the time the call
// returns: no buy sent after it is accepted, each answers locked; after an
// unlock buys go on.
func TestBucketLockDuringBurst(t *testing.T) {
	g := startGateway(t)
	const sale = "block"
	g.mustSale(sale, `{"stock":100000,"per_user_limit":1000,"buckets":3}`)
	var lockedAt, unlocked atomic.Bool
	var late, accepted atomic.Int64
	var mu sync.Mutex
	lateAnswers := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sentAfterLock := lockedAt.Load() && !unlocked.Load()
				r := g.buy(sale, fmt.Sprintf("w%d-%d", w, i%500), 1, "")
				if r.code == 202 {
					accepted.Add(1)
				}
				// A buy sent after the lock returned and answered before the
				// unlock was sent must be locked.
				if sentAfterLock && !unlocked.Load() {
					mu.Lock()
					lateAnswers[fmt.Sprintf("%d %s", r.code, r.status())]++
					mu.Unlock()
					if r.code == 202 {
						late.Add(1)
					}
				}
			}
		}(w)
	}
	localstack.WaitFor(t, 20*time.Second, "some accepts before the lock", func() bool { return accepted.Load() > 300 })
	if r := g.adminPost(sale, "lock", ""); r.code != 200 || r.body["locked"] != true {
		t.Fatalf("lock: %d %s", r.code, r.raw)
	}
	lockedAt.Store(true)
	for i, lane := range saletest.BucketNames(t, g.rdb, g.keys, sale) {
		if v := g.rdb.HGet(context.Background(), g.keys.Meta(lane), "locked").Val(); v != "1" {
			t.Errorf("bucket %d not locked when the lock returned: %q", i, v)
		}
	}
	soldAtLock := g.view(sale).num("sold")
	localstack.WaitFor(t, 20*time.Second, "buys against the lock", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range lateAnswers {
			n += c
		}
		return n > 500
	})
	if sold := g.view(sale).num("sold"); sold != soldAtLock {
		t.Errorf("sold moved from %d to %d while locked", soldAtLock, sold)
	}
	unlocked.Store(true)
	if r := g.adminPost(sale, "unlock", ""); r.code != 200 || r.body["locked"] != false {
		t.Fatalf("unlock: %d %s", r.code, r.raw)
	}
	before := accepted.Load()
	localstack.WaitFor(t, 20*time.Second, "accepts after unlock", func() bool { return accepted.Load() > before+300 })
	close(stop)
	wg.Wait()
	if n := late.Load(); n > 0 {
		t.Errorf("%d buys sent after the lock returned were accepted", n)
	}
	mu.Lock()
	for answer, n := range lateAnswers {
		if answer != "423 locked" {
			t.Errorf("%d buys sent while locked answered %s (%v)", n, answer, lateAnswers)
		}
	}
	mu.Unlock()
	l := checkBuckets(t, g, sale)
	if l.Sold() != accepted.Load() {
		t.Errorf("sold %d, %d accepted", l.Sold(), accepted.Load())
	}
}

// The script cache lost on every primary (the one Redis) again and again
// during a burst on a bucketed sale, the move script's two halves among
// the calls that meet NOSCRIPT: no oversell, no 5xx but 503, and the
// records add up; the sale then sells out exactly.
func TestBucketScriptFlushDuringBurst(t *testing.T) {
	g := startGateway(t, onOwnRedis(t))
	const sale, stock = "bflush", 300
	g.mustSale(sale, `{"stock":300,"per_user_limit":1,"buckets":3}`)
	before := g.loader.Stats().NoScript
	stopFlushing := flushScriptsMeanwhile(t, g)
	o := newOutcomes()
	saletest.Burst(4*stock, 64, func(i int) {
		user := "s" + itoa(i)
		o.add(t, g.buy(sale, user, 1, ""), user)
	})
	stopFlushing()
	var unavailable int
	for _, a := range o.fivexx {
		if !strings.HasPrefix(a, "503 ") {
			t.Errorf("a 5xx other than 503: %s", a)
		}
		unavailable++
	}
	for status := range o.byStatus {
		if status != "accepted" && status != "sold_out" && status != "unavailable" {
			t.Errorf("answers %v", o.byStatus)
		}
	}
	// A 503 promised nothing, but may have been sold (a reply lost) and may
	// have left units in a move record for the settling pass: sell what is
	// left, as a crowd that keeps coming would.
	// Rounds of 32 buyers at once (one at a time, a slow machine sold a
	// few a second and did not finish in time), until one hears sold out.
	drained := 0
	localstack.WaitFor(t, 60*time.Second, "the rest of the sale to sell", func() bool {
		var soldOut atomic.Bool
		first := drained
		saletest.Burst(32, 32, func(i int) {
			user := "d" + itoa(first+i)
			r := g.buy(sale, user, 1, "")
			o.add(t, r, user)
			if r.code == 410 {
				soldOut.Store(true)
			}
		})
		drained += 32
		return soldOut.Load()
	})
	l := checkBuckets(t, g, sale)
	_, units := o.accepted()
	if l.Sold() != stock || units > stock || unavailable == 0 && units != stock {
		t.Errorf("sold %d, accepted %d (%d answers 503), stock %d", l.Sold(), units, unavailable, stock)
	}
	if g.loader.Stats().NoScript == before {
		t.Errorf("no NOSCRIPT was met: the test did not exercise the reload path")
	}
	t.Logf("%d NOSCRIPT answers, %d 503, %d buys after the burst", g.loader.Stats().NoScript-before, unavailable, drained)
}
