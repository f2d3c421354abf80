package gateway

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/internal/localstack"
)

// With buyer authentication on, a place is the token's sub's: the join
// needs a token, the poll and the buy a ticket of the token's buyer.
func TestRoomBuyerTokens(t *testing.T) {
	g := startGateway(t, withBuyerSecret(testSecret))
	g.mustSale("jw", `{"stock":5,"waiting_room":"fifo","admit_per_second":1000}`)
	tok := func(sub string) map[string]string {
		return map[string]string{"Authorization": bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf(sub)))}
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range h {
			out[a] = b
		}
		return out
	}
	if r := g.do("POST", g.base+"/v1/sales/jw/queue", `{}`, nil); r.code != 401 {
		t.Fatalf("join without a token: %d %s", r.code, r.raw)
	}
	if r := g.do("POST", g.base+"/v1/sales/jw/queue", `{"user_id":"bob"}`, tok("alice")); r.code != 403 || r.status() != "forbidden" {
		t.Fatalf("join for another buyer: %d %s", r.code, r.raw)
	}
	alice := g.do("POST", g.base+"/v1/sales/jw/queue", `{}`, tok("alice"))
	if alice.code != 200 || alice.str("user_id") != "alice" {
		t.Fatalf("join as the token's sub: %d %s", alice.code, alice.raw)
	}
	bob := g.do("POST", g.base+"/v1/sales/jw/queue", `{"user_id":"bob"}`, tok("bob"))
	ta, tb := alice.str("ticket"), bob.str("ticket")
	localstack.WaitFor(t, 5*time.Second, "alice admitted", func() bool {
		return g.do("GET", g.base+"/v1/sales/jw/queue", "", with(tok("alice"), ticketHeader, ta)).status() == "admitted"
	})
	// A poll needs no token: the ticket is alice's already. One sent is
	// checked.
	if r := g.do("GET", g.base+"/v1/sales/jw/queue", "", map[string]string{ticketHeader: ta}); r.code != 200 || r.str("user_id") != "alice" {
		t.Fatalf("poll without a token: %d %s", r.code, r.raw)
	}
	if r := g.do("GET", g.base+"/v1/sales/jw/queue", "", map[string]string{ticketHeader: ta, "Authorization": "Bearer nope"}); r.code != 401 {
		t.Fatalf("poll with a bad token: %d %s", r.code, r.raw)
	}
	if r := g.do("GET", g.base+"/v1/sales/jw/queue", "", with(tok("bob"), ticketHeader, ta)); r.code != 403 || r.status() != "not_admitted" {
		t.Fatalf("poll of alice's ticket as bob: %d %s", r.code, r.raw)
	}
	if r := g.do("POST", g.base+"/v1/sales/jw/orders", `{}`, with(tok("bob"), ticketHeader, ta)); r.code != 403 || r.status() != "not_admitted" {
		t.Fatalf("bob buys with alice's ticket: %d %s", r.code, r.raw)
	}
	if r := g.do("POST", g.base+"/v1/sales/jw/orders", `{}`, with(tok("alice"), ticketHeader, tb)); r.code != 403 || r.status() != "not_admitted" {
		t.Fatalf("alice buys with bob's ticket: %d %s", r.code, r.raw)
	}
	if r := g.do("POST", g.base+"/v1/sales/jw/orders", `{}`, with(tok("alice"), ticketHeader, ta)); r.code != 202 || r.str("user_id") != "alice" {
		t.Fatalf("alice buys with her ticket: %d %s", r.code, r.raw)
	}
}

// A sale of several buckets: the join is on its home, the buys go to the
// buyers' buckets, and the room holds the same.
func TestRoomBuckets(t *testing.T) {
	g := startGateway(t)
	g.mustSale("wb", `{"stock":6,"buckets":3,"waiting_room":"fifo","admit_per_second":1000}`)
	var tickets []string
	for i := range 8 {
		r := g.join("wb", "u"+itoa(i))
		if r.code != 200 || r.num("position") != int64(i+1) {
			t.Fatalf("join %d: %d %s", i, r.code, r.raw)
		}
		tickets = append(tickets, r.str("ticket"))
	}
	if r := g.buy("wb", "u0", 1, ""); r.code != 403 || r.status() != "not_admitted" {
		t.Fatalf("a bucketed sale's buy without a ticket: %d %s", r.code, r.raw)
	}
	localstack.WaitFor(t, 5*time.Second, "all admitted", func() bool { return g.poll("wb", tickets[7]).status() == "admitted" })
	accepted := 0
	for i, tk := range tickets {
		switch r := g.buyWith("wb", "u"+itoa(i), tk); r.code {
		case 202:
			accepted++
		case 410, 409:
		default:
			t.Fatalf("buy %d: %d %s", i, r.code, r.raw)
		}
	}
	if accepted != 6 {
		t.Fatalf("%d of 8 admitted buyers bought 6 units", accepted)
	}
	if v := g.view("wb"); v.num("sold") != 6 || v.num("joined") != 8 || v.num("admitted") != 8 {
		t.Fatalf("admin view: %s", v.raw)
	}
	localstack.WaitFor(t, 5*time.Second, "sold out heard by the room", func() bool { return g.poll("wb", tickets[0]).code == 410 })
	if r := g.join("wb", "late"); r.code != 200 && r.code != 410 {
		t.Fatalf("join of a sold-out bucketed sale: %d %s", r.code, r.raw)
	}
}
