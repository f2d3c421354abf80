package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/retry"
)

// Past one process (DESIGN.md "Where it goes past one machine", invariant
// 10): two gateways behind what a load balancer would do, three competing
// consumers, one stack. The crowd (startCrowd) is the harness's buyers spread
// over several gateways: a buy that gets no answer is sent again, with the
// same Idempotency-Key, to the next gateway.

// The burst of both scale tests: stock far below demand over a few sales,
// a few thousand buys in all.
var scaleSales = []string{"sa", "sb", "sc"}

const (
	scaleStock   = 300  // per sale
	scaleLimit   = 2    // per user
	scaleUsers   = 1500 // user u buys in sale u%3, sent first to gateway u%2
	scaleKeys    = 3    // buys per user, each with its own Idempotency-Key
	scaleWorkers = 32   // buyers per gateway
)

// TestScaleGatewayKill9 guards invariant 10 ("adding a gateway or a
// consumer never breaks 1–9") with two gateways (A, B) and three consumers
// on one stack, the buyers split between the gateways, stock far below
// demand over three sales. In the middle of the burst, gateway A first
// loses the replies to its reservations (a proxy drops them: Redis
// reserves, A never learns, as in a crash between the script and the
// reply), then is killed (SIGKILL) at a moment when its relay holds
// outbox entries. Its buyers carry on through gateway B with the same
// Idempotency-Keys. Once drained, over every sale:
//
//   - 1: sold + remaining = stock, remaining ≥ 0 in every sample taken
//     during the burst; at the end exactly the stock sold, no unit more.
//   - 2: no user holds more than per_user_limit units, in MySQL or Redis.
//   - 3: every 202, from either gateway, is exactly one MySQL row, of the
//     user it was given to, and MySQL holds nothing else (checkExactlyOnce,
//     and no row that no buyer saw accepted); reconcile finds no drift.
//   - 4: every 202 sent again with its key to the other gateway answers
//     the same bytes; every order A reserved without hearing of it reached
//     its buyer through B's replay of the key, with A's order id; no key
//     produced a second order (its row would be one nobody saw accepted).
//   - 6: the entries the dead relay held were claimed by B's relay after
//     relay.claim_after (B's claimed counter covers them, none stays
//     pending) and reached MySQL once.
func TestScaleGatewayKill9(t *testing.T) {
	// The dead relay's entries wait claim_after before B may take them:
	// short, so that the drain is quick.
	s := newStack(t, "FLASHGATE_RELAY_CLAIM_AFTER=1s")
	// Gateway A reaches Redis through a proxy that can withhold Redis's
	// replies: reservations made, their answers lost, as in a crash
	// between the script and the reply.
	cut := startReplyCut(t, s.cfg.Redis.Addrs[0])
	ga := startGateway(t, nil, append(slices.Clone(s.env), "FLASHGATE_REDIS_ADDRS="+cut.addr()))
	gb := s.startGateway(nil)
	consumers := startScaleConsumers(t, s, 3)
	for _, sale := range scaleSales {
		s.createSale(gb, sale, scaleStock, scaleLimit)
	}
	samples := sampleSales(t, gb, scaleSales, scaleStock)
	// Paced, so that the sales sell for seconds rather than the fraction
	// of one that the relays take to notice them (they look at a quiet
	// sale once a second): the kill must find relay A at work.
	c := startCrowd(t, []*gatewayProc{ga, gb}, 100*time.Millisecond)

	c.WaitAccepted(int64(len(scaleSales)*scaleStock/5), time.Minute)
	dead, held, lost := killCut(t, s, ga, c, cut)
	at := c.N202()
	t.Logf("gateway A (relay %s) killed after %d buys accepted, holding %d outbox entries, with %d reservations made whose reply it never got",
		dead, at, held, len(lost))

	c.Wait()
	samples.stop()
	c.Check()
	if c.Failovers() == 0 {
		t.Fatal("no buy sent to gateway A was answered by gateway B")
	}
	for i, n := range c.ServedBy() {
		if n == 0 {
			t.Fatalf("gateway %d accepted no buy", i)
		}
	}
	if c.N202() == at {
		t.Fatal("no buy accepted after the kill: the burst was over before it")
	}
	// Invariant 4 across gateways: a reservation gateway A made but never
	// answered reached its buyer through gateway B's replay of the key,
	// with A's order id, not as a second order.
	for id, sale := range lost {
		if _, ok := c.Accepted(sale)[id]; !ok {
			t.Fatalf("order %s of sale %s was reserved through gateway A, which never answered it; the buyer's retry on gateway B did not get it", id, sale)
		}
	}

	for _, sale := range scaleSales {
		s.waitDrained(sale, 2*time.Minute)
	}
	checkScaleSales(t, s, gb, c)
	// Invariant 6: the dead relay's entries were taken by the living one.
	// It alone can have removed them (an entry pending for a consumer goes
	// to another only through XAUTOCLAIM), and nothing is pending now.
	ctx := context.Background()
	for _, sale := range scaleSales {
		p, err := s.rdb.XPending(ctx, s.keys.Outbox(sale), relay.Group).Result()
		if err != nil {
			t.Fatal(err)
		}
		if p.Count != 0 {
			t.Fatalf("sale %s: %d outbox entries still pending after the drain: %v", sale, p.Count, p.Consumers)
		}
	}
	gm := scrapeURL(t, "http://"+gb.admin+"/metrics")
	if claimed := gm["flashgate_relay_claimed_total"]; claimed < float64(held) {
		t.Fatalf("gateway B's relay claimed %v entries; the dead relay held %d", claimed, held)
	}
	checkConsumersInserted(t, s, consumers, false)
	t.Logf("%d buys answered by gateway B after no answer from A; relay B claimed %v entries, removed %v",
		c.Failovers(), gm["flashgate_relay_claimed_total"], gm["flashgate_relay_removed_total"])
}

// TestScaleConsumersShare guards the consumer half of invariant 10: with
// two gateways and three consumers on one quorum queue and nobody killed,
// every consumer takes part (its flashgate_consumer_inserted_total > 0),
// their inserts add up to the rows in MySQL, and invariants 1–4 hold as in
// TestScaleGatewayKill9.
func TestScaleConsumersShare(t *testing.T) {
	s := newStack(t)
	ga, gb := s.startGateway(nil), s.startGateway(nil)
	consumers := startScaleConsumers(t, s, 3)
	for _, sale := range scaleSales {
		s.createSale(ga, sale, scaleStock, scaleLimit)
	}
	samples := sampleSales(t, gb, scaleSales, scaleStock)
	c := startCrowd(t, []*gatewayProc{ga, gb}, 0)
	c.Wait()
	samples.stop()
	c.Check()
	for i, n := range c.ServedBy() {
		if n == 0 {
			t.Fatalf("gateway %d accepted no buy", i)
		}
	}
	for _, sale := range scaleSales {
		s.waitDrained(sale, 2*time.Minute)
	}
	checkScaleSales(t, s, ga, c)
	checkConsumersInserted(t, s, consumers, true)
}

// consumerProc is a `flashgate consumer` process and its metrics listener.
type consumerProc struct {
	*proc
	metrics string // host:port
}

// startScaleConsumers starts n consumers, each with its metrics listener,
// and waits until all n consume from the stack's queue, so that RabbitMQ
// spreads the burst over all of them.
func startScaleConsumers(t *testing.T, s *stack, n int) []consumerProc {
	t.Helper()
	cs := make([]consumerProc, n)
	for i := range cs {
		cs[i].metrics = freeAddr(t)
		cs[i].proc = s.start("consumer-"+strconv.Itoa(i), []string{"FLASHGATE_CONSUMER_METRICS_ADDR=" + cs[i].metrics}, "consumer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := broker.Open(ctx, s.cfg.AMQP, "scale test observer")
	if err != nil {
		t.Fatalf("RabbitMQ (run `make up`): %v", err)
	}
	defer sess.Close()
	localstack.WaitFor(t, 30*time.Second, fmt.Sprintf("%d consumers on the queue", n), func() bool {
		q, err := sess.Channel.QueueDeclarePassive(s.cfg.AMQP.Queue, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("queue %s: %v", s.cfg.AMQP.Queue, err)
		}
		return q.Consumers >= n
	})
	return cs
}

// checkConsumersInserted checks that the consumers' inserts add up to the
// rows of the scale sales in MySQL and, with each, that every one of them
// inserted some: RabbitMQ spread the work over all of them.
func checkConsumersInserted(t *testing.T, s *stack, cs []consumerProc, each bool) {
	t.Helper()
	var rows int64
	for _, sale := range scaleSales {
		n, _ := s.count(sale)
		rows += n
	}
	// A consumer counts a batch after its commit: wait for the figures
	// rather than sleep.
	inserted := make([]float64, len(cs))
	var sum float64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = retry.Until(ctx, poll, func(context.Context) error {
		sum = 0
		for i, c := range cs {
			inserted[i] = scrapeURL(t, "http://"+c.metrics+"/metrics")["flashgate_consumer_inserted_total"]
			sum += inserted[i]
		}
		if sum < float64(rows) {
			return errNotYet
		}
		return nil
	}, nil)
	t.Logf("rows inserted per consumer: %v (MySQL holds %d)", inserted, rows)
	if sum != float64(rows) {
		t.Fatalf("the consumers inserted %v rows in all, MySQL holds %d", sum, rows)
	}
	if each {
		for i, n := range inserted {
			if n == 0 {
				t.Fatalf("consumer %d inserted nothing: the queue did not spread the work over the three", i)
			}
		}
	}
}

// killCut kills gateway g (SIGKILL) in the middle of its work: first cut
// (a proxy between g and Redis) drops Redis's replies to g's reservations,
// until Redis holds an order g reserved and never heard of; then g is frozen
// (SIGSTOP) at moments until its relay is seen holding outbox entries, and
// killed while frozen. It returns the relay's consumer name, the entries
// it held, and the orders (id → sale) Redis accepted from g without g
// learning it. It fails the test when such moments do not come within a
// minute, or before the burst is nearly over.
func killCut(t *testing.T, s *stack, g *gatewayProc, c *crowdtest.Crowd, cut *replyCut) (string, int64, map[string]string) {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// broker.InstanceName: host-pid-suffix.
	prefix := host + "-" + strconv.Itoa(g.cmd.Process.Pid) + "-"
	ctx := context.Background()
	lost := map[string]string{}
	findLost := func() {
		for _, id := range cut.droppedIDs() {
			if _, ok := lost[id]; ok {
				continue
			}
			for _, sale := range scaleSales {
				if s.rdb.HExists(ctx, s.keys.Orders(sale), id).Val() {
					lost[id] = sale
				}
			}
		}
	}

	cut.drop(reserveSHA(t, g))
	localstack.WaitFor(t, 30*time.Second, "an order reserved through gateway A, whose reply A never got", func() bool {
		findLost()
		return len(lost) > 0
	})

	last := int64(len(scaleSales) * scaleStock * 9 / 10)
	deadline := time.Now().Add(time.Minute)
	for looks := 1; ; looks++ {
		if c.N202() >= last || time.Now().After(deadline) {
			t.Fatalf("gateway A's relay was not seen holding an outbox entry in %d looks (%d buys accepted)", looks-1, c.N202())
		}
		g.signal(t, syscall.SIGSTOP)
		// The look sees all g asked of Redis before it stopped: a held
		// entry it had acknowledged, in flight at the stop, would be
		// counted as held.
		cut.waitForwarded(t, g.proc)
		var name string
		var held int64
		for _, sale := range scaleSales {
			p, err := s.rdb.XPending(ctx, s.keys.Outbox(sale), relay.Group).Result()
			if err != nil { // no group yet: nobody holds anything there
				continue
			}
			for consumer, n := range p.Consumers {
				if strings.HasPrefix(consumer, prefix) {
					name, held = consumer, held+n
				}
			}
		}
		if held > 0 {
			g.kill9(t)
			cut.waitSent(t)
			findLost()
			t.Logf("gateway A seen holding entries at look %d; %d reservations sent by A whose reply was dropped", looks, len(cut.droppedIDs()))
			return name, held, lost
		}
		g.signal(t, syscall.SIGCONT)
		time.Sleep(2 * time.Millisecond)
	}
}

// saleSampler reads the admin view of sales during a burst and fails the
// test on a sample that breaks invariant 1.
type saleSampler struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{}
	n      int
	bad    []string
}

func sampleSales(t *testing.T, g *gatewayProc, sales []string, stock int) *saleSampler {
	ctx, cancel := context.WithCancel(context.Background())
	sm := &saleSampler{t: t, cancel: cancel, done: make(chan struct{})}
	tr := &http.Transport{}
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	go func() {
		defer close(sm.done)
		defer tr.CloseIdleConnections()
		for ctx.Err() == nil {
			for _, sale := range sales {
				code, body, err := httpDo(client, "GET", "http://"+g.admin+"/admin/v1/sales/"+sale, "")
				if err != nil || code != 200 {
					continue // the checks after the burst say whether the gateway is well
				}
				var v struct{ Stock, Sold, Remaining int }
				if err := json.Unmarshal([]byte(body), &v); err != nil {
					sm.bad = append(sm.bad, "sale view: "+body)
					continue
				}
				sm.n++
				if v.Stock != stock || v.Sold+v.Remaining != v.Stock || v.Remaining < 0 {
					sm.bad = append(sm.bad, sale+": "+body)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(sm.stop)
	return sm
}

// stop ends the sampling and fails the test on a bad sample, or none.
func (sm *saleSampler) stop() {
	sm.t.Helper()
	select {
	case <-sm.done:
		return
	default:
	}
	sm.cancel()
	<-sm.done
	if len(sm.bad) > 0 {
		sm.t.Fatalf("invariant 1 broken in %d of %d samples, e.g. %q", len(sm.bad), sm.n, sm.bad[0])
	}
	if sm.n == 0 {
		sm.t.Fatal("no sale view could be read during the burst")
	}
	sm.t.Logf("invariant 1 held in %d samples of the sale views during the burst", sm.n)
}

// checkScaleSales checks invariants 1–4 over every scale sale once it is
// drained, from what the crowd saw, MySQL, Redis, the admin view of g and
// `flashgate reconcile`.
func checkScaleSales(t *testing.T, s *stack, g *gatewayProc, c *crowdtest.Crowd) {
	t.Helper()
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, sale := range scaleSales {
		accepted := c.Accepted(sale)
		// 1: exactly the stock sold, demand being far above it.
		if len(accepted) != scaleStock {
			t.Fatalf("sale %s: %d buys accepted, want %d (the stock)", sale, len(accepted), scaleStock)
		}
		code, body, err := httpDo(client, "GET", "http://"+g.admin+"/admin/v1/sales/"+sale, "")
		if err != nil || code != 200 {
			t.Fatalf("sale view %s: %d %s %v", sale, code, body, err)
		}
		var v struct{ Stock, Sold, Remaining int }
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.Stock != scaleStock || v.Sold != scaleStock || v.Remaining != 0 {
			t.Fatalf("sale %s after the burst: %s (%v)", sale, body, err)
		}
		// 3: every 202 once in MySQL, nothing else there.
		s.checkExactlyOnce(sale, accepted)
		owners, units := s.owners(sale)
		for id, user := range owners {
			// 3 and 4: a row no buyer saw accepted is a reservation whose
			// reply was lost and whose retry reserved again.
			if got, ok := accepted[id]; !ok {
				t.Fatalf("sale %s: order %s of %s is in MySQL, but no buyer got it as an answer", sale, id, user)
			} else if got != user {
				t.Fatalf("sale %s: order %s is %s's in MySQL, was given to %s", sale, id, user, got)
			}
		}
		// 2: the per-user limit, in MySQL and in Redis.
		for user, n := range units {
			if n > scaleLimit {
				t.Fatalf("sale %s: %s holds %d units in MySQL, limit %d", sale, user, n, scaleLimit)
			}
		}
		for user, n := range s.rdb.HGetAll(ctx, s.keys.Users(sale)).Val() {
			if u, err := strconv.Atoi(n); err != nil || u > scaleLimit {
				t.Fatalf("sale %s: %s holds %q units in Redis, limit %d", sale, user, n, scaleLimit)
			}
		}
		s.checkNoDrift(sale)
	}
}

// startCrowd starts scaleWorkers buyers per gateway over scaleUsers users,
// buyer u buying scaleKeys times one unit in sale u%3, each buy with a
// key of its own, sent first to gateway u%2; a buy that gets no answer
// (none, 503, 429) goes to the next gateway with the same key, as behind a
// load balancer, and every 202 is sent once more, with its key, to another
// gateway and must come back byte for byte. Each buyer pauses pause after
// each buy. It returns at once; the buyers give up after three minutes,
// and that fails the test.
func startCrowd(t *testing.T, gs []*gatewayProc, pause time.Duration) *crowdtest.Crowd {
	var bases []string
	for _, g := range gs {
		bases = append(bases, "http://"+g.public)
	}
	return crowdtest.Start(t, crowdtest.Options{Bases: bases, Sales: scaleSales, Users: scaleUsers, Keys: scaleKeys,
		Workers: scaleWorkers, Pause: pause, Replay: true, Again: crowdtest.Retry503or429,
		Final: []string{"sold_out", "limit_reached"}, Limit: scaleLimit})
}
