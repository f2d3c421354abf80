package relay

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// addOrders writes n entries to the sale's outbox the way the reserve script
// does, registers the sale and returns the order ids.
func (e *env) addOrders(sale string, n int) []string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, n)
	pipe := e.rdb.Pipeline()
	for i := range ids {
		ids[i] = sale + "-o" + strconv.Itoa(i) + "-" + localstack.RandomHex(3)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), Values: []any{
			"order_id", ids[i], "sale_id", sale, "user_id", "u" + strconv.Itoa(i),
			"quantity", strconv.Itoa(1 + i%3), "reserved_at", strconv.FormatInt(time.Now().UnixMilli(), 10),
		}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// startRelay runs a relay on the env's Redis until the test ends; the test
// fails if Run does not return within its drain bound.
func (e *env) startRelay(name string) (*Relay, context.CancelFunc) {
	e.t.Helper()
	return e.startRelayWith(context.Background(), Deps{Redis: e.rdb, Name: name}, nil)
}

// startRelayWith is startRelay with deps of the test's (Deps.Redis, Name
// and ScanEvery), a change of the relay before Run (nil: none), and a ctx
// whose values Run's calls carry.
func (e *env) startRelayWith(ctx context.Context, deps Deps, tweak func(*Relay)) (*Relay, context.CancelFunc) {
	e.t.Helper()
	r, err := New(e.cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	if tweak != nil {
		tweak(r)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(r.drain + 10*time.Second):
			e.t.Errorf("relay %s: Run did not return after its ctx ended", r.Name())
		}
	}
	var once sync.Once
	e.t.Cleanup(func() { once.Do(stop) })
	return r, func() { once.Do(stop) }
}

// received consumes the queue until every id in want has arrived or the
// timeout passes, and returns how often each order id arrived.
func (e *env) received(want []string, timeout time.Duration) map[string]int {
	e.t.Helper()
	return consumeUntil(e.t, e.ch, e.cfg.AMQP.Queue, want, timeout)
}

func consumeUntil(t *testing.T, ch *amqp.Channel, queue string, want []string, timeout time.Duration) map[string]int {
	t.Helper()
	tag := "test-" + localstack.RandomHex(4)
	deliveries, err := ch.Consume(queue, tag, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	defer func() { _ = ch.Cancel(tag, false) }()
	missing := map[string]bool{}
	for _, id := range want {
		missing[id] = true
	}
	got := map[string]int{}
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("deliveries closed with %d orders missing", len(missing))
			}
			for _, o := range ordersOf(t, d) {
				got[o.OrderID]++
				delete(missing, o.OrderID)
			}
		case <-deadline:
			t.Fatalf("after %v, %d of %d orders have not arrived", timeout, len(missing), len(want))
		}
	}
	return got
}

// ordersOf decodes a message of one order or a batch and, when the relay
// sent it, checks its properties: persistent, the content type of its form
// (lines, the default, or JSON), the type saying which, the first order's
// id as message id.
func ordersOf(t *testing.T, d amqp.Delivery) []order.Order {
	t.Helper()
	parts, err := order.Split(d.Body)
	if err != nil {
		t.Fatalf("message %q: %v", d.Body, err)
	}
	os := make([]order.Order, len(parts))
	for i, p := range parts {
		if os[i], err = order.Unmarshal(p); err != nil {
			t.Fatalf("message %q: element %d is not an order: %v", d.Body, i, err)
		}
	}
	typ := order.TypeOrder
	if len(os) > 1 {
		typ = order.TypeBatch
	}
	if d.AppId != "flashgate" {
		return os // a test's own message (publishFiller)
	}
	ct := order.ContentType
	if order.IsLines(d.Body) {
		ct = order.ContentTypeLines
	}
	if d.MessageId != os[0].OrderID || d.CorrelationId == "" || d.ContentType != ct || d.DeliveryMode != amqp.Persistent || d.Type != typ {
		t.Fatalf("message properties: id %q (first order %q), correlation id %q, content type %q, mode %d, type %q (%d orders)",
			d.MessageId, os[0].OrderID, d.CorrelationId, d.ContentType, d.DeliveryMode, d.Type, len(os))
	}
	return os
}

// outboxEmpty reports whether the sale's outbox has no entry and its group
// nothing pending.
func (e *env) outboxEmpty(sale string) bool {
	ctx := context.Background()
	n, err := e.rdb.XLen(ctx, e.keys.Outbox(sale)).Result()
	if err != nil || n != 0 {
		return false
	}
	p, err := e.rdb.XPending(ctx, e.keys.Outbox(sale), Group).Result()
	return err == nil && p.Count == 0
}

// TestPublishesThenDeletes relays two sales' backlogs. Invariant 3 (the
// relay's leg: every 202 becomes exactly one MySQL row): every entry reaches
// the queue, and only then leaves its outbox.
func TestPublishesThenDeletes(t *testing.T) {
	e := newEnv(t)
	a := e.addOrders("sale-a", 700)
	b := e.addOrders("sale-b", 300)
	r, _ := e.startRelay("r1")

	got := e.received(append(a, b...), 30*time.Second)
	if len(got) != 1000 {
		t.Fatalf("%d distinct orders arrived, want 1000", len(got))
	}
	localstack.WaitFor(t, 10*time.Second, "the outboxes emptied", func() bool { return e.outboxEmpty("sale-a") && e.outboxEmpty("sale-b") })
	localstack.WaitFor(t, 5*time.Second, "the stats of the relayed entries", func() bool {
		s := r.Stats()
		return s.Removed >= 1000 && s.InFlight == 0 && s.Tracked == 0 && s.Connected
	})
	s := r.Stats()
	if s.Confirmed < 1000 || s.Published < s.Confirmed || s.Malformed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestMessagesCarryBatches: the entries of a read travel in messages of
// up to relay.message_orders each, of one sale or several, and every entry
// arrives once; with 1, every message is one order, as before batches.
func TestMessagesCarryBatches(t *testing.T) {
	for _, tc := range []struct {
		per  int
		wire string
	}{{1, "lines"}, {50, "lines"}, {50, "json"}} {
		per := tc.per
		t.Run(strconv.Itoa(per)+" "+tc.wire, func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Relay.MessageOrders = per
			e.cfg.Relay.Wire = tc.wire
			want := append(e.addOrders("sale-a", 400), e.addOrders("sale-b", 200)...)
			r, _ := e.startRelay("r1")
			tag := "test-" + localstack.RandomHex(4)
			deliveries, err := e.ch.Consume(e.cfg.AMQP.Queue, tag, true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.ch.Cancel(tag, false) }()
			got := map[string]int{}
			messages, largest := 0, 0
			timeout := time.After(30 * time.Second)
			for len(got) < len(want) {
				select {
				case d := <-deliveries:
					os := ordersOf(t, d)
					if order.IsLines(d.Body) != (tc.wire == "lines") {
						t.Fatalf("relay.wire %s sent %.40q", tc.wire, d.Body)
					}
					messages++
					largest = max(largest, len(os))
					for _, o := range os {
						got[o.OrderID]++
					}
				case <-timeout:
					t.Fatalf("%d of %d orders arrived", len(got), len(want))
				}
			}
			for _, id := range want {
				if got[id] != 1 {
					t.Errorf("order %s arrived %d times", id, got[id])
				}
			}
			if largest > per || per > 1 && messages >= len(want) {
				t.Errorf("%d messages for %d orders, the largest of %d; relay.message_orders %d", messages, len(want), largest, per)
			}
			localstack.WaitFor(t, 10*time.Second, "the outboxes emptied", func() bool { return e.outboxEmpty("sale-a") && e.outboxEmpty("sale-b") })
			if s := r.Stats(); s.Messages != uint64(messages) || s.Confirmed != uint64(len(want)) {
				t.Errorf("stats: %d messages, %d entries confirmed; the queue had %d messages of %d orders", s.Messages, s.Confirmed, messages, len(want))
			}
			t.Logf("%d orders in %d messages, the largest of %d", len(want), messages, largest)
		})
	}
}

// addBatches writes entries of the reserve script's batch form to the
// sale's outbox, each of per orders, counts them in meta outq as the
// script does, registers the sale and returns the order ids.
func (e *env) addBatches(sale string, entries, per int) []string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for i := 0; i < entries; i++ {
		var lines []string
		for j := 0; j < per; j++ {
			id := fmt.Sprintf("%s-b%d-%d-%s", sale, i, j, localstack.RandomHex(3))
			ids = append(ids, id)
			lines = append(lines, fmt.Sprintf("%s\tu%d\t1\t%d\t", id, j, i*per+j+1))
		}
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), Values: []any{
			"sale_id", sale, "reserved_at", strconv.FormatInt(time.Now().UnixMilli(), 10), "state", "confirmed", "pay_by", "0",
			"n", strconv.Itoa(per), "orders", strings.Join(lines, "\n"),
		}}).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.rdb.HIncrBy(ctx, e.keys.Meta(sale), "outq", int64(len(ids))).Err(); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// TestBatchEntries relays entries of many orders each, with messages
// smaller than an entry (an entry's orders spread over several messages)
// and larger (several entries in one): every order arrives, each entry
// leaves the outbox once all its orders are confirmed, and the sale's
// count of orders in the outbox (meta outq) comes down to 0, not below,
// even when an entry is removed twice.
func TestBatchEntries(t *testing.T) {
	for _, per := range []int{7, 100} {
		t.Run(strconv.Itoa(per), func(t *testing.T) {
			e := newEnv(t)
			e.cfg.Relay.MessageOrders = per
			want := e.addBatches("bs", 12, 20)
			r, _ := e.startRelay("r1")
			got := e.received(want, 30*time.Second)
			for _, id := range want {
				if got[id] < 1 {
					t.Errorf("order %s never arrived", id)
				}
			}
			localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("bs") })
			ctx := context.Background()
			if q, err := e.rdb.HGet(ctx, e.keys.Meta("bs"), "outq").Int(); err != nil || q != 0 {
				t.Fatalf("meta outq %d (%v) after the outbox emptied, want 0", q, err)
			}
			s := r.Stats()
			if s.Removed != 12 || s.Confirmed < 240 || s.Messages < uint64((240+per-1)/per) {
				t.Errorf("stats %+v", s)
			}
			// A second removal of the same (gone) entries takes nothing off.
			id := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox("bs"), Values: []any{"x", "1"}}).Val()
			keys := []string{e.keys.Outbox("bs"), e.keys.Meta("bs")}
			for i := 0; i < 2; i++ {
				if _, err := scripts.New(e.rdb, "", e.keys).Remove(ctx, keys, Group, id, 5); err != nil {
					t.Fatal(err)
				}
			}
			if q := e.rdb.HGet(ctx, e.keys.Meta("bs"), "outq").Val(); q != "-5" {
				t.Errorf("meta outq %s after one entry of 5 removed twice, want -5 (taken off once)", q)
			}
		})
	}
}

// TestReturnedEntriesStayPending makes every publish unroutable. Invariant 3
// (every 202 becomes exactly one MySQL row): an entry RabbitMQ returned
// stays in the outbox and is published again once the binding is back.
func TestReturnedEntriesStayPending(t *testing.T) {
	e := newEnv(t)
	e.addOrders("s", 1) // the relay learns the sale
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 10*time.Second, "the first order removed", func() bool { return e.outboxEmpty("s") })

	// Unroutable from now on: every publish comes back.
	if err := e.ch.QueueUnbind(e.cfg.AMQP.Queue, broker.RoutingKey, e.cfg.AMQP.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	ids := e.addOrders("s", 10)
	r.Wrote("s")
	localstack.WaitFor(t, 10*time.Second, "10 returns counted", func() bool { return r.Stats().Returned >= 10 })
	if n := e.rdb.XLen(context.Background(), e.keys.Outbox("s")).Val(); n != 10 {
		t.Fatalf("outbox has %d entries after returns, want 10", n)
	}
	localstack.WaitFor(t, 5*time.Second, "Stats.Sales showing the pending entries", func() bool {
		for _, s := range r.Stats().Sales {
			if s.Sale == "s" && s.Pending == 10 && s.OldestAge > 0 {
				return true
			}
		}
		return false
	})

	if err := e.ch.QueueBind(e.cfg.AMQP.Queue, broker.RoutingKey, e.cfg.AMQP.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	got := e.received(ids, 20*time.Second)
	for _, id := range ids {
		if got[id] == 0 {
			t.Fatalf("order %s did not arrive after the binding came back", id)
		}
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied after the retry", func() bool { return e.outboxEmpty("s") })
}

// TestClaimsEntriesOfDeadRelay leaves entries pending with a consumer that
// never comes back. Invariant 6 (a crash of a relay at any instant loses no
// confirmed order): another relay claims and publishes them all.
func TestClaimsEntriesOfDeadRelay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 50)
	// A relay reads the entries and dies before publishing them.
	if err := e.rdb.XGroupCreateMkStream(ctx, e.keys.Outbox("s"), Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "dead", Streams: []string{e.keys.Outbox("s"), ">"}, Count: 100, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	r, _ := e.startRelay("alive")
	got := e.received(ids, 30*time.Second)
	if len(got) != 50 {
		t.Fatalf("%d orders arrived, want 50", len(got))
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("s") })
	if c := r.Stats().Claimed; c != 50 {
		t.Fatalf("claimed %d, want 50", c)
	}
}

// TestManyRelaysShareSales runs three relays on the same sales. Invariant
// 10 (adding a gateway never breaks 1-9): every order arrives and every
// outbox empties; duplicates are allowed (at least once) and counted. Each
// batch of orders is noticed by one relay, as by its gateway's, a
// different one from batch to batch, so every relay works on every sale.
func TestManyRelaysShareSales(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		e.rdb.SAdd(context.Background(), e.keys.Sales(), "s"+strconv.Itoa(i))
	}
	var relays []*Relay
	for i := range 3 {
		r, _ := e.startRelay("r" + strconv.Itoa(i))
		relays = append(relays, r)
	}
	var ids []string
	for k := range 10 {
		for i := range 3 {
			sale := "s" + strconv.Itoa(i)
			ids = append(ids, e.addOrders(sale, 100)...)
			relays[(i+k)%3].Wrote(sale)
		}
	}
	got := e.received(ids, 60*time.Second)
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("%d orders, %d duplicates on the broker", len(got), dups)
	for i := range 3 {
		sale := "s" + strconv.Itoa(i)
		localstack.WaitFor(t, 10*time.Second, sale+": the outbox emptied", func() bool { return e.outboxEmpty(sale) })
	}
}

func TestMalformedEntryStaysInStream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 5)
	bad, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox("s"), Values: []any{"order_id", "x", "quantity", "lots"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, e.addOrders("s", 5)...)
	r, _ := e.startRelay("r1")
	e.received(ids, 20*time.Second)
	localstack.WaitFor(t, 10*time.Second, "the good entries removed", func() bool {
		n := e.rdb.XLen(ctx, e.keys.Outbox("s")).Val()
		p := e.rdb.XPending(ctx, e.keys.Outbox("s"), Group).Val()
		return n == 1 && p != nil && p.Count == 0
	})
	left := e.rdb.XRange(ctx, e.keys.Outbox("s"), "-", "+").Val()
	if len(left) != 1 || left[0].ID != bad {
		t.Fatalf("outbox holds %v, want only the malformed entry %s", left, bad)
	}
	if m := r.Stats().Malformed; m != 1 {
		t.Fatalf("malformed = %d, want 1", m)
	}
}

// TestShutdownNeverDeletesUnconfirmed stops a relay in the middle of a
// backlog. Invariant 6 (a stop or crash of a relay loses no confirmed
// order): every entry gone from the outbox must be on the broker, and what
// is still in the outbox is there for the next relay.
func TestShutdownNeverDeletesUnconfirmed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 5000)
	r, stop := e.startRelay("r1")
	localstack.WaitFor(t, 20*time.Second, "an entry confirmed", func() bool { return r.Stats().Removed > 0 })
	stop()
	left := map[string]bool{}
	for _, m := range e.rdb.XRange(ctx, e.keys.Outbox("s"), "-", "+").Val() {
		o, err := order.FromStream(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		left[o.OrderID] = true
	}
	var gone []string
	for _, id := range ids {
		if !left[id] {
			gone = append(gone, id)
		}
	}
	t.Logf("stopped with %d of %d entries relayed", len(gone), len(ids))
	e.received(gone, 30*time.Second) // fails unless every removed entry is on the broker

	// A second relay finishes the job, claiming what the first held.
	e.startRelay("r2")
	localstack.WaitFor(t, 30*time.Second, "the second relay draining the outbox", func() bool { return e.outboxEmpty("s") })
}

func TestRunTwice(t *testing.T) {
	e := newEnv(t)
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 10*time.Second, "the relay connected", func() bool { return r.Stats().Connected })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // in case the first Run has not started after all
	if err := r.Run(ctx); err == nil {
		t.Fatal("second Run returned nil")
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv(t)
	if _, err := New(e.cfg, Deps{}); err == nil {
		t.Fatal("New without Redis succeeded")
	}
	cfg := *e.cfg
	cfg.Relay.MaxInFlight = 0
	if _, err := New(&cfg, Deps{Redis: e.rdb}); err == nil {
		t.Fatal("New with max_in_flight 0 succeeded")
	}
}

// rabbitmqctl runs the local node's rabbitmqctl (deploy/local/rabbitmq-cli.sh).
func rabbitmqctl(t *testing.T, args ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := filepath.Join(dir, "..", "deploy", "local", "rabbitmq-cli.sh")
	out, err := exec.CommandContext(ctx, cli, append([]string{"rabbitmqctl"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestNackedEntriesStayPending makes RabbitMQ refuse publishes (a length
// limit with reject-publish overflow, set by policy). Invariant 3 (every 202
// becomes exactly one MySQL row): the refused entries stay in the outbox and
// are published again once the queue takes them again.
func TestNackedEntriesStayPending(t *testing.T) {
	e := newEnv(t)
	policy := "test-maxlen-" + localstack.RandomHex(4)
	rabbitmqctl(t, "set_policy", "--apply-to", "queues", policy, "^"+regexp.QuoteMeta(e.cfg.AMQP.Queue)+"$", `{"max-length":5}`)
	t.Cleanup(func() { rabbitmqctl(t, "clear_policy", policy) })
	// Policies apply asynchronously.
	localstack.WaitFor(t, 30*time.Second, "the policy applied", func() bool {
		for _, line := range strings.Split(rabbitmqctl(t, "list_queues", "--no-table-headers", "name", "policy"), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == e.cfg.AMQP.Queue && f[1] == policy {
				return true
			}
		}
		return false
	})

	// Fill the queue until RabbitMQ refuses (the limit is approximate
	// for a quorum queue).
	localstack.WaitFor(t, 30*time.Second, "the queue full", func() bool {
		ok, err := publishFiller(e)
		if err != nil {
			t.Fatal(err)
		}
		return !ok
	})

	ids := e.addOrders("s", 10)
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 20*time.Second, "10 nacks", func() bool { return r.Stats().Nacked >= 10 })
	if n := e.rdb.XLen(context.Background(), e.keys.Outbox("s")).Val(); n != 10 {
		t.Fatalf("outbox holds %d entries after the nacks, want 10", n)
	}
	e.received(ids, 30*time.Second) // consuming frees the queue: the retries get in
	localstack.WaitFor(t, 20*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("s") })
}

// publishFiller publishes an order of another sale on a confirm channel and reports whether RabbitMQ accepted it.
func publishFiller(e *env) (bool, error) {
	conn, err := broker.Dial(context.Background(), e.cfg.AMQP.URL, "filler")
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	if err := ch.Confirm(false); err != nil {
		return false, err
	}
	o := order.Order{OrderID: "filler-" + localstack.RandomHex(4), SaleID: "filler", UserID: "filler", Quantity: 1, ReservedAt: time.Now()}
	body, err := o.Marshal()
	if err != nil {
		return false, err
	}
	dc, err := ch.PublishWithDeferredConfirm(e.cfg.AMQP.Exchange, broker.RoutingKey, true, false,
		amqp.Publishing{Body: body, MessageId: o.OrderID, ContentType: order.ContentType, DeliveryMode: amqp.Persistent})
	if err != nil {
		return false, err
	}
	return dc.Wait(), nil
}

// TestRelaysStateSnapshots guards Invariant 8's relay leg (MySQL's state
// follows Redis's): an order's entry and the entry of its change of state,
// as the reserve and order scripts write them, are published as they are,
// each, and then deleted; each message
// names its order (message id) and its entry (correlation id), so that a
// return of one is never taken for the other's. An entry written before
// payment windows (no state) is published as a confirmed order.
func TestRelaysStateSnapshots(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const sale = "s"
	if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	finals := []string{order.StatePaid, order.StateCancelled, order.StateExpired}
	type sent struct{ id, state string }
	var want []sent
	pipe := e.rdb.Pipeline()
	add := func(id, state string, fields ...any) {
		v := append([]any{"order_id", id, "sale_id", sale, "user_id", "u-" + id, "quantity", "2",
			"reserved_at", strconv.FormatInt(now, 10)}, fields...)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), Values: v})
		want = append(want, sent{id, state})
	}
	for i := range 30 {
		id := "o" + strconv.Itoa(i) + "-" + localstack.RandomHex(3)
		payBy := strconv.FormatInt(now+60_000, 10)
		add(id, order.StatePendingPayment, "state", order.StatePendingPayment, "pay_by", payBy)
		add(id, finals[i%3], "state", finals[i%3], "pay_by", payBy)
	}
	add("old-"+localstack.RandomHex(3), order.StateConfirmed) // no state, no pay_by
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	e.startRelay("r1")

	tag := "test-" + localstack.RandomHex(4)
	deliveries, err := e.ch.Consume(e.cfg.AMQP.Queue, tag, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.ch.Cancel(tag, false) }()
	missing := map[sent]bool{}
	for _, w := range want {
		missing[w] = true
	}
	entries := map[string]sent{} // correlation id → what it carried
	timeout := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case d := <-deliveries:
			os := ordersOf(t, d)
			first := sent{os[0].OrderID, os[0].State}
			if prev, seen := entries[d.CorrelationId]; seen && prev != first {
				t.Fatalf("message of %v: correlation id %q carried %v before", first, d.CorrelationId, prev)
			}
			entries[d.CorrelationId] = first
			for _, o := range os {
				if o.State == order.StatePendingPayment && o.PayBy.UnixMilli() != now+60_000 {
					t.Fatalf("order %s: pay_by %v", o.OrderID, o.PayBy)
				}
				delete(missing, sent{o.OrderID, o.State})
			}
		case <-timeout:
			t.Fatalf("%d of %d messages never arrived: %v", len(missing), len(want), missing)
		}
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty(sale) })
}

// relay.linger: after a read that found orders, the relay reads again only
// once the linger has passed, so that the entries of the buys that came
// meanwhile (each a script call of its own, noticed at once) leave in one
// read and one message; the first entry after a quiet spell is read at
// once, alone.
func TestLingerGathersEntries(t *testing.T) {
	e := newEnv(t)
	e.cfg.Relay.Linger = time.Second // far longer than the writes below take
	e.cfg.Relay.Poll = time.Hour     // only notices start reads
	r, _ := e.startRelay("r1")
	tag := "test-" + localstack.RandomHex(4)
	deliveries, err := e.ch.Consume(e.cfg.AMQP.Queue, tag, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.ch.Cancel(tag, false) }()
	next := func() []order.Order {
		t.Helper()
		select {
		case d := <-deliveries:
			return ordersOf(t, d)
		case <-time.After(30 * time.Second):
			t.Fatal("no message within 30 s")
			return nil
		}
	}

	first := e.addBatches("lg", 1, 1)
	r.Wrote("lg")
	if got := next(); len(got) != 1 || got[0].OrderID != first[0] {
		t.Fatalf("first message: %d orders, want the one entry alone", len(got))
	}
	var rest []string
	for range 5 {
		rest = append(rest, e.addBatches("lg", 1, 1)...)
		r.Wrote("lg")
		time.Sleep(20 * time.Millisecond) // each its own buy: without the linger, its own read
	}
	got := next()
	ids := make([]string, len(got))
	for i, o := range got {
		ids[i] = o.OrderID
	}
	if !slices.Equal(ids, rest) {
		t.Fatalf("second message: %v, want the five entries written during the linger together %v", ids, rest)
	}
	if s := r.Stats(); s.Messages != 2 {
		t.Errorf("stats: %d messages, want 2", s.Messages)
	}
}
