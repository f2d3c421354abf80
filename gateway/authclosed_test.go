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
	g.mustSale("over", `{"stock":5,"ends_at":"`+time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)+`"}`)
	if r := g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`, tok); r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	// The gateway learns the sale is sold out from a buyer's answer.
	localstack.WaitFor(t, 10*time.Second, "the gateway to know the sale sold out", func() bool {
		return g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`, tok2).code == 410 &&
			g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`).code == 410
	})
	if r := g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`); r.status() != "sold_out" {
		t.Errorf("tokenless buy of a sold-out sale: %d %s, want 410 sold_out", r.code, r.raw)
	}
	if r := g.send("POST", "/v1/sales/gone/orders", `{"quantity":1}`, "Bearer not-a-token"); r.code != 410 {
		t.Errorf("buy of a sold-out sale with a bad token: %d %s, want 410", r.code, r.raw)
	}
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
	if r := g.send("POST", "/v1/sales/gone/queue", `{}`); r.status() != "sold_out" {
		t.Errorf("tokenless join of a sold-out sale: %d %s, want 410 sold_out", r.code, r.raw)
	}
	// Ended: the gateway learns it from a buy after the end.
	localstack.WaitFor(t, 10*time.Second, "the gateway to know the sale ended", func() bool {
		return g.send("POST", "/v1/sales/over/orders", `{"quantity":1}`, tok).status() == "ended" &&
			g.send("POST", "/v1/sales/over/orders", `{"quantity":1}`).status() == "ended"
	})
	if r := g.send("POST", "/v1/sales/over/queue", `{}`); r.status() != "ended" {
		t.Errorf("tokenless join of an ended sale: %d %s, want 403 ended", r.code, r.raw)
	}
}
