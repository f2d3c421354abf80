package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// A waiting room's crowd (crowdtest.Room): buyers that each join at one
// gateway, poll at another and buy at a third, as behind a load balancer;
// a request that gets no answer (connection refused, reset, 5xx, 429) goes
// to the next gateway, a buy with the same Idempotency-Key. 32 workers
// share the buyers, each looking after its share in turn, so that every
// buyer holds a place at once, as a crowd does. Intruders
// (crowdtest.Intruders) send meanwhile buys that no gateway may accept.

const (
	roomBuyers  = 1000
	roomWorkers = 32
	roomStock   = 300
	// roomRate is the sale's admit_per_second: the stock's buyers are let
	// in over about four seconds, so that a kill finds admission going on.
	roomRate = 80
	// roomPollCap caps the pause a poll's poll_after_ms asks for, so that
	// the test stays short.
	roomPollCap = 200 * time.Millisecond
)

// startRoomCrowd starts up to roomWorkers workers over the buyers of sale
// (start and rate its settings: start the starts_at, or for an open
// window a moment before the sale's creation) through gs and returns at
// once. A buyer that holds a place already (Pos, Ticket) begins by joining
// again, which must answer the same place. The buyers give up after three
// minutes, and that fails the test.
func startRoomCrowd(t *testing.T, gs []*gatewayProc, sale string, start, rate int64, buyers []*crowdtest.RoomBuyer) *crowdtest.Crowd {
	var bases []string
	for _, g := range gs {
		bases = append(bases, "http://"+g.public)
	}
	return crowdtest.Start(t, crowdtest.Options{Bases: bases, Sales: []string{sale}, Workers: roomWorkers,
		Again: crowdtest.Retry5xxor429, Room: &crowdtest.Room{Start: start, Rate: rate, Buyers: buyers, PollCap: roomPollCap}})
}

// roomCheckPrefix restocks the crowd's sold-out sale, so that its polls
// answer again, and polls every ticket once, from the last place to the
// first, at the given gateways in turn: the head only grows, so what is
// admitted must be a prefix 1..k, and k covers every place seen admitted.
func roomCheckPrefix(t *testing.T, gs []*gatewayProc, sale string, c *crowdtest.Crowd) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(hc, "POST", "http://"+gs[0].admin+"/admin/v1/sales/"+sale+"/restock", `{"quantity":1000}`)
	if err != nil || code != 200 {
		t.Fatalf("restock: %d %s %v", code, raw, err)
	}
	buyers := slices.Clone(c.RoomBuyers())
	sort.Slice(buyers, func(i, j int) bool { return buyers[i].Pos > buyers[j].Pos })
	for _, g := range gs {
		localstack.WaitFor(t, 10*time.Second, "polls answered again after the restock at "+g.public, func() bool {
			code, _, err := crowdtest.Do(hc, "GET", "http://"+g.public+"/v1/sales/"+sale+"/queue", "", map[string]string{"Flashgate-Ticket": buyers[0].Ticket})
			return err == nil && code == 200
		})
	}
	seenTop := c.MaxSeenAdmitted()
	var k int64 // the first place seen admitted, polling from the last
	for n, b := range buyers {
		g := gs[n%len(gs)]
		code, raw, err := crowdtest.Do(hc, "GET", "http://"+g.public+"/v1/sales/"+sale+"/queue", "", map[string]string{"Flashgate-Ticket": b.Ticket})
		var v crowdtest.QueueView
		if err != nil || code != 200 || json.Unmarshal(raw, &v) != nil || v.Position == nil || *v.Position != b.Pos {
			t.Fatalf("final poll of %s (position %d) at %s: %d %s %v", b.User, b.Pos, g.public, code, raw, err)
		}
		switch {
		case v.Status == "admitted" && k == 0:
			k = b.Pos
		case v.Status != "admitted" && k != 0:
			t.Fatalf("position %d waiting after position %d was admitted (polled from the last place to the first): %s", b.Pos, k, raw)
		}
	}
	if k < seenTop {
		t.Fatalf("admitted at the end: 1..%d; a poll during the crowd saw position %d admitted", k, seenTop)
	}
	t.Logf("at the end positions 1..%d of %d admitted; the largest seen admitted during the crowd %d", k, len(buyers), seenTop)
}

// checkRoomOrders checks a room's sale against MySQL: every row is an
// order a buyer was given (accepted: order id → user), nobody holds more
// than the limit of 1, in MySQL and in Redis.
func checkRoomOrders(t *testing.T, s *stack, sale string, accepted map[string]string) {
	t.Helper()
	owners, units := s.owners(sale)
	for id, user := range owners {
		if got, ok := accepted[id]; !ok || got != user {
			t.Fatalf("order %s of %s is in MySQL; the buyers were given it: %v (%q)", id, user, ok, got)
		}
	}
	for user, n := range units {
		if n > 1 {
			t.Fatalf("%s holds %d units in MySQL, limit 1", user, n)
		}
	}
	s.checkLimit(sale, 1, nil)
}
