package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// A waiting room under a Redis that lost its last writes (rollbackStack:
// kill -9, then back from a copy of its append-only folder taken earlier).

// TestRoomRedisRollback: Redis crashes (kill -9) and comes back from a
// copy of its append-only folder taken while 30 of 50 buyers had joined
// (rollbackStack, as TestRedisRollbackAfterBurst): the 20 later joins are
// lost, though their buyers hold tickets and, all 50 admitted, bought.
// A lost join may be lost as a place, never as a unit sold twice:
//
//   - every ticket still polls 200 at its position (the sale's key was in
//     the copy); the 30 kept buyers join again at their places, and the
//     admin view counts 30 joined;
//   - every buyer's key answers its first order; a buy with a new key is
//     409 limit_reached, for a lost joiner too;
//   - newcomers join, are let in and buy; a lost joiner joining again
//     gets a place behind what Redis holds;
//   - MySQL holds every 202 once and nothing else, Redis's sold = MySQL's
//     units, nobody over the limit, no drift.
func TestRoomRedisRollback(t *testing.T) {
	r, s, g := rollbackStack(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	const sale, stock, rate = "rbroom", 100, 50
	roomSale(t, g, sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d}`, stock, rate))
	kept := roomJoinAll(t, hc, g, sale, userIDs("u", 30))
	cut, _ := r.snapshot(t)
	lost := roomJoinAll(t, hc, g, sale, userIDs("v", 20))
	all := slices.Concat(kept, lost)
	for i, b := range all {
		if b.Pos != int64(i+1) {
			t.Fatalf("%s joined %d-th at position %d", b.User, i+1, b.Pos)
		}
	}
	localstack.WaitFor(t, 30*time.Second, "every buyer admitted", func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, all[len(all)-1])
		return v.Status == "admitted"
	})
	accepted := map[string]string{} // order id → user
	firsts := map[string]string{}   // user → order id
	for _, b := range all {
		code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.User)
		if code != 202 || a.OrderID == "" {
			t.Fatalf("buy of %s (position %d, admitted): %d %s", b.User, b.Pos, code, raw)
		}
		firsts[b.User], accepted[a.OrderID] = a.OrderID, b.User
	}
	s.waitDrained(sale, 2*time.Minute)

	rb := s.rollBack(r, cut, sale)
	if rb.meta["joined"] != "30" || rb.sold != 0 {
		t.Fatalf("harness: the copy holds joined %q, sold %d; it was taken after the 30th join, before any buy", rb.meta["joined"], rb.sold)
	}
	for _, b := range all {
		if code, v, raw := pollTicket(t, hc, g, sale, b); code != 200 || v.Position == nil || *v.Position != b.Pos {
			t.Fatalf("poll of %s (position %d) after the rollback: %d %s", b.User, b.Pos, code, raw)
		}
	}
	for _, b := range kept {
		if v := joinOnce(t, hc, g, sale, b.User); *v.Position != b.Pos {
			t.Fatalf("%s joined again after the rollback at position %d, had %d", b.User, *v.Position, b.Pos)
		}
	}
	if v := roomAdmin(t, g, sale); v.Joined != int64(len(kept)) {
		t.Fatalf("admin view after the rollback: %+v, want %d joined", v, len(kept))
	}
	// Never a unit twice: the first key answers the first order, a new
	// key finds the buyer's unit (the sale is checked against MySQL
	// before it sells again: 503 meanwhile, sent again).
	for _, b := range all {
		if code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.User); code != 202 || a.OrderID != firsts[b.User] {
			t.Fatalf("%s's key after the rollback: %d %s; first order %s", b.User, code, raw, firsts[b.User])
		}
		if code, a, raw := roomBuyOnce(t, hc, g, sale, b, "again-"+b.User); code != 409 || a.Status != "limit_reached" {
			t.Fatalf("%s (position %d, its join lost: %v) bought again after the rollback: %d %s", b.User, b.Pos, slices.Contains(lost, b), code, raw)
		}
	}
	// Newcomers take places after what Redis kept; a lost joiner joining
	// again gets a place behind them.
	fresh := roomJoinAll(t, hc, g, sale, userIDs("n", 10))
	for i, b := range fresh {
		if b.Pos <= int64(len(kept)) || i > 0 && b.Pos <= fresh[i-1].Pos {
			t.Fatalf("newcomer %s joined %d-th at position %d, after %d places kept", b.User, i+1, b.Pos, len(kept))
		}
	}
	again := joinOnce(t, hc, g, sale, lost[0].User)
	if *again.Position <= fresh[len(fresh)-1].Pos {
		t.Fatalf("%s, its join lost, joined again at position %d, not behind the newcomers (last at %d)", lost[0].User, *again.Position, fresh[len(fresh)-1].Pos)
	}
	t.Logf("after the rollback: newcomers at positions %d..%d; %s, whose join at %d was lost, joins again at %d",
		fresh[0].Pos, fresh[len(fresh)-1].Pos, lost[0].User, lost[0].Pos, *again.Position)
	localstack.WaitFor(t, 30*time.Second, "the newcomers admitted", func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, fresh[len(fresh)-1])
		return v.Status == "admitted"
	})
	for _, b := range fresh {
		code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.User)
		if code != 202 || a.OrderID == "" {
			t.Fatalf("buy of newcomer %s (position %d, admitted): %d %s", b.User, b.Pos, code, raw)
		}
		accepted[a.OrderID] = b.User
	}

	s.waitSettled(sale, 2*time.Minute)
	s.checkExactlyOnce(sale, accepted)
	checkRoomOrders(t, s, sale, accepted)
	if v := roomAdmin(t, g, sale); v.Sold != int64(len(accepted)) || v.Stock != stock {
		t.Fatalf("admin view at the end: %+v, want sold %d", v, len(accepted))
	}
	s.checkNoDrift(sale)
}

// TestRoomRollbackClock: an admin's change of admit_per_second, answered
// 200, is lost with Redis's last second (kill -9, the copy taken before
// it). Gateway A, which made the change, holds the lost clock (rate 1000);
// Redis, the admin view and gateway B, started after the crash, hold the
// copy's (rate 1). Both gateways must come to answer a ticket alike: the
// waiting room admits "at admit_per_second for the whole sale (all
// gateways together)", in position order.
//
// A gateway keeps the clock of the greater version (rooms.store,
// sale.Newer), and the lost change's is greater than the copy's: the hold
// pass after the restart (hold.lua) moves a room's clock version to the
// time it runs, past every version given before, so that A takes Redis's
// clock at its next read (a lost subscription reads every room again).
func TestRoomRollbackClock(t *testing.T) {
	r, s, ga := rollbackStack(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	const sale, n = "rbclock", 100
	roomSale(t, ga, sale, `{"stock":200,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":1}`)
	bs := roomJoinAll(t, hc, ga, sale, userIDs("u", n))
	last := bs[n-1]
	cut, _ := r.snapshot(t)
	if code, raw, err := httpDo(hc, "PUT", "http://"+ga.admin+"/admin/v1/sales/"+sale, `{"admit_per_second":1000}`); err != nil || code != 200 {
		t.Fatalf("rate change: %d %s %v", code, raw, err)
	}
	localstack.WaitFor(t, 10*time.Second, "the last place admitted at 1,000 a second", func() bool {
		_, v, _ := pollTicket(t, hc, ga, sale, last)
		return v.Status == "admitted"
	})
	s.rollBack(r, cut, sale)
	localstack.WaitFor(t, 30*time.Second, "gateway A ready after the crash", func() bool {
		code, _, err := httpDo(hc, "GET", "http://"+ga.public+"/readyz", "")
		return err == nil && code == 200
	})
	gb := s.startGateway(nil)
	v := roomAdmin(t, gb, sale)
	t.Logf("after the crash Redis holds %d joined, %d admitted", v.Joined, v.Admitted)
	var a, b string
	defer func() {
		if t.Failed() {
			t.Logf("the last place's last polls:\nA: %s\nB: %s", a, b)
		}
	}()
	localstack.WaitFor(t, 30*time.Second, "gateways A and B answering the last place alike", func() bool {
		_, va, rawA := pollTicket(t, hc, ga, sale, last)
		_, vb, rawB := pollTicket(t, hc, gb, sale, last)
		a, b = rawA, rawB
		return va.Status == vb.Status
	})
}
