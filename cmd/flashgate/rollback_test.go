package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// A Redis that lost its last second (issue 13): Redis with appendfsync
// everysec may lose up to a second of writes on a machine crash, while the
// orders of that second are already in MySQL. The tests below crash the
// test's own redis-server (kill -9) and bring it back from a copy of its
// append-only folder taken earlier, the cut: everything written after the
// copy is the lost second. A real gateway and real consumers (which repair
// the sale from MySQL) run throughout; the buyers, replays and new buyers
// alike, keep sending from the moment Redis is back.
//
// The contract under test: a replayed Idempotency-Key never becomes a new
// order, nothing is sold beyond the stock or a buyer's limit, every MySQL
// row is an order a buyer was given a 202 for, the admin view agrees with
// MySQL, and the sale answers again within a minute. While a sale is being
// repaired it may answer 503 `unavailable`; the buyers send those again.

// TestRedisRollbackAfterBurst is the scenario: a sale of 5,000 sold
// out to 5,000 buyers with Idempotency-Keys, all of it in MySQL; then Redis
// crashes and comes back from a copy taken right after the sale was
// created (it lost the whole burst). From the moment it is back, 1,000 of
// the buyers send their keys again while 5,000 new buyers try to buy:
// (a) no replayed key becomes a new order (each gets its first answer);
// (b) no new buyer is accepted, each gets sold_out once the sale is
// repaired (503 before, sent again); (c) within a minute of the restart
// the admin view says sold 5,000 = MySQL's units, remaining 0; (d) MySQL
// holds exactly the 5,000 first orders, nobody over the limit; (e) the
// sale answers sold_out within a minute of the restart.
func TestRedisRollbackAfterBurst(t *testing.T) { rollbackAfterBurst(t, 1) }

// TestRedisRollbackBuckets is the same on a sale of three buckets: each
// bucket is repaired from the rows of its orders, and the home counts again
// the units handed to the buckets, whose takes the cut lost too, so that
// the pool does not offer them a second time.
func TestRedisRollbackBuckets(t *testing.T) { rollbackAfterBurst(t, 3) }

func rollbackAfterBurst(t *testing.T, buckets int64) {
	r, s, g := rollbackStack(t)
	const sale, stock, limit = "burst", 5000, 1
	c := adminOf(t, g)
	lim, st := int64(limit), int64(stock)
	if v, err := c.Create(bg(t, 10*time.Second), sale, admin.SaleUpdate{Stock: &st, Limit: &lim, Buckets: &buckets}); err != nil || v.Buckets != buckets {
		t.Fatalf("create sale %s of %d buckets: %v %+v", sale, buckets, err, v)
	}
	cut, _ := r.snapshot(t)

	users := userIDs("u", stock)
	firstRes := startRush(t, g, sale, buyReqs(users, "k-", 1), 32).wait()
	if counts := tally(t, "the burst", firstRes); counts["accepted"] != stock {
		t.Fatalf("the burst: answers %v, want %d accepted", counts, stock)
	}
	first := map[string]buyRes{}
	accepted := map[string]string{}
	for _, b := range firstRes {
		first[b.key] = b
		accepted[b.orderID] = b.user
	}
	s.waitDrained(sale, 2*time.Minute)
	s.checkExactlyOnce(sale, accepted)

	rb := s.rollBack(r, cut, sale)
	if rb.sold != 0 || len(rb.orders) != 0 {
		t.Fatalf("harness: the copy holds sold %d and %d orders; it was taken before the first buy", rb.sold, len(rb.orders))
	}

	replays := buyReqs(users[:1000], "k-", 1)
	fresh := buyReqs(userIDs("n", 5000), "k2-", 1)
	after := startRush(t, g, sale, interleave(replays, fresh), 32).wait()
	var again, newcomers []buyRes
	for _, b := range after {
		if _, ok := first[b.key]; ok {
			again = append(again, b)
		} else {
			newcomers = append(newcomers, b)
		}
	}

	// (a)
	tally(t, "the replays", again)
	checkReplays(t, first, again)

	// (b) and (e)
	counts := tally(t, "the new buyers", newcomers)
	var firstSoldOut time.Time
	waited := 0
	for _, b := range newcomers {
		if b.status == "sold_out" && (firstSoldOut.IsZero() || b.answered.Before(firstSoldOut)) {
			firstSoldOut = b.answered
		}
		if b.unavailable > 0 {
			waited++
		}
	}
	t.Logf("new buyers: answers %v, %d answered 503 or not at all first", counts, waited)
	if counts["accepted"] > 0 || counts["sold_out"] != len(newcomers) {
		t.Errorf("new buyers on the sold-out sale: answers %v, want %d sold_out and not one accepted", counts, len(newcomers))
	}
	switch {
	case firstSoldOut.IsZero():
		t.Errorf("(e) no buy answered sold_out after the restart")
	case firstSoldOut.Sub(rb.at) > time.Minute:
		t.Errorf("(e) the first sold_out came %v after the restart, more than a minute", firstSoldOut.Sub(rb.at).Round(time.Millisecond))
	default:
		t.Logf("(e) the first sold_out came %v after the restart", firstSoldOut.Sub(rb.at).Round(time.Millisecond))
	}

	// (c)
	var v *admin.Sale
	var mysqlUnits int64
	if !within(rb.at.Add(time.Minute), func() bool {
		v = saleView(c, sale)
		mysqlUnits, _ = s.count(sale)
		return v != nil && v.Sold == stock && v.Remaining == 0 && v.Sold == mysqlUnits
	}) {
		if v == nil {
			t.Errorf("(c) a minute after the restart the admin view still refused; MySQL %d units", mysqlUnits)
		} else {
			t.Errorf("(c) a minute after the restart: admin view %s; MySQL %d units; want sold %d = MySQL's units, remaining 0", v.Raw, mysqlUnits, stock)
		}
	}

	// (d)
	s.waitSettled(sale, time.Minute)
	units, perUser, states, rows := s.mysqlLive(sale)
	var strangers []string
	for id := range rows {
		if _, ok := accepted[id]; !ok {
			strangers = append(strangers, id)
		}
	}
	if len(rows) != stock || units != stock || len(strangers) > 0 {
		t.Errorf("(d) MySQL holds %d rows, %d live units (%v), %d of them not among the burst's 202s (first ones %q); want the %d orders of the burst",
			len(rows), units, states, len(strangers), strangers[:min(len(strangers), 5)], stock)
	}
	s.checkLimit(sale, limit, perUser)
	if t.Failed() {
		t.FailNow()
	}
	s.checkNoDrift(sale)
}

// TestRedisRollbackMidBurst cuts in the middle of a burst: 8,000 buyers
// for 5,000 units, the copy taken once half the stock is accepted, while
// they keep buying. Redis crashes a moment later (at least 500 orders
// after the cut, and once 200 of those are in MySQL) and comes back from
// the copy while the buyers go on until each has an answer. The orders
// after the cut that reached MySQL are repaired into Redis; those that got
// a 202 but are in neither MySQL nor the restored Redis are the documented
// loss (their units are sold again): each must have been accepted after
// the cut, and they are counted. Then: MySQL's units ≤ stock, every row an
// order a buyer got a 202 for, nobody over the limit, the admin view's
// sold = MySQL's units once drained, and every key of an order in MySQL,
// sent again, gets its first answer and adds no row.
func TestRedisRollbackMidBurst(t *testing.T) {
	r, s, g := rollbackStack(t)
	const sale, stock, limit, crowdSize = "mid", 5000, 1, 8000
	s.windowSale(g, sale, stock, limit, 0)
	c := adminOf(t, g)
	ctx := context.Background()

	b := startRush(t, g, sale, buyReqs(userIDs("u", crowdSize), "k-", 1), 32)
	b.waitAccepted(t, stock/2, 2*time.Minute)
	soldBefore, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "sold").Int64()
	cut, cutAt := r.snapshot(t)
	soldAfter, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "sold").Int64()
	atCut := b.accepted.Load()
	// The lost second: the crash comes once about 500 more are accepted
	// and some of the orders after the cut are in MySQL (those the repair
	// must bring back); what the pipeline has not forwarded yet is lost.
	var inMySQL int64
	localstack.WaitFor(t, time.Minute, "500 buys accepted after the cut, 200 of them in MySQL", func() bool {
		_, inMySQL = s.count(sale)
		return b.accepted.Load() >= min(atCut+500, stock) && inMySQL >= min(soldAfter+200, stock)
	})
	soldAtCrash, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "sold").Int64()
	rb := s.rollBack(r, cut, sale)
	t.Logf("cut at sold %d..%d, crash at sold %d with %d units in MySQL, the copy holds sold %d", soldBefore, soldAfter, soldAtCrash, inMySQL, rb.sold)
	if rb.sold < soldBefore || rb.sold > soldAfter || rb.sold >= inMySQL {
		t.Fatalf("harness: the copy holds sold %d; want between %d and %d (the cut) and below MySQL's %d (the crash)", rb.sold, soldBefore, soldAfter, inMySQL)
	}

	res := b.wait()
	counts := tally(t, "the crowd", res)
	t.Logf("the crowd: answers %v", counts)
	got := map[string]buyRes{} // order id → its 202
	for _, x := range res {
		if x.code == http.StatusAccepted {
			if prev, dup := got[x.orderID]; dup {
				t.Errorf("order %s given to %s and to %s", x.orderID, prev.user, x.user)
			}
			got[x.orderID] = x
		}
	}

	// Drained: the admin view's sold is MySQL's units.
	var v *admin.Sale
	var mysqlUnits int64
	if !within(time.Now().Add(time.Minute), func() bool {
		v = saleView(c, sale)
		mysqlUnits, _ = s.count(sale)
		return v != nil && v.OutboxPending == 0 && v.Sold == mysqlUnits && v.Remaining == stock-v.Sold
	}) {
		raw := "none"
		if v != nil {
			raw = string(v.Raw)
		}
		t.Errorf("a minute after the crowd: admin view %s, MySQL %d units; want sold = MySQL's units, nothing in the outbox", raw, mysqlUnits)
	}
	s.waitSettled(sale, time.Minute)

	units, perUser, _, rows := s.mysqlLive(sale)
	if units > stock {
		t.Errorf("MySQL holds %d units of a %d-unit sale", units, stock)
	}
	var strangers, forgotten []string
	for id := range rows {
		if _, ok := got[id]; !ok {
			strangers = append(strangers, id)
		}
	}
	if len(strangers) > 0 {
		t.Errorf("%d MySQL rows are orders no buyer got a 202 for, first ones: %q", len(strangers), strangers[:min(len(strangers), 5)])
	}
	var lost, lostEarly []string
	for id, x := range got {
		_, inMySQL := rows[id]
		_, inCopy := rb.orders[id]
		switch {
		case inMySQL:
		case inCopy:
			forgotten = append(forgotten, id)
		default:
			lost = append(lost, id)
			if !x.answered.After(cutAt) {
				lostEarly = append(lostEarly, fmt.Sprintf("%s (answered %v before the cut)", id, cutAt.Sub(x.answered)))
			}
		}
	}
	t.Logf("the documented loss: %d orders were accepted (202) after the cut and are in neither MySQL nor the restored Redis; MySQL %d rows, %d units", len(lost), len(rows), units)
	if len(forgotten) > 0 {
		t.Errorf("%d orders the restored Redis held never reached MySQL, first ones: %q", len(forgotten), forgotten[:min(len(forgotten), 5)])
	}
	if len(lostEarly) > 0 {
		t.Errorf("%d lost orders were accepted before the cut, first ones: %q", len(lostEarly), lostEarly[:min(len(lostEarly), 5)])
	}
	s.checkLimit(sale, limit, perUser)

	// Every key of an order in MySQL, sent again, gets its first answer
	// and reserves nothing.
	var replays []buyReq
	first := map[string]buyRes{}
	for id := range rows {
		if x, ok := got[id]; ok {
			replays = append(replays, x.buyReq)
			first[x.key] = x
		}
	}
	slices.SortFunc(replays, func(a, b buyReq) int { return strings.Compare(a.key, b.key) })
	again := startRush(t, g, sale, replays, 32).wait()
	tally(t, "the replays", again)
	checkReplays(t, first, again)
	s.waitSettled(sale, time.Minute)
	if n, _ := s.count(sale); n != int64(len(rows)) {
		t.Errorf("MySQL holds %d rows after the replays, %d before", n, len(rows))
	}
	if t.Failed() {
		t.FailNow()
	}
	s.checkNoDrift(sale)
}

// TestRedisRollbackPending is the rollback on a sale with a payment window
// (300 s, so that nothing expires during the test): 1,000 orders
// pending_payment, 100 of them then paid and 50 cancelled, all of it in
// MySQL, and Redis back from a copy taken when the sale was created. Once
// repaired, each order's view says its state as MySQL has it, a pending one
// with the pay_by of its 202 (and in the due set at that time), a replayed
// key gets its first answer, the admin view's sold and pending_payment are
// MySQL's, and an admin pay of a restored pending order is 200 paid and
// reaches MySQL.
func TestRedisRollbackPending(t *testing.T) {
	r, s, g := rollbackStack(t)
	const sale, stock, limit, window = "pend", 1000, 1, 300
	s.windowSale(g, sale, stock, limit, window)
	cut, _ := r.snapshot(t)
	c := adminOf(t, g)

	users := userIDs("u", stock)
	firstRes := startRush(t, g, sale, buyReqs(users, "k-", 1), 32).wait()
	if counts := tally(t, "the burst", firstRes); counts["accepted"] != stock {
		t.Fatalf("the burst: answers %v, want %d accepted", counts, stock)
	}
	var got []bought
	first := map[string]buyRes{}
	for _, b := range firstRes {
		got = append(got, b.bought())
		first[b.key] = b
	}
	checkPending(t, got, window*time.Second)
	l := ledger{}
	l.add(got, order.StatePendingPayment)
	ids := l.ids(nil)
	l.set(settleAll(t, c, sale, ids[:100], false))
	l.set(settleAll(t, c, sale, ids[100:150], true))
	s.checkMySQLStates(sale, l, time.Minute)
	states, live, _ := l.counts()
	t.Logf("before the crash: %v, %d live units", states, live)

	rb := s.rollBack(r, cut, sale)
	if rb.sold != 0 || len(rb.orders) != 0 {
		t.Fatalf("harness: the copy holds sold %d and %d orders; it was taken before the first buy", rb.sold, len(rb.orders))
	}

	// Repaired: the admin view is MySQL's again (nothing else asks
	// anything of the sale meanwhile but the gateway's sweeper).
	var v *admin.Sale
	if !within(rb.at.Add(time.Minute), func() bool {
		v = saleView(c, sale)
		return v != nil && v.Sold == live && v.PendingPayment == states[order.StatePendingPayment] && v.Remaining == stock-live
	}) {
		raw := "none"
		if v != nil {
			raw = string(v.Raw)
		}
		t.Fatalf("a minute after the restart: admin view %s; want sold %d, pending_payment %d as in MySQL (%v)", raw, live, states[order.StatePendingPayment], states)
	}

	ctx := context.Background()
	var wrong []string
	for id, o := range views(t, g, sale, ids) {
		e := l[id]
		switch {
		case o.State != e.final || o.UserID != e.user || o.Quantity != e.qty:
			wrong = append(wrong, fmt.Sprintf("%s: %s, want %s of %s", id, o.Raw, e.final, e.user))
		case e.final == order.StatePendingPayment && (o.PayBy == nil || !o.PayBy.Equal(e.payBy)):
			wrong = append(wrong, fmt.Sprintf("%s: pay_by %v, the 202 said %v", id, o.PayBy, e.payBy))
		case e.final == order.StatePendingPayment:
			if score, err := s.rdb.ZScore(ctx, s.keys.Due(sale), id).Result(); err != nil || int64(score) != e.payBy.UnixMilli() {
				wrong = append(wrong, fmt.Sprintf("%s: due at %v (%v), want %d", id, int64(score), err, e.payBy.UnixMilli()))
			}
		case o.PayBy != nil:
			wrong = append(wrong, fmt.Sprintf("%s: %s has a pay_by", id, o.Raw))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d orders not restored as they were, first ones: %q", len(wrong), wrong[:min(len(wrong), 5)])
	}
	if due := s.rdb.ZCard(ctx, s.keys.Due(sale)).Val(); due != states[order.StatePendingPayment] {
		t.Errorf("%d orders in the due set, %d pending_payment", due, states[order.StatePendingPayment])
	}

	pendingKeys := []buyReq{}
	for _, b := range firstRes {
		if l[b.orderID].final == order.StatePendingPayment && len(pendingKeys) < 100 {
			pendingKeys = append(pendingKeys, b.buyReq)
		}
	}
	again := startRush(t, g, sale, pendingKeys, 16).wait()
	tally(t, "the replays", again)
	checkReplays(t, first, again)

	// A pay of a restored pending order.
	toPay := l.ids(func(e *expected) bool { return e.final == order.StatePendingPayment })[0]
	if o, err := c.Pay(bg(t, 10*time.Second), sale, toPay); err != nil || o.State != order.StatePaid || o.PayBy != nil {
		t.Errorf("pay of the restored pending order %s: %+v, %v; want 200 paid", toPay, o, err)
	} else {
		l[toPay].final = order.StatePaid
	}
	if t.Failed() {
		t.FailNow()
	}
	s.checkMySQLStates(sale, l, time.Minute)
	states, live, _ = l.counts()
	v = saleView(c, sale)
	mysqlUnits, perUser, mysqlStates, _ := s.mysqlLive(sale)
	if v == nil || v.PendingPayment != mysqlStates[order.StatePendingPayment] || v.Sold != mysqlUnits || v.Sold != live {
		raw := "none"
		if v != nil {
			raw = string(v.Raw)
		}
		t.Errorf("admin view %s after the pay; MySQL %v, %d live units; want pending_payment %d, sold %d", raw, mysqlStates, mysqlUnits, states[order.StatePendingPayment], live)
	}
	s.checkLimit(sale, limit, perUser)
	if t.Failed() {
		t.FailNow()
	}
	s.checkNoDrift(sale)
}
