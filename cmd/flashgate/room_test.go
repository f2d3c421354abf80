package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// The waiting room (API.md "Waiting room", DESIGN.md invariant 11) on real
// processes: gateways killed (SIGKILL) while a crowd waits, and Redis
// restarted or rolled back under a room. A place lives in Redis and a ticket is signed
// with a key of the sale's, so neither a dead gateway nor a restarted
// Redis may cost a buyer its place, and no buy may pass without an
// admitted ticket of its buyer.
//
// Files: roomcrowd_test.go is the crowd and its checks, roomrollback_test.go
// the tests of a Redis that lost its last writes (rollback_test.go's cut).

// roomSale creates a sale with a waiting room through g's admin API; body
// is the PUT's JSON.
func roomSale(t *testing.T, g *gatewayProc, sale, body string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale, body)
	if err != nil || code != 201 {
		t.Fatalf("create sale %s: %d %s %v", sale, code, raw, err)
	}
}

// roomAdminView is the admin view's figures the tests read.
type roomAdminView struct {
	Stock, Sold, Remaining, Joined, Admitted int64
	WaitingRoom                              string `json:"waiting_room"`
}

func roomAdmin(t *testing.T, g *gatewayProc, sale string) roomAdminView {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(c, "GET", "http://"+g.admin+"/admin/v1/sales/"+sale, "")
	var v roomAdminView
	if err != nil || code != 200 || json.Unmarshal([]byte(raw), &v) != nil {
		t.Fatalf("admin view of %s: %d %s %v", sale, code, raw, err)
	}
	return v
}

// joinOnce joins user to sale's room at g and returns the view.
func joinOnce(t *testing.T, c *http.Client, g *gatewayProc, sale, user string) crowdtest.QueueView {
	t.Helper()
	code, raw, err := crowdtest.Do(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/queue", `{"user_id":"`+user+`"}`, nil)
	var v crowdtest.QueueView
	if err != nil || code != 200 || json.Unmarshal(raw, &v) != nil || v.Position == nil || v.Ticket == "" {
		t.Fatalf("join of %s to %s at %s: %d %s %v", user, sale, g.public, code, raw, err)
	}
	return v
}

// roomStartsAt is a starts_at d from now, to the millisecond, as Unix ms and
// as the admin API takes it.
func roomStartsAt(d time.Duration) (int64, string) {
	at := time.UnixMilli(time.Now().Add(d).UnixMilli())
	return at.UnixMilli(), at.UTC().Format(time.RFC3339Nano)
}

// TestRoomGatewayKill9 guards invariant 11 ("on a sale with a waiting room
// nobody buys without an admission; admissions follow positions") and 6
// past a crash: three gateways on one Redis, a consumer, a fifo room of
// 300 units, per_user_limit 1, admit_per_second 80, a crowd of 1,000
// buyers who join before the start at gateway i%3, poll at i+1 and buy at
// i+2. In the middle of admission gateway 0 is killed (SIGKILL); its
// buyers go on at the others with the tickets they hold, and joining again
// finds their places. Intruders send, throughout, buys without a ticket,
// with a forged one, another buyer's or another sale's. Then:
//
//   - every intruder's buy was 403 not_admitted, and so was every buy sent
//     with a ticket still far from the head;
//   - no 202, and no poll saying admitted, for a position the clock had
//     not reached (start + position/rate), at any gateway;
//   - the places are 1..1000, one per buyer, the same at every gateway and
//     on every join; no poll saw a position waiting after a larger one had
//     been seen admitted;
//   - every 202 is exactly one MySQL row of its buyer, nothing else is
//     there, Redis's sold = MySQL's units = the stock, nobody holds more
//     than one unit; reconcile finds no drift;
//   - once the sale is restocked (so that polls answer again), every
//     ticket polled from the last place to the first sees an admitted
//     prefix 1..k, k at least the largest place seen admitted.
func TestRoomGatewayKill9(t *testing.T) {
	s := newStack(t, "FLASHGATE_LOG_LEVEL=warn")
	gs := []*gatewayProc{s.startGateway(nil), s.startGateway(nil), s.startGateway(nil)}
	s.startConsumers(1)
	const sale = "room"
	start, starts := roomStartsAt(3 * time.Second)
	roomSale(t, gs[1], sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d,"starts_at":%q}`,
		roomStock, roomRate, starts))
	// Another sale's room, for a ticket that is genuine but not this sale's.
	roomSale(t, gs[1], "elsewhere", `{"stock":10,"waiting_room":"fifo"}`)
	foreign := joinOnce(t, &http.Client{Timeout: 5 * time.Second}, gs[2], "elsewhere", "x-foreign")

	c := startRoomCrowd(t, gs, sale, start, roomRate, crowdtest.NewRoomBuyers(roomBuyers))
	in := c.StartIntruders(crowdtest.Ticket{User: "x-foreign", Ticket: foreign.Ticket})

	c.WaitAccepted(roomStock/4, time.Minute)
	gs[0].kill9(t)
	at, sentAt := c.N202(), in.Sent()
	t.Logf("gateway 0 killed after %d buys accepted, the largest place seen admitted %d", at, c.MaxSeenAdmitted())

	c.Wait()
	localstack.WaitFor(t, 10*time.Second, "intruders answered by the living gateways", func() bool { return in.Sent() > sentAt+20 })
	in.Stop()
	c.Check()
	if c.N202() == at {
		t.Fatal("no buy accepted after the kill: admission was over before it")
	}
	if c.Rejoins() == 0 {
		t.Fatal("no buyer polled past the dead gateway and joined again")
	}
	if in.Refused() != in.Sent() || in.Sent() == 0 {
		t.Fatalf("intruders: %d of %d refused", in.Refused(), in.Sent())
	}
	t.Logf("intruders: %d buys, each 403 not_admitted (%d after the kill)", in.Sent(), in.Sent()-sentAt)

	live := gs[1]
	v := roomAdmin(t, live, sale)
	if v.Joined != roomBuyers || v.Sold != roomStock || v.Remaining != 0 || v.WaitingRoom != "fifo" {
		t.Fatalf("admin view after the crowd: %+v, want %d joined, %d sold", v, roomBuyers, roomStock)
	}
	s.waitDrained(sale, 2*time.Minute)
	accepted := c.Accepted(sale)
	if len(accepted) != roomStock {
		t.Fatalf("%d buys accepted, want %d (the stock)", len(accepted), roomStock)
	}
	s.checkExactlyOnce(sale, accepted)
	checkRoomOrders(t, s, sale, accepted)
	s.checkNoDrift(sale)

	roomCheckPrefix(t, gs[1:], sale, c)
}

// TestRoomRedisRestart guards the waiting room across a restart of Redis
// (the test's own redis-server, AOF on, as `make up` runs it): a gateway
// and a consumer, a fifo room of 100 units for 150 buyers at 20 admitted
// a second. The 150 join; the first 20, once admitted, buy. Redis is
// stopped and started again on its data. Then:
//
//   - every ticket given before the restart polls 200 with its position,
//     at the gateway that gave it and at a gateway started after the
//     restart, which reads the room (its ticket key, its clock) from the
//     restarted Redis;
//   - every buyer joining again finds its place; the admin view counts
//     150 joined; a buy without an admitted ticket is 403 not_admitted;
//   - the crowd then goes on through both gateways: the 20 early buyers'
//     keys answer their first 202, the others are let in and buy as
//     before, in order of place, none before the clock allows (as in
//     TestRoomGatewayKill9); every 202 is exactly one MySQL row, Redis's
//     sold = MySQL's units = the stock, nobody over the limit, no drift.
func TestRoomRedisRestart(t *testing.T) {
	r := startRedis(t)
	s := newStack(t, "FLASHGATE_REDIS_ADDRS="+r.addr, "FLASHGATE_LOG_LEVEL=warn")
	s.useRedis(r)
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale, n, stock, rate, early = "aofroom", 150, 100, 20, 20
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	// An open window: the clock starts at the sale's creation, after this.
	start := time.Now().UnixMilli()
	roomSale(t, g, sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d}`, stock, rate))
	roomSale(t, g, "elsewhere", `{"stock":10,"waiting_room":"fifo"}`)
	foreign := joinOnce(t, hc, g, "elsewhere", "x-foreign")

	// One after the other: buyer i is at position i+1.
	buyers := crowdtest.NewRoomBuyers(n)
	for _, b := range buyers {
		v := joinOnce(t, hc, g, sale, b.User)
		b.Pos, b.Ticket = *v.Position, v.Ticket
		if b.Pos != int64(b.I+1) {
			t.Fatalf("%s joined %d-th at position %d", b.User, b.I+1, b.Pos)
		}
	}
	localstack.WaitFor(t, 30*time.Second, fmt.Sprintf("position %d admitted", early), func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, buyers[early-1])
		return v.Status == "admitted"
	})
	firsts := map[string]string{} // user → order id
	for _, b := range buyers[:early] {
		code, raw, err := crowdtest.Do(hc, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"`+b.User+`","quantity":1}`,
			map[string]string{"Flashgate-Ticket": b.Ticket, "Idempotency-Key": "k-" + b.User})
		var a crowdtest.BuyAnswer
		if err != nil || code != 202 || json.Unmarshal(raw, &a) != nil || a.OrderID == "" {
			t.Fatalf("buy of %s (position %d, admitted) before the restart: %d %s %v", b.User, b.Pos, code, raw, err)
		}
		firsts[b.User] = a.OrderID
	}

	r.restart(t)
	localstack.WaitFor(t, 30*time.Second, "gateway ready after the Redis restart", func() bool {
		code, _, err := httpDo(hc, "GET", "http://"+g.public+"/readyz", "")
		return err == nil && code == 200
	})
	s.waitRepaired(sale, time.Minute)
	// A gateway that knew nothing before the restart: what it knows of
	// the room it reads from the restarted Redis.
	g2 := s.startGateway(nil)
	gs := []*gatewayProc{g, g2}
	for _, b := range buyers {
		for _, gw := range gs {
			code, v, raw := pollTicket(t, hc, gw, sale, b)
			if code != 200 || v.Position == nil || *v.Position != b.Pos || v.UserID != b.User {
				t.Fatalf("poll of %s (position %d) after the restart at %s: %d %s", b.User, b.Pos, gw.public, code, raw)
			}
		}
		v := joinOnce(t, hc, gs[b.I%2], sale, b.User)
		if *v.Position != b.Pos {
			t.Fatalf("%s joined again after the restart at position %d, had %d", b.User, *v.Position, b.Pos)
		}
	}
	if v := roomAdmin(t, g2, sale); v.Joined != n || v.WaitingRoom != "fifo" || v.Sold != early {
		t.Fatalf("admin view after the restart: %+v, want %d joined, %d sold", v, n, early)
	}
	for _, gw := range gs {
		for _, hdr := range []map[string]string{nil, {"Flashgate-Ticket": foreign.Ticket}} {
			code, raw, err := crowdtest.Do(hc, "POST", "http://"+gw.public+"/v1/sales/"+sale+"/orders", `{"user_id":"x-foreign","quantity":1}`, hdr)
			if err != nil || code != 403 || !strings.Contains(string(raw), `"not_admitted"`) {
				t.Fatalf("buy without a ticket of this sale at %s after the restart: %d %s %v", gw.public, code, raw, err)
			}
		}
	}

	c := startRoomCrowd(t, gs, sale, start, rate, buyers)
	in := c.StartIntruders(crowdtest.Ticket{User: "x-foreign", Ticket: foreign.Ticket})
	c.Wait()
	in.Stop()
	c.Check()
	if in.Refused() != in.Sent() || in.Sent() == 0 {
		t.Fatalf("intruders: %d of %d refused", in.Refused(), in.Sent())
	}
	accepted := c.Accepted(sale)
	for user, id := range firsts {
		if accepted[id] != user {
			t.Fatalf("%s's key after the restart did not answer its first order %s", user, id)
		}
	}
	if len(accepted) != stock {
		t.Fatalf("%d buys accepted, want %d (the stock)", len(accepted), stock)
	}
	s.waitDrained(sale, 2*time.Minute)
	s.checkExactlyOnce(sale, accepted)
	checkRoomOrders(t, s, sale, accepted)
	s.checkNoDrift(sale)
	roomCheckPrefix(t, gs, sale, c)
}

// roomJoinAll joins the users, one after the other, at g and returns them
// as buyers holding their places.
func roomJoinAll(t *testing.T, c *http.Client, g *gatewayProc, sale string, users []string) []*crowdtest.RoomBuyer {
	t.Helper()
	bs := make([]*crowdtest.RoomBuyer, len(users))
	for i, u := range users {
		v := joinOnce(t, c, g, sale, u)
		bs[i] = &crowdtest.RoomBuyer{I: i, User: u, Pos: *v.Position, Ticket: v.Ticket}
	}
	return bs
}

// pollTicket polls b's ticket at g.
func pollTicket(t *testing.T, c *http.Client, g *gatewayProc, sale string, b *crowdtest.RoomBuyer) (int, crowdtest.QueueView, string) {
	t.Helper()
	code, raw, err := crowdtest.Do(c, "GET", "http://"+g.public+"/v1/sales/"+sale+"/queue", "", map[string]string{"Flashgate-Ticket": b.Ticket})
	if err != nil {
		t.Fatalf("poll of %s at %s: %v", b.User, g.public, err)
	}
	var v crowdtest.QueueView
	_ = json.Unmarshal(raw, &v)
	return code, v, string(raw)
}

// roomBuyOnce sends b's buy with its ticket and key at g, again while it
// is answered 503 (a sale held until its check against MySQL), for up to
// a minute.
func roomBuyOnce(t *testing.T, c *http.Client, g *gatewayProc, sale string, b *crowdtest.RoomBuyer, key string) (int, crowdtest.BuyAnswer, string) {
	t.Helper()
	var (
		code int
		raw  []byte
		err  error
	)
	localstack.WaitFor(t, time.Minute, "an answer other than 503 to "+b.User+"'s buy", func() bool {
		code, raw, err = crowdtest.Do(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"`+b.User+`","quantity":1}`,
			map[string]string{"Flashgate-Ticket": b.Ticket, "Idempotency-Key": key})
		return err == nil && code != 503
	})
	var a crowdtest.BuyAnswer
	_ = json.Unmarshal(raw, &a)
	return code, a, string(raw)
}
