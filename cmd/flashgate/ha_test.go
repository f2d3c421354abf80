package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// The failover tests run on the topology of `make up-ha` (make test-ha:
// FLASHGATE_REDIS_ADDRS names the Redis Cluster with replicas,
// FLASHGATE_AMQP_URL the three RabbitMQ nodes); localstack.HA skips them
// elsewhere. Each kills real servers under a keyed load of buyers and
// checks the ledger once everything has settled (DESIGN.md, invariant 13).

// haAnswer is one buy's final answer, after its retries of 503 and 429
// with the same Idempotency-Key.
type haAnswer struct {
	sale, user, orderID string
	code                int
	status              string
	at                  time.Time // when the answer came
}

// haCrowd buys across gateways and sales, one unit per buyer and key, each
// buyer retrying a 503 or 429 with the same key as a client would, until
// it has another answer or the crowd stops.
type haCrowd struct {
	t      *testing.T
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	answers  []haAnswer
	accepted map[string][]string // key → order ids answered 202 (a key's replays must name one order)
	bad      []string
}

func startHACrowd(t *testing.T, gws []*gatewayProc, sales []string, workers int) *haCrowd {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c := &haCrowd{t: t, ctx: ctx, cancel: cancel, accepted: map[string][]string{}}
	t.Cleanup(c.stop)
	for w := range workers {
		c.wg.Go(func() {
			hc := &http.Client{Timeout: 5 * time.Second}
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for n := 0; ctx.Err() == nil; n++ {
				sale := sales[rng.IntN(len(sales))]
				user := fmt.Sprintf("w%d-u%d", w, n)
				c.buy(hc, gws, rng, sale, user)
			}
		})
	}
	return c
}

// buy sends one buyer's request until an answer other than 503 and 429
// comes, to any gateway, with the same key (buyOnce's "k-"+user).
func (c *haCrowd) buy(hc *http.Client, gws []*gatewayProc, rng *rand.Rand, sale, user string) {
	// A buyer gives up after a while of 503s, so that a sale that cannot
	// sell for a moment does not hold every worker.
	for giveUp := time.Now().Add(time.Second); c.ctx.Err() == nil && time.Now().Before(giveUp); {
		g := gws[rng.IntN(len(gws))]
		code, id, body, err := crowdtest.Buy(hc, "http://"+g.public, sale, user)
		now := time.Now()
		if err != nil {
			if c.ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond) // a gateway's connection refused or cut: another try
			}
			continue
		}
		status := statusOf(body)
		switch {
		case code == 202:
			c.record(haAnswer{sale: sale, user: user, orderID: id, code: code, status: status, at: now})
			return
		case code == 503 && (status == "unavailable" || status == "unconfirmed"), code == 429:
			time.Sleep(20 * time.Millisecond)
			continue
		case code == 410 && status == "sold_out", code == 409 && status == "limit_reached",
			code == 423 && status == "locked": // the test locks a sale for a moment
			c.record(haAnswer{sale: sale, user: user, code: code, status: status, at: now})
			return
		default:
			c.fail(fmt.Sprintf("sale %s user %s: %d %s", sale, user, code, body))
			return
		}
	}
}

func statusOf(body string) string {
	_, rest, ok := strings.Cut(body, `"status":"`)
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, `"`)
	return s
}

func (c *haCrowd) record(a haAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers = append(c.answers, a)
	if a.code == 202 {
		k := "k-" + a.user
		if !slices.Contains(c.accepted[k], a.orderID) {
			c.accepted[k] = append(c.accepted[k], a.orderID)
		}
	}
}

func (c *haCrowd) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) < 10 {
		c.bad = append(c.bad, msg)
	}
}

func (c *haCrowd) stop() { c.cancel(); c.wg.Wait() }

// acceptedAfter returns the first 202 of any of sales answered after t.
func (c *haCrowd) acceptedAfter(sales []string, t time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.answers {
		if a.code == 202 && a.at.After(t) && slices.Contains(sales, a.sale) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// haFailover is one failover run's settings.
type haFailover struct {
	replicated bool // FLASHGATE_REDIS_MIN_REPLICAS=1
	lag        bool // the victim's replica is stopped for a while before the kill, then taken over
	sentinel   bool // one primary and its replica under the Sentinels, not the cluster
}

// runHAFailover runs one failover under load on the Redis Cluster of
// make up-ha and checks what DESIGN.md's invariant 13 promises: only
// contract answers; no unit sold twice, no buyer over the limit, no key
// with two orders in MySQL; the failed primary's sales sell again, the
// others never stop; the admin views end equal to MySQL; in replicated
// mode no 202 is lost, and none is sent while the replica is stopped.
func runHAFailover(t *testing.T, o haFailover) {
	h := localstack.HA(t)
	t.Cleanup(func() { h.Heal(t) })
	const stock, limit = 4000, 1
	env := []string{"FLASHGATE_CLOSED_CACHE_TTL=30s", "FLASHGATE_LOG_LEVEL=warn"}
	if o.replicated {
		env = append(env, "FLASHGATE_REDIS_MIN_REPLICAS=1")
	}
	if o.sentinel {
		env = append(env, "FLASHGATE_REDIS_ADDRS="+strings.Join(h.SentinelAddrs, ","),
			"FLASHGATE_REDIS_SENTINEL_MASTER="+h.SentinelMaster)
	}
	s := newStack(t, env...)
	primaryOf := func(sale string) string { return h.PrimaryOf(t, s.keys.Meta(sale)) }
	if o.sentinel {
		// The test's own client follows the Sentinels' primary too, and
		// removes the test's keys there.
		_ = s.rdb.Close()
		s.rdb = scripts.NewClient(redis.UniversalOptions{Addrs: h.SentinelAddrs, MasterName: h.SentinelMaster})
		t.Cleanup(func() { localstack.DropKeys(t, s.rdb, s.keys.Prefix) })
		primaryOf = func(string) string { return h.SentinelPrimary(t) }
	}
	g1, g2 := s.startGateway(nil), s.startGateway(nil)
	s.startConsumers(1)

	var sales, victims []string
	for i := range 9 {
		sale := "ha-" + s.id + "-" + strconv.Itoa(i)
		s.createSale(g1, sale, stock, limit)
		sales = append(sales, sale)
	}
	victim := primaryOf(sales[0])
	for _, sale := range sales {
		if primaryOf(sale) == victim {
			victims = append(victims, sale)
		}
	}
	others := slices.DeleteFunc(slices.Clone(sales), func(x string) bool { return slices.Contains(victims, x) })
	replica := h.ReplicaOf(t, victim)
	t.Logf("victim primary %s (replica %s) holds %v; the others %v", victim, replica, victims, others)

	crowd := startHACrowd(t, []*gatewayProc{g1, g2}, sales, 16)
	time.Sleep(2 * time.Second) // a load to lose the last moment of
	var pausedAt time.Time
	if o.lag {
		h.PauseRedis(t, replica)
		pausedAt = time.Now()
		time.Sleep(3 * time.Second)
	}
	killedAt := time.Now()
	h.KillRedis(t, victim)
	if o.lag && o.sentinel {
		h.ResumeRedis(t, replica) // the Sentinels promote it
	}
	if o.lag && !o.sentinel {
		h.ResumeRedis(t, replica)
		out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", replica[strings.LastIndexByte(replica, ':')+1:],
			"cluster", "failover", "takeover").CombinedOutput()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v %s", replica, err, out)
		}
	}
	localstack.WaitFor(t, 60*time.Second, "the replica promoted", func() bool {
		p := primaryOf(sales[0])
		return p != "" && p != victim
	})
	promotedAt := time.Now()
	if o.replicated {
		h.StartRedis(t, victim) // a replica again for the new primary: replicated mode waits for one
	}
	var first time.Time
	localstack.WaitFor(t, 60*time.Second, "a 202 of the failed primary's sales", func() bool {
		var ok bool
		first, ok = crowd.acceptedAfter(victims, promotedAt)
		return ok
	})
	t.Logf("kill -9 → promotion %v → first 202 of its sales %v later",
		promotedAt.Sub(killedAt).Round(time.Millisecond), first.Sub(promotedAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	if otherAt, ok := crowd.acceptedAfter(others, killedAt); len(others) > 0 && !ok {
		t.Errorf("the sales on the other primaries sold nothing after the kill")
	} else if ok {
		t.Logf("the others' first 202 after the kill: %v after it", otherAt.Sub(killedAt).Round(time.Millisecond))
	}

	// A lock and a restock announced after the failover reach both
	// gateways (whose memory of a closed sale lasts 30 s here).
	c := &http.Client{Timeout: 5 * time.Second}
	for _, op := range []string{"lock", "unlock"} {
		code, body, err := httpDo(c, "POST", "http://"+g1.admin+"/admin/v1/sales/"+victims[0]+"/"+op, "")
		if err != nil || code != 200 {
			t.Fatalf("%s %s: %d %s %v", op, victims[0], code, body, err)
		}
		if op == "lock" {
			for _, g := range []*gatewayProc{g1, g2} {
				if code, _, body, err := crowdtest.Buy(c, "http://"+g.public, victims[0], "lock-probe-"+g.public); err != nil || code != 423 {
					t.Errorf("buy on %s after the lock: %d %s %v", g.public, code, body, err)
				}
			}
		}
	}
	localstack.WaitFor(t, 10*time.Second, "both gateways forget the lock (the unlock's announcement)", func() bool {
		for _, g := range []*gatewayProc{g1, g2} {
			code, _, _, err := crowdtest.Buy(c, "http://"+g.public, victims[0], "unlock-probe-"+localstack.RandomHex(4))
			if err != nil || code == 423 {
				return false
			}
		}
		return true
	})

	crowd.stop()
	if len(crowd.bad) > 0 {
		t.Fatalf("answers outside the contract: %v", crowd.bad)
	}
	h.Heal(t)
	for _, sale := range sales {
		s.waitDrained(sale, 2*time.Minute)
	}

	// The ledger.
	lost, accepted, inLag := 0, 0, 0
	for _, sale := range sales {
		byID, units := s.owners(sale)
		for user, u := range units {
			if u > limit {
				t.Errorf("sale %s: user %s holds %d units in MySQL, limit %d", sale, user, u, limit)
			}
		}
		var view struct {
			Sold int64 `json:"sold"`
		}
		getJSON(t, c, "http://"+g1.admin+"/admin/v1/sales/"+sale, &view)
		var mysqlUnits int64
		for _, u := range units {
			mysqlUnits += int64(u)
		}
		if view.Sold != mysqlUnits {
			t.Errorf("sale %s: admin view sold %d, MySQL %d units", sale, view.Sold, mysqlUnits)
		}
		for _, a := range crowd.answers {
			if a.sale != sale || a.code != 202 {
				continue
			}
			accepted++
			if _, ok := byID[a.orderID]; !ok {
				lost++
			}
			if o.lag && slices.Contains(victims, sale) && a.at.After(pausedAt.Add(time.Second)) && a.at.Before(killedAt) {
				inLag++
			}
		}
	}
	for key, ids := range crowd.accepted {
		if len(ids) > 1 {
			t.Logf("key %s answered 202 with %v (the first lost in the failover)", key, ids)
		}
	}
	t.Logf("%d 202s, %d lost in the failover; %d answered while the replica was stopped", accepted, lost, inLag)
	if o.replicated && lost > 0 {
		t.Errorf("replicated mode lost %d of %d answered orders", lost, accepted)
	}
	if o.replicated && inLag > 0 {
		t.Errorf("replicated mode answered %d buys 202 while the replica was stopped", inLag)
	}
	for _, sale := range sales {
		byID, _ := s.owners(sale)
		keys := map[string]int{}
		for _, user := range byID {
			keys[user]++ // one key per buyer (buyOnce's "k-"+user): two rows of a buyer are two orders of a key
		}
		for user, n := range keys {
			if n > 1 {
				t.Errorf("sale %s: key k-%s has %d orders in MySQL", sale, user, n)
			}
		}
	}
}

func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	code, body, err := httpDo(c, "GET", url, "")
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %s %v", url, code, body, err)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

func TestHAClusterFailover(t *testing.T) { runHAFailover(t, haFailover{}) }

func TestHAClusterForcedLag(t *testing.T) { runHAFailover(t, haFailover{lag: true}) }

func TestHAClusterForcedLagReplicated(t *testing.T) {
	runHAFailover(t, haFailover{lag: true, replicated: true})
}

func TestHASentinelFailover(t *testing.T) { runHAFailover(t, haFailover{sentinel: true}) }

func TestHASentinelForcedLagReplicated(t *testing.T) {
	runHAFailover(t, haFailover{sentinel: true, lag: true, replicated: true})
}
