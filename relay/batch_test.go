package relay

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

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
