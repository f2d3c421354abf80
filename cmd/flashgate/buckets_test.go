package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/salerows"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/retry"
)

// Sales of several buckets (API.md "buckets", sale/buckets.go) through
// the whole pipeline: buyers spread over the buckets of one sale, each
// bucket's outbox relayed on its own, MySQL seeing orders of the sale. On
// a Redis Cluster (make test-cluster) the buckets are on three primaries.

// bucketCount is the buckets of the sales of these tests.
const bucketCount = 3

// TestBucketsPipelineBurst guards invariants 1 and 3 for a sale of three
// buckets: a burst through gateway, relay, RabbitMQ, two consumers and
// MySQL sells exactly the stock; MySQL holds exactly the accepted orders,
// each once, all of the sale, each with the suffix of the bucket that holds
// it and every bucket with some; the admin view's sold is MySQL's units;
// the stock the home handed out is all in the buckets; reconcile finds no
// drift, and finds a bucket's sold changed by hand.
func TestBucketsPipelineBurst(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	const sale, stock = "bburst", 3000
	lanes := s.createBucketSale(g, sale, stock)

	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{sale}, Workers: 64, Users: 4000})
	b.Wait()
	accepted := b.Check()[sale]
	if len(accepted) != stock {
		t.Fatalf("%d buys accepted, want %d (the stock)", len(accepted), stock)
	}
	s.waitBucketsDrained(sale, lanes, 2*time.Minute)
	units := s.checkBucketRows(sale, lanes, accepted)
	if units != stock {
		t.Fatalf("MySQL holds %d units, want %d (the stock)", units, stock)
	}
	s.checkBucketView(g, sale, stock, units)
	s.waitMovesSettled(lanes, 30*time.Second)
	s.checkStockConserved(sale, lanes, stock)
	s.checkNoDrift(sale)

	// A bucket's sold changed by hand: reconcile must say so, exit 3.
	if err := s.rdb.HIncrBy(context.Background(), s.keys.Meta(lanes[1]), "sold", 1).Err(); err != nil {
		t.Fatal(err)
	}
	out, code := s.reconcile(sale, 0)
	if code != 3 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, fmt.Sprintf("sold %d", stock+1)) {
		t.Fatalf("reconcile after a bucket's sold was changed: exit %d\n%s", code, out)
	}
	t.Logf("reconcile on a bucket's sold changed by hand:\n%s", out)
}

// TestBucketsGatewayKill9 guards invariants 3, 6 and 10 for a sale of three
// buckets, with two gateways (A, B) and three consumers on one stack and
// the burst split across both gateways: A is killed (SIGKILL) mid-burst at
// a moment when its relay holds entries of the buckets' outboxes, and its
// buyers carry on through B with the same Idempotency-Keys. B's relay
// claims what A's held; in the end MySQL holds every 202 exactly once and
// nothing else, no more than the stock; and once B's settling pass has run,
// no move of stock is left half done (A may have died between the two
// halves of one) and the stock is conserved: pool + the buckets' unsold
// stock + sold = stock.
func TestBucketsGatewayKill9(t *testing.T) {
	s := newStack(t)
	ga, gb := s.startGateway(nil), s.startGateway(nil)
	startScaleConsumers(t, s, 3)
	const sale, stock, users = "bkill", 1500, 2400
	lanes := s.createBucketSale(gb, sale, stock)

	// Paced, so that the sale sells for seconds: the kill must find relay A
	// at work with much of the burst still to come.
	// Buyer u sends its one buy to gateway u%2 first, and on no answer
	// (none, 503, 429) to the other with the same key.
	c := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + ga.public, "http://" + gb.public}, Sales: []string{sale},
		Users: users, Workers: 32, Pause: 100 * time.Millisecond, Again: crowdtest.Retry503or429, Final: []string{"sold_out"}})
	c.WaitAccepted(stock/5, time.Minute)
	held, left := killHolding(t, s, ga, lanes, c, stock/2, stock*9/10)
	at := c.N202()
	t.Logf("gateway A killed after %d buys accepted, its relay holding %d outbox entries, its moves half done %v",
		at, held, left)

	c.Wait()
	accepted := c.Check()[sale]
	if c.N202() == at {
		t.Fatal("no buy accepted after the kill: the burst was over before it")
	}
	if c.Failovers() == 0 {
		t.Fatal("no buy sent to gateway A was answered by gateway B")
	}
	for i, n := range c.ServedBy() {
		if n == 0 {
			t.Fatalf("gateway %d accepted no buy", i)
		}
	}
	if len(accepted) > stock {
		t.Fatalf("%d buys accepted, stock %d", len(accepted), stock)
	}

	s.waitBucketsDrained(sale, lanes, 2*time.Minute)
	// Invariant 6: the dead relay's entries were taken by the living one.
	// It alone can have removed them (an entry pending for a consumer goes
	// to another only through XAUTOCLAIM), and nothing is pending now.
	ctx := context.Background()
	for _, lane := range lanes {
		p, err := s.rdb.XPending(ctx, s.keys.Outbox(lane), relay.Group).Result()
		if err != nil {
			t.Fatalf("bucket %s: %v", lane, err)
		}
		if p.Count != 0 {
			t.Fatalf("bucket %s: %d outbox entries still pending after the drain: %v", lane, p.Count, p.Consumers)
		}
	}
	if claimed := scrapeURL(t, "http://"+gb.admin+"/metrics")["flashgate_relay_claimed_total"]; claimed < float64(held) {
		t.Fatalf("gateway B's relay claimed %v entries; the dead relay held %d", claimed, held)
	}
	units := s.checkBucketRows(sale, lanes, accepted)
	if units > stock {
		t.Fatalf("MySQL holds %d units, stock %d", units, stock)
	}
	s.checkBucketView(gb, sale, stock, units)
	s.waitMovesSettled(lanes, 30*time.Second)
	s.checkStockConserved(sale, lanes, stock)
	s.checkNoDrift(sale)
	t.Logf("%d units sold of %d; the settling pass finished the %d moves gateway A left half done", units, stock, len(left))
}

// createBucketSale creates sale with stock units, a per-user limit of 1
// and bucketCount buckets through g's admin API, and returns the buckets'
// ids (the home's names). On a cluster each bucket must be on a primary
// of its own, or the test proves nothing there.
func (s *stack) createBucketSale(g *gatewayProc, sale string, stock int) []string {
	s.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, body, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale,
		fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"buckets":%d}`, stock, bucketCount))
	if err != nil || code != 201 {
		s.t.Fatalf("create sale %s: %d %s %v", sale, code, body, err)
	}
	var v struct{ Buckets int }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Buckets != bucketCount {
		s.t.Fatalf("create sale %s: %s (%v)", sale, body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names, err := s.rdb.HGet(ctx, s.keys.Meta(sale), "names").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	lanes := strings.Split(names, ",")
	if len(lanes) != bucketCount {
		s.t.Fatalf("sale %s names buckets %q", sale, names)
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		on := map[string]bool{}
		for _, lane := range lanes {
			node, err := cc.MasterForKey(ctx, s.keys.Meta(lane))
			if err != nil {
				s.t.Fatal(err)
			}
			on[node.Options().Addr] = true
		}
		if len(on) != bucketCount {
			s.t.Fatalf("the %d buckets of %s are on %d primaries: %v", bucketCount, sale, len(on), on)
		}
		s.t.Logf("the buckets of %s, %v, on the primaries %v", sale, lanes, on)
	}
	return lanes
}

// bucketFigures is what Redis holds of a sale of several buckets.
type bucketFigures struct {
	stock, moved        int64   // the home's
	laneStock, laneSold []int64 // each bucket's
	outbox              int64   // entries in the buckets' outboxes
}

func (f bucketFigures) sold() int64 {
	var n int64
	for _, x := range f.laneSold {
		n += x
	}
	return n
}

func (s *stack) bucketFigures(ctx context.Context, sale string, lanes []string) (bucketFigures, error) {
	var f bucketFigures
	m, err := s.rdb.HMGet(ctx, s.keys.Meta(sale), "stock", "moved").Result()
	if err != nil {
		return f, err
	}
	f.stock, f.moved = hashInt(m[0]), hashInt(m[1])
	for _, lane := range lanes {
		m, err := s.rdb.HMGet(ctx, s.keys.Meta(lane), "stock", "sold").Result()
		if err != nil {
			return f, err
		}
		f.laneStock = append(f.laneStock, hashInt(m[0]))
		f.laneSold = append(f.laneSold, hashInt(m[1]))
		n, err := s.rdb.XLen(ctx, s.keys.Outbox(lane)).Result()
		if err != nil {
			return f, err
		}
		f.outbox += n
	}
	return f, nil
}

// hashInt reads an HMGET value; a missing one is 0.
func hashInt(v any) int64 {
	str, _ := v.(string)
	n, _ := strconv.ParseInt(str, 10, 64)
	return n
}

// waitBucketsDrained waits until MySQL holds as many units as the buckets
// sold and their outboxes are empty, and fails the test when that takes
// longer than timeout.
func (s *stack) waitBucketsDrained(sale string, lanes []string, timeout time.Duration) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	last := "nothing read"
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}, func(ctx context.Context) error {
		f, err := s.bucketFigures(ctx, sale, lanes)
		if err != nil {
			return err
		}
		_, units := s.count(sale)
		if f.sold() > 0 && units == f.sold() && f.outbox == 0 {
			return nil
		}
		last = fmt.Sprintf("buckets sold %v, outboxes %d entries, MySQL %d units", f.laneSold, f.outbox, units)
		return errNotYet
	}, nil)
	if err != nil {
		s.t.Fatalf("sale %s not drained after %v: %v (%s)", sale, time.Since(start).Round(time.Second), err, last)
	}
}

// checkBucketRows checks invariant 3 for a sale of several buckets and
// returns MySQL's units: every order a buyer saw accepted is one row, of its
// buyer; every row is one of them, of the sale, with the suffix ".i" of the
// bucket whose orders hash holds it; every bucket has some; the ledger
// agrees. The test's database holds this sale alone, so every row is read.
func (s *stack) checkBucketRows(sale string, lanes []string, accepted map[string]string) int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := salerows.ReadAll(ctx, s.db)
	if err != nil {
		s.t.Fatal(err)
	}
	seen := map[string]bool{}
	perBucket := make([]int, len(lanes))
	var units int64
	for _, r := range rows {
		id, saleID, user, q := r.OrderID, r.SaleID, r.UserID, r.Quantity
		if seen[id] {
			s.t.Fatalf("order %s twice in MySQL", id)
		}
		seen[id] = true
		if saleID != sale {
			s.t.Fatalf("order %s is of sale %q in MySQL, want %s", id, saleID, sale)
		}
		if got, ok := accepted[id]; !ok {
			s.t.Fatalf("order %s of %s is in MySQL, but no buyer got it as an answer", id, user)
		} else if got != user {
			s.t.Fatalf("order %s is %s's in MySQL, was given to %s", id, user, got)
		}
		i := strings.LastIndexByte(id, '.')
		b, err := strconv.Atoi(id[i+1:])
		if i < 0 || err != nil || b < 0 || b >= len(lanes) {
			s.t.Fatalf("order id %s does not end in a bucket .0-.%d", id, len(lanes)-1)
		}
		if !s.rdb.HExists(ctx, s.keys.Orders(lanes[b]), id).Val() {
			s.t.Fatalf("order %s is not in the orders of bucket %s", id, lanes[b])
		}
		perBucket[b]++
		units += q
	}
	for id := range accepted {
		if !seen[id] {
			s.t.Fatalf("order %s was accepted (202) but is not in MySQL", id)
		}
	}
	for b, n := range perBucket {
		if n == 0 {
			s.t.Fatalf("bucket %d sold nothing: %v orders per bucket", b, perBucket)
		}
	}
	lu, lo, err := orderdb.Ledger(ctx, s.db, sale)
	if err != nil {
		s.t.Fatal(err)
	}
	if lu != units || lo != int64(len(seen)) {
		s.t.Fatalf("ledger %d units / %d orders; MySQL %d units / %d rows", lu, lo, units, len(seen))
	}
	s.t.Logf("sale %s: %d orders (%d units) in MySQL, each once, per bucket %v", sale, len(seen), units, perBucket)
	return units
}

// checkBucketView checks g's admin view of the sale once it is at rest:
// its stock, its sold (MySQL's units) and what remains.
func (s *stack) checkBucketView(g *gatewayProc, sale string, stock int, units int64) {
	s.t.Helper()
	code, body, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "GET", "http://"+g.admin+"/admin/v1/sales/"+sale, "")
	if err != nil || code != 200 {
		s.t.Fatalf("sale view %s: %d %s %v", sale, code, body, err)
	}
	var v struct{ Stock, Sold, Remaining, Buckets int64 }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Stock != int64(stock) || v.Sold != units ||
		v.Remaining != v.Stock-units || v.Buckets != bucketCount {
		s.t.Fatalf("sale %s at rest: %s (%v); MySQL holds %d units", sale, body, err, units)
	}
}

// moves returns the records of half-done moves of stock in the homes and
// buckets of lanes' sale, "slot id" → record.
func (s *stack) moves(lanes []string) map[string]string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sale, _, _ := strings.Cut(lanes[0], "#")
	out := map[string]string{}
	for _, slot := range append([]string{sale}, lanes...) {
		recs, err := s.rdb.HGetAll(ctx, s.keys.Moves(slot)).Result()
		if err != nil {
			s.t.Fatal(err)
		}
		for id, rec := range recs {
			out[slot+" "+id] = rec
		}
	}
	return out
}

// waitMovesSettled waits until no record of a half-done move is left in
// the sale's home or buckets. With no buyer left, a living gateway has
// finished its own moves; the settling pass finishes a dead one's once the
// record is a few seconds old (sale/buckets.go settleAge).
func (s *stack) waitMovesSettled(lanes []string, timeout time.Duration) {
	s.t.Helper()
	var left map[string]string
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := retry.Until(ctx, poll, func(context.Context) error {
		if left = s.moves(lanes); len(left) > 0 {
			return errNotYet
		}
		return nil
	}, nil); err != nil {
		s.t.Fatalf("moves of stock still half done after %v: %v", timeout, left)
	}
}

// checkStockConserved checks the stock of a sale of several buckets at
// rest, no move half done: the home still has the whole stock, the pool
// (stock − moved) and every bucket's unsold stock are not negative, and
// pool + the buckets' unsold stock + sold = stock.
func (s *stack) checkStockConserved(sale string, lanes []string, stock int64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := s.bucketFigures(ctx, sale, lanes)
	if err != nil {
		s.t.Fatal(err)
	}
	pool := f.stock - f.moved
	var unsold int64
	for i := range lanes {
		if f.laneStock[i] < f.laneSold[i] {
			s.t.Fatalf("bucket %s sold %d of a stock of %d", lanes[i], f.laneSold[i], f.laneStock[i])
		}
		unsold += f.laneStock[i] - f.laneSold[i]
	}
	if f.stock != stock || pool < 0 || pool+unsold+f.sold() != stock {
		s.t.Fatalf("stock not conserved: home stock %d, moved %d (pool %d), buckets' stock %v, sold %v; pool + unsold %d + sold %d ≠ %d",
			f.stock, f.moved, pool, f.laneStock, f.laneSold, unsold, f.sold(), stock)
	}
	s.t.Logf("stock %d = pool %d + buckets' unsold %d + sold %d", stock, pool, unsold, f.sold())
}

// killHolding kills gateway g (SIGKILL) at a moment when its relay holds
// entries of the buckets' outboxes: g is frozen (SIGSTOP) at moments until
// it is seen holding some, and killed while frozen. Until half of the
// stock is sold it waits for a moment when a move of stock is half done
// too (a record that outlives the freeze: g's, or, when the look is
// quicker than its few Redis calls, a living gateway's, which only makes
// the moment earlier), so that the settling pass has a dead gateway's move
// to finish; after that, entries are enough. It returns the entries held
// and the move records left. It fails the test when no such
// moment comes within a minute, or before last buys are accepted.
func killHolding(t *testing.T, s *stack, g *gatewayProc, lanes []string, c *crowdtest.Crowd, half, last int64) (int64, map[string]string) {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// broker.InstanceName: host-pid-suffix.
	prefix := host + "-" + strconv.Itoa(g.cmd.Process.Pid) + "-"
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for looks := 1; ; looks++ {
		if c.N202() >= last || time.Now().After(deadline) {
			t.Fatalf("gateway A's relay was not seen holding an outbox entry in %d looks (%d buys accepted)", looks-1, c.N202())
		}
		g.signal(t, syscall.SIGSTOP)
		before := s.moves(lanes)
		// The look sees all g asked of Redis before it stopped: a held
		// entry it had acknowledged, or a move it had finished, in flight
		// at the stop, would be counted as held, or half done.
		waitStoppedAndRead(t, g.proc, s.cfg.Redis.Addrs)
		var held int64
		for _, lane := range lanes {
			p, err := s.rdb.XPending(ctx, s.keys.Outbox(lane), relay.Group).Result()
			if err != nil { // no group yet: nobody holds anything there
				continue
			}
			for consumer, n := range p.Consumers {
				if strings.HasPrefix(consumer, prefix) {
					held += n
				}
			}
		}
		left := map[string]string{}
		for id, rec := range s.moves(lanes) {
			if before[id] == rec {
				left[id] = rec
			}
		}
		if held > 0 && (len(left) > 0 || c.N202() >= half) {
			g.kill9(t)
			t.Logf("gateway A seen holding entries at look %d, %d moves half done", looks, len(left))
			return held, left
		}
		g.signal(t, syscall.SIGCONT)
		time.Sleep(2 * time.Millisecond)
	}
}
