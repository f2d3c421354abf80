package gateway

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/internal/localstack"
)

// A buy or a join of a sale the gateway knows to be sold out or ended is
// answered 410 / 403 before the token is checked (API.md "Buyer
// authentication"); an open sale's, an unknown sale's and a buy with an
// Idempotency-Key (whose repeat answers the first answer) still need one.
func TestClosedSaleAnsweredBeforeToken(t *testing.T) {
	g := startGateway(t, withBuyerSecret(testSecret))
	tok := bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("u1")))
	tok2 := bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("u2")))
	g.mustSale("open", `{"stock":5}`)
	g.mustSale("gone", `{"stock":1}`)
	g.mustSale("lined", `{"stock":5,"waiting_room":"fifo"}`)
	g.mustSale("over", `{"stock":5,"ends_at":"`+time.Now().Add(500*time.Millisecond).UTC().Format(time.RFC3339Nano)+`"}`)
	if r := g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`, tok); r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	// The gateway learns that a sale is closed from a buyer's answer and
	// keeps it for cache.closed_ttl (500 ms): each check teaches it first.
	closed := func(what, sale, path, want string, hdr ...string) {
		t.Helper()
		localstack.WaitFor(t, 10*time.Second, what, func() bool {
			g.send("POST", "/v1/sales/"+sale+"/orders", `{"quantity":1}`, tok2)
			return g.send("POST", path, `{"quantity":1}`, hdr...).status() == want
		})
	}
	closed("a tokenless buy of a sold-out sale answered sold_out", "gone", "/v1/sales/gone/orders", "sold_out")
	closed("a buy of a sold-out sale with a bad token answered sold_out", "gone", "/v1/sales/gone/orders", "sold_out", "Bearer not-a-token")
	closed("a tokenless join of a sold-out sale answered sold_out", "gone", "/v1/sales/gone/queue", "sold_out")
	closed("a tokenless buy of an ended sale answered ended", "over", "/v1/sales/over/orders", "ended")
	closed("a tokenless join of an ended sale answered ended", "over", "/v1/sales/over/queue", "ended")
	// What still needs the token, the gateway knowing the sale closed or not.
	g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`, tok2)
	req := map[string]string{"Idempotency-Key": "k1"}
	if r := g.do("POST", g.base+"/v1/sales/gone/orders", `{"quantity":1}`, req); r.code != 401 {
		t.Errorf("tokenless buy with an Idempotency-Key: %d %s, want 401", r.code, r.raw)
	}
	if r := g.send("POST", "/v1/sales/open/orders", `{"quantity":1}`); r.code != 401 {
		t.Errorf("tokenless buy of an open sale: %d %s, want 401", r.code, r.raw)
	}
	if r := g.send("POST", "/v1/sales/nosuch/orders", `{"quantity":1}`); r.code != 401 {
		t.Errorf("tokenless buy of an unknown sale: %d %s, want 401", r.code, r.raw)
	}
	if r := g.send("POST", "/v1/sales/lined/queue", `{}`); r.code != 401 {
		t.Errorf("tokenless join of an open room: %d %s, want 401", r.code, r.raw)
	}
}
