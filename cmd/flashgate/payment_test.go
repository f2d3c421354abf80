package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// Orders and payment end to end (API.md, "Orders and payment"): the
// binary's gateways, which sweep due orders, its consumer, and real Redis,
// RabbitMQ and MySQL. The order's life is driven through the admin package's
// client, as `flashgate admin order` drives it, and read back from every
// place that holds it: the order view, the Redis records and counters, and
// the MySQL `state` column.

// TestPaymentLifecycle guards Invariant 8 ("an order is never both paid
// and expired or cancelled; the units of an expired or cancelled order
// return to the stock and to the buyer's allowance exactly once"), with
// Invariants 1, 2 and 3 around it: on a sale with a 2 s payment window, 100
// orders are bought (the sale sells out), half are paid through the admin
// API, ten cancelled, the rest left to expire. Every pay and cancel answer
// is the order's final state; the API's conflicts and repeats answer as
// API.md says; the units of the cancelled and expired orders, and only
// those, are sold again, to new buyers and to the buyers whose allowance
// came back, while paid buyers stay at their limit; Redis's records,
// counters and sold, the order views and MySQL's `state` column all end
// with the same state for every order, one row per 202. With batching on
// and off.
func TestPaymentLifecycle(t *testing.T) {
	for _, tc := range []struct{ name, batch string }{{"batched", "64"}, {"unbatched", "1"}} {
		t.Run(tc.name, func(t *testing.T) { testPaymentLifecycle(t, tc.batch) })
	}
}

func testPaymentLifecycle(t *testing.T, batch string) {
	// The closed-sale cache off: a sold_out is then Redis's word, so that
	// the resale below sees the units the moment they are back.
	s := newStack(t, "FLASHGATE_BATCH_MAX_SIZE="+batch, "FLASHGATE_CLOSED_CACHE_TTL=0s")
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale, stock, window = "pay", 150, 2
	s.windowSale(g, sale, stock, 2, window)
	c := adminOf(t, g)
	ctx := bg(t, 3*time.Minute)

	// 100 buyers, 1 or 2 units each: 150, the whole stock.
	users := userIDs("u", 100)
	qty := func(i int) int64 { return 1 + int64(i%2) }
	got, counts := crowd(t, g, sale, "k-", users, qty)
	if len(got) != 100 {
		t.Fatalf("%d orders accepted of 100 (answers %v)", len(got), counts)
	}
	checkPending(t, got, window*time.Second)
	l := ledger{}
	l.add(got, order.StateExpired) // unless paid or cancelled below
	byUser := map[string]string{}
	for _, b := range got {
		byUser[b.user] = b.id
	}
	if v, err := c.Sale(ctx, sale); err != nil || v.Sold != stock || v.Remaining != 0 || v.PendingPayment != 100 {
		t.Fatalf("admin view after the crowd: %+v, %v", v, err)
	}

	// Even buyers pay (50 orders of 1 unit), ten odd ones cancel (2 units
	// each), the 40 others let their 2 units expire.
	var payIDs, cancelIDs []string
	for i, u := range users {
		switch {
		case i%2 == 0:
			payIDs = append(payIDs, byUser[u])
		case i%10 == 1:
			cancelIDs = append(cancelIDs, byUser[u])
		}
	}
	l.set(settleAll(t, c, sale, payIDs, false))
	l.set(settleAll(t, c, sale, cancelIDs, true))
	states, _, _ := l.counts()
	t.Logf("settled before pay_by: %v (a call at or after pay_by expires the order instead)", states)
	if states[order.StatePaid] == 0 || states[order.StateCancelled] == 0 {
		t.Fatalf("no pay or no cancel came before pay_by (%v): nothing of the paid path was tested", states)
	}

	// Repeats and conflicts, on orders whose state is final.
	aPaid := l.ids(func(e *expected) bool { return e.final == order.StatePaid })[0]
	aCancelled := l.ids(func(e *expected) bool { return e.final == order.StateCancelled })[0]
	if o, err := c.Pay(ctx, sale, aPaid); err != nil || o.State != order.StatePaid || o.ID != aPaid {
		t.Fatalf("pay of a paid order: %+v, %v; want 200 paid", o, err)
	}
	if o, err := c.Cancel(ctx, sale, aCancelled); err != nil || o.State != order.StateCancelled {
		t.Fatalf("cancel of a cancelled order: %+v, %v; want 200 cancelled", o, err)
	}
	_, err := c.Pay(ctx, sale, aCancelled)
	wantAPIError(t, "pay of a cancelled order", err, 409, "order_cancelled")
	_, err = c.Cancel(ctx, sale, aPaid)
	wantAPIError(t, "cancel of a paid order", err, 409, "order_paid")
	_, err = c.Pay(ctx, sale, "no-such-order")
	wantAPIError(t, "pay of a missing order", err, 404, "not_found")
	_, err = c.Cancel(ctx, "no-such-sale", aPaid)
	wantAPIError(t, "cancel on a missing sale", err, 404, "not_found")

	// The rest expire; then pay and cancel are refused.
	s.waitNoneDue(sale, time.Minute)
	var lastDue time.Time
	for _, e := range l {
		if e.payBy.After(lastDue) {
			lastDue = e.payBy
		}
	}
	t.Logf("every due order expired %v after the last pay_by (measured by polling)", time.Since(lastDue).Round(10*time.Millisecond))
	anExpired := l.ids(func(e *expected) bool { return e.final == order.StateExpired })[0]
	_, err = c.Pay(ctx, sale, anExpired)
	wantAPIError(t, "pay of an expired order", err, 409, "order_expired")
	_, err = c.Cancel(ctx, sale, anExpired)
	wantAPIError(t, "cancel of an expired order", err, 409, "order_expired")

	for id, o := range views(t, g, sale, l.ids(nil)) {
		if o.State != l[id].final || o.PayBy != nil || o.Quantity != l[id].qty || o.UserID != l[id].user {
			t.Fatalf("order view %s, want state %s, pay_by null", o.Raw, l[id].final)
		}
	}
	s.checkRedis(g, sale, stock, l)

	// The resale: the units back are the cancelled and expired orders'.
	// Their buyers (their allowance back) and 100 new buyers ask for one
	// unit each, more than came back: exactly those units are sold. Five
	// paid buyers (1 unit held) ask for 2: over the limit, still.
	states, live, _ := l.counts()
	back := stock - live
	var again []string
	var paidAgain int
	for i, u := range users {
		switch e := l[byUser[u]]; {
		case e.final != order.StatePaid:
			again = append(again, u)
		case i < 10:
			again = append(again, u)
			paidAgain++
		}
	}
	again = append(again, userIDs("new", 100)...)
	got2, counts2 := crowd(t, g, sale, "k2-", again, func(i int) int64 {
		if e := l[byUser[again[i]]]; e != nil && e.final == order.StatePaid {
			return 2
		}
		return 1
	})
	var units2 int64
	for _, b := range got2 {
		units2 += b.qty
		if e := l[byUser[b.user]]; e != nil && e.final == order.StatePaid {
			t.Fatalf("paid buyer %s got 2 more units, over the limit of 2", b.user)
		}
	}
	if units2 != back {
		t.Fatalf("resale sold %d units; %d came back (answers %v)", units2, back, counts2)
	}
	if counts2["limit_reached"] != paidAgain || counts2["accepted"]+counts2["sold_out"]+counts2["limit_reached"] != len(again) {
		t.Fatalf("resale answers %v; want %d limit_reached (the paid buyers: the others' allowance is back), the rest accepted or sold_out", counts2, paidAgain)
	}
	checkPending(t, got2, window*time.Second)
	l.add(got2, order.StateExpired)
	resold := make([]string, len(got2))
	for i, b := range got2 {
		resold[i] = b.id
	}
	l.set(settleAll(t, c, sale, resold, false))
	s.waitNoneDue(sale, time.Minute)
	t.Logf("resale: %d units back (%v), sold again to %d orders (answers %v)", back, states, len(got2), counts2)

	s.checkRedis(g, sale, stock, l)
	s.checkMySQLStates(sale, l, time.Minute)
	s.checkNoDrift(sale)

	// A sale without a window: its orders are confirmed, pay is a
	// conflict, cancel returns the units.
	const plain = "plain"
	s.windowSale(g, plain, 1, 1, 0)
	code, a, _, err := buy(ctx, g, plain, "solo", "k-solo", 1)
	if err != nil || code != 202 || a.State != order.StateConfirmed || a.PayBy != nil {
		t.Fatalf("buy on a sale without a window: %d %+v %v", code, a, err)
	}
	_, err = c.Pay(ctx, plain, a.OrderID)
	wantAPIError(t, "pay of a confirmed order", err, 409, "conflict")
	if o, err := c.Cancel(ctx, plain, a.OrderID); err != nil || o.State != order.StateCancelled {
		t.Fatalf("cancel of a confirmed order: %+v, %v", o, err)
	}
	if v, err := c.Sale(ctx, plain); err != nil || v.Sold != 0 || v.Remaining != 1 {
		t.Fatalf("after the cancel of a confirmed order: %+v, %v", v, err)
	}
}

// TestPaymentSweepKill9 guards Invariant 8 under Invariant 6's crash: the
// gateway that sweeps is killed (SIGKILL) while thousands of orders fall
// due at once, part of them expired and the rest not yet; a new gateway
// takes over. Every order ends expired exactly once (the expired counter
// is the number of orders), the units come back exactly once (sold 0,
// remaining = stock, no buyer holds a unit), and MySQL follows: every row
// expired, one row per 202.
func TestPaymentSweepKill9(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	const sale, n, window = "sweep", 4000, 4
	s.windowSale(g, sale, n, 1, window)

	got, counts := crowd(t, g, sale, "k-", userIDs("u", n), func(int) int64 { return 1 })
	if len(got) != n {
		t.Fatalf("%d orders accepted of %d (answers %v)", len(got), n, counts)
	}
	checkPending(t, got, window*time.Second)
	l := ledger{}
	l.add(got, order.StateExpired)

	// Kill the gateway as soon as the sweep has begun, and before it ends.
	ctx := context.Background()
	var due int64
	localstack.WaitFor(t, time.Minute, "the sweep began", func() bool {
		due = s.rdb.ZCard(ctx, s.keys.Due(sale)).Val()
		return due < n
	})
	g.kill9(t)
	expired, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "expired").Int64()
	if due == 0 {
		t.Fatalf("the sweep had expired all %d orders before the kill; nothing was cut short", n)
	}
	t.Logf("gateway killed with %d orders expired, %d still due", expired, s.rdb.ZCard(ctx, s.keys.Due(sale)).Val())

	g = s.startGateway(g)
	s.waitNoneDue(sale, time.Minute)
	s.checkRedis(g, sale, n, l)
	s.checkMySQLStates(sale, l, 2*time.Minute)
}

// TestPaymentRedisRestart guards Invariant 8 across a Redis restart: with
// orders pending, paid and cancelled, Redis (a server of this test's own,
// AOF on as in deploy/local) is stopped and started again from its
// append-only file. The pending orders keep their pay_by to the
// millisecond (order view, due set); pays before pay_by still succeed,
// the unpaid ones still expire, paid and cancelled ones stay so; Redis and
// MySQL end with the same state for every order, one row per 202.
//
// The Redis is the test's own rather than the stack's: packages whose
// tests use Redis alone (gateway/, scripts/) do not take the fault lock,
// so restarting the shared one would fail them under `go test ./...`.
func TestPaymentRedisRestart(t *testing.T) {
	r := startRedis(t)
	s := newStack(t, "FLASHGATE_REDIS_ADDRS="+r.addr)
	s.useRedis(r)
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale, stock, window = "aof", 300, 10
	s.windowSale(g, sale, stock, 1, window)
	c := adminOf(t, g)

	users := userIDs("u", 200)
	got, counts := crowd(t, g, sale, "k-", users, func(int) int64 { return 1 })
	if len(got) != 200 {
		t.Fatalf("%d orders accepted of 200 (answers %v)", len(got), counts)
	}
	checkPending(t, got, window*time.Second)
	l := ledger{}
	l.add(got, order.StateExpired)
	byUser := map[string]string{}
	for _, b := range got {
		byUser[b.user] = b.id
	}
	pick := func(f func(int) bool) []string {
		var ids []string
		for i, u := range users {
			if f(i) {
				ids = append(ids, byUser[u])
			}
		}
		return ids
	}
	l.set(settleAll(t, c, sale, pick(func(i int) bool { return i%4 == 0 }), false))
	l.set(settleAll(t, c, sale, pick(func(i int) bool { return i%8 == 1 }), true))

	r.restart(t)
	localstack.WaitFor(t, 30*time.Second, "gateway ready after the Redis restart", func() bool {
		res, err := paymentClient.Get("http://" + g.public + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	// A restarted Redis may have lost its last writes: the sale is held
	// (buys, pays and views 503) until the consumer's repairer has checked
	// it against MySQL.
	ctx := context.Background()
	s.waitRepaired(sale, time.Minute)

	// What Redis kept: pending orders with their pay_by, in the due set
	// at that score; the others as they were.
	for id, o := range views(t, g, sale, l.ids(nil)) {
		e := l[id]
		switch {
		case e.final == order.StatePaid || e.final == order.StateCancelled:
			if o.State != e.final {
				t.Fatalf("order %s after the restart: %s, want %s", id, o.Raw, e.final)
			}
		case o.State == order.StatePendingPayment:
			if o.PayBy == nil || !o.PayBy.Equal(e.payBy) {
				t.Fatalf("order %s after the restart: pay_by %v, the 202 said %v", id, o.PayBy, e.payBy)
			}
			score, err := s.rdb.ZScore(ctx, s.keys.Due(sale), id).Result()
			if err != nil || int64(score) != e.payBy.UnixMilli() {
				t.Fatalf("order %s after the restart: due at %v (%v), want %d", id, score, err, e.payBy.UnixMilli())
			}
		case o.State != order.StateExpired:
			t.Fatalf("order %s after the restart: %s, want pending_payment or expired", id, o.Raw)
		}
	}

	// Pay half of those still pending; the rest expire.
	l.set(settleAll(t, c, sale, pick(func(i int) bool { return i%4 == 2 }), false))
	s.waitNoneDue(sale, time.Duration(window)*time.Second+time.Minute)
	states, _, _ := l.counts()
	t.Logf("after the restart: %v", states)
	s.checkRedis(g, sale, stock, l)
	s.checkMySQLStates(sale, l, time.Minute)
}

// TestAdminOrderGateway runs `flashgate admin` against a real gateway:
// --payment-window on sale create and update, order show, pay (twice) and
// cancel with their answers and conflicts, and the exit codes.
func TestAdminOrderGateway(t *testing.T) {
	g := soloGateway(t)
	usePaymentClient(t)
	env := []string{"FLASHGATE_ADMIN_ADDR=" + g.admin, "FLASHGATE_HTTP_ADDR=" + g.public}
	cli := func(wantCode int, args ...string) map[string]any {
		t.Helper()
		out, code := runFlashgate(t, env, append([]string{"admin"}, args...)...)
		if code != wantCode {
			t.Fatalf("flashgate admin %v: exit %d, want %d\n%s", args, code, wantCode, out)
		}
		var v map[string]any
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("flashgate admin %v: %q is not the JSON answer", args, out)
			}
		} else {
			v = map[string]any{"output": out}
		}
		return v
	}
	const sale = "cli"
	if v := cli(0, "sale", "create", sale, "--stock", "2", "--payment-window", "60"); v["payment_window"] != 60.0 {
		t.Fatalf("create: %v", v)
	}
	ctx := bg(t, time.Minute)
	code, a, b, err := buy(ctx, g, sale, "alice", "k-alice", 1)
	if err != nil || code != 202 {
		t.Fatalf("buy: %d %+v %v", code, a, err)
	}
	checkPending(t, []bought{b}, 60*time.Second)

	v := cli(0, "order", "show", sale, a.OrderID)
	payBy, _ := v["pay_by"].(string)
	if at, err := time.Parse(time.RFC3339, payBy); v["state"] != order.StatePendingPayment || err != nil || !at.Equal(b.payBy) {
		t.Fatalf("order show: %v, want pending_payment due %v", v, b.payBy)
	}
	for range 2 { // pay is idempotent
		if v := cli(0, "order", "pay", sale, a.OrderID); v["state"] != order.StatePaid || v["pay_by"] != nil {
			t.Fatalf("order pay: %v", v)
		}
	}
	if v := cli(1, "order", "cancel", sale, a.OrderID); !strings.Contains(v["output"].(string), "409 Conflict: order_paid") {
		t.Fatalf("cancel of a paid order: %v", v)
	}
	code, a2, _, err := buy(ctx, g, sale, "bob", "k-bob", 1)
	if err != nil || code != 202 {
		t.Fatalf("buy: %d %+v %v", code, a2, err)
	}
	if v := cli(0, "order", "cancel", sale, a2.OrderID); v["state"] != order.StateCancelled {
		t.Fatalf("order cancel: %v", v)
	}
	if v := cli(0, "sale", "show", sale); v["sold"] != 1.0 || v["remaining"] != 1.0 || v["pending_payment"] != 0.0 {
		t.Fatalf("sale show after a pay and a cancel: %v", v)
	}
	if v := cli(1, "order", "pay", sale, "no-such-order"); !strings.Contains(v["output"].(string), "404 Not Found") {
		t.Fatalf("pay of a missing order: %v", v)
	}

	// No window any more: the next order is confirmed, and pay a conflict.
	if v := cli(0, "sale", "update", sale, "--payment-window", "0"); v["payment_window"] != 0.0 {
		t.Fatalf("update: %v", v)
	}
	code, a3, _, err := buy(ctx, g, sale, "carol", "k-carol", 1)
	if err != nil || code != 202 || a3.State != order.StateConfirmed || a3.PayBy != nil {
		t.Fatalf("buy without a window: %d %+v %v", code, a3, err)
	}
	if v := cli(1, "order", "pay", sale, a3.OrderID); !strings.Contains(v["output"].(string), "409 Conflict: conflict") {
		t.Fatalf("pay of a confirmed order: %v", v)
	}
}
