package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/sale/saletest"
)

// Invariant 9: with buyer authentication on, nobody buys or reads an order
// as a user without that user's valid token. Buyers with good tokens and
// attackers (forged tokens, none, expired, someone else's user_id under
// their own good token, reading others' orders) all at once: every unit
// recorded is a token holder's, each holder holds exactly the per-user
// limit, and no attacker request got anything but 401, 403 or 404.
func TestInvariant9BuyerAuthentication(t *testing.T) {
	k := testKeys(t)
	g := startGateway(t, withBuyerSecret(testSecret))
	const buyers, clicks, limit, attackers = 24, 6, 2, 24
	g.mustSale("hot", fmt.Sprintf(`{"stock":100000,"per_user_limit":%d}`, limit))
	secret := []byte(testSecret)
	expired := jwt.MapClaims{"exp": time.Now().Add(-time.Minute).Unix()}
	tokens := make([]string, buyers)
	for i := range tokens {
		tokens[i] = bearer(sign(t, jwt.SigningMethodHS256, secret, claimsOf(fmt.Sprintf("buyer-%d", i))))
	}
	// The attackers' own good tokens, for buying in others' names.
	own := make([]string, attackers)
	for i := range own {
		own[i] = bearer(sign(t, jwt.SigningMethodHS256, secret, claimsOf(fmt.Sprintf("mallory-%d", i))))
	}
	var mu sync.Mutex
	orders := map[string]string{} // order id → buyer, of the 202s
	var bad []string
	note := func(format string, args ...any) {
		mu.Lock()
		bad = append(bad, fmt.Sprintf(format, args...))
		mu.Unlock()
	}

	// Buyers first, so that attackers have orders to try to read.
	saletest.Burst(buyers*clicks, 64, func(i int) {
		b := i % buyers
		body := `{"quantity":1}`
		if i%2 == 0 {
			body = fmt.Sprintf(`{"user_id":"buyer-%d","quantity":1}`, b)
		}
		r := g.send("POST", "/v1/sales/hot/orders", body, tokens[b])
		switch {
		case r.code == 202:
			if want := fmt.Sprintf("buyer-%d", b); r.str("user_id") != want {
				note("buyer %d's 202 is for %s", b, r.str("user_id"))
			}
			mu.Lock()
			orders[r.str("order_id")] = r.str("user_id")
			mu.Unlock()
		case r.status() != "limit_reached":
			note("buyer %d: %d %s", b, r.code, r.raw)
		}
	})
	ids := make([]string, 0, len(orders))
	for id := range orders {
		ids = append(ids, id)
	}

	type attack struct {
		name  string
		authz string
		body  string
		order bool // a status read instead of a buy
		want  int
	}
	forged := func(i int) []attack {
		victim := fmt.Sprintf("buyer-%d", i%buyers)
		c := claimsOf(victim)
		exp := jwt.MapClaims{"sub": victim, "exp": expired["exp"]}
		return []attack{
			{"none", bearer(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, c)), `{}`, false, 401},
			{"wrong secret", bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret+"x"), c)), `{}`, false, 401},
			{"RS256", bearer(sign(t, jwt.SigningMethodRS256, k.rsa, c)), `{}`, false, 401},
			{"expired", bearer(sign(t, jwt.SigningMethodHS256, secret, exp)), `{}`, false, 401},
			{"no token", "", `{"user_id":"` + victim + `"}`, false, 401},
			{"own token, victim's user_id", own[i%attackers], `{"user_id":"` + victim + `"}`, false, 403},
			{"own token, invented user_id", own[i%attackers], fmt.Sprintf(`{"user_id":"fake-%d"}`, i), false, 403},
			{"own token, victim's order", own[i%attackers], "", true, 404},
			{"forged token, victim's order", bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret+"x"), c)), "", true, 401},
			{"no token, victim's order", "", "", true, 401},
		}
	}
	var plan []attack
	for i := 0; i < attackers*4; i++ {
		plan = append(plan, forged(i)...)
	}
	// Attackers hammer while buyers click again (all at their limit now).
	saletest.Burst(len(plan)+buyers*clicks, 64, func(i int) {
		if i >= len(plan) {
			b := i % buyers
			if r := g.send("POST", "/v1/sales/hot/orders", `{}`, tokens[b]); r.status() != "limit_reached" {
				note("buyer %d again: %d %s", b, r.code, r.raw)
			}
			return
		}
		a := plan[i]
		var authz []string
		if a.authz != "" {
			authz = []string{a.authz}
		}
		var r response
		if a.order {
			r = g.send("GET", "/v1/sales/hot/orders/"+ids[i%len(ids)], "", authz...)
		} else {
			r = g.send("POST", "/v1/sales/hot/orders", a.body, authz...)
		}
		if r.code != a.want {
			note("attack %q: %d %s, want %d", a.name, r.code, r.raw, a.want)
		}
	})
	for _, b := range bad {
		t.Error(b)
	}

	held := g.rdb.HGetAll(context.Background(), g.keys.Users("hot")).Val()
	if len(held) != buyers {
		t.Errorf("%d users hold units, want the %d token holders: %v", len(held), buyers, held)
	}
	for i := 0; i < buyers; i++ {
		if u := fmt.Sprintf("buyer-%d", i); held[u] != fmt.Sprint(limit) {
			t.Errorf("%s holds %q units, want the limit %d", u, held[u], limit)
		}
	}
	for u := range held {
		if !strings.HasPrefix(u, "buyer-") {
			t.Errorf("%s holds units without a token of its own", u)
		}
	}
	if len(orders) != buyers*limit {
		t.Errorf("%d orders accepted, want %d", len(orders), buyers*limit)
	}
	if sold := g.checkLedger("hot"); sold != buyers*limit {
		t.Errorf("sold %d, want %d", sold, buyers*limit)
	}
}
