package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flashgate/flashgate/config"
)

// Issue 12, finding 8: repeated restocks took the stock to 6e9, past the
// ceiling a PUT enforces. A restock that would pass it is 409 conflict,
// with an error, and changes nothing; one that reaches it exactly is fine.
func TestRestockCeiling(t *testing.T) {
	g := startGateway(t)
	g.mustSale("cap", `{"stock":`+strconv.Itoa(sale.MaxStock-10)+`}`)
	if r := g.adminPost("cap", "restock", `{"quantity":10}`); r.code != 200 || r.num("stock") != sale.MaxStock {
		t.Fatalf("restock to the ceiling: %d %s", r.code, r.raw)
	}
	for _, q := range []int{1, sale.MaxStock, sale.MaxStock, sale.MaxStock, sale.MaxStock, sale.MaxStock} {
		r := g.adminPost("cap", "restock", `{"quantity":`+strconv.Itoa(q)+`}`)
		if r.code != 409 || r.status() != "conflict" || r.str("error") == "" {
			t.Errorf("restock %d past the ceiling: %d %s, want 409 conflict with an error", q, r.code, r.raw)
		}
	}
	if v := g.view("cap"); v.num("stock") != sale.MaxStock || v.num("remaining") != sale.MaxStock {
		t.Errorf("after refused restocks: %s", v.raw)
	}
	// Sold units count toward the stock, not against the ceiling: it bounds
	// the total ever offered, as a PUT's stock does.
	g.mustSale("sold", `{"stock":5}`)
	if r := g.buy("sold", "u", 1, ""); r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	if r := g.adminPost("sold", "restock", `{"quantity":`+strconv.Itoa(sale.MaxStock-4)+`}`); r.code != 409 {
		t.Errorf("restock past the ceiling on a sale with sales: %d %s", r.code, r.raw)
	}
	if r := g.adminPost("sold", "restock", `{"quantity":`+strconv.Itoa(sale.MaxStock-5)+`}`); r.code != 200 || r.num("stock") != sale.MaxStock {
		t.Errorf("restock to the ceiling: %d %s", r.code, r.raw)
	}
	g.checkLedger("sold")
}

// Issue 12, finding 8: a create refused for a missing stock still added the
// id to the sale registry. A refused create leaves it as it was; a create
// adds the id (before its script, so that the relay knows every sale that
// can take an order), and an update without stock needs no adding.
func TestRefusedCreateLeavesRegistry(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	member := func(sale string) bool { return g.rdb.SIsMember(ctx, g.keys.Sales(), sale).Val() }
	if r := g.put("nostock", `{"per_user_limit":2}`); r.code != 400 || r.status() != "bad_request" || r.str("error") == "" {
		t.Errorf("create without stock: %d %s, want 400 bad_request with an error", r.code, r.raw)
	}
	if member("nostock") {
		t.Errorf("a create refused for a missing stock added the sale to the registry")
	}
	// Through the Store, past the handler's checks: a window that the
	// script would refuse is refused before the registry is touched.
	start, end := int64(2_000_000_000_000), int64(1_000_000_000_000)
	stock := int64(5)
	if _, _, err := g.sales.Upsert(ctx, "badwin", sale.Update{Stock: &stock, StartsAt: &start, EndsAt: &end}); !errors.Is(err, sale.ErrBadWindow) {
		t.Errorf("create with ends before starts: %v, want sale.ErrBadWindow", err)
	}
	if member("badwin") {
		t.Errorf("a create refused for its window added the sale to the registry")
	}
	if n := g.rdb.SCard(ctx, g.keys.Sales()).Val(); n != 0 {
		t.Errorf("registry holds %d ids after refused creates only", n)
	}
	g.mustSale("made", `{"stock":1}`)
	if r := g.put("made", `{"per_user_limit":3}`); r.code != 200 || r.num("per_user_limit") != 3 {
		t.Errorf("update without stock: %d %s", r.code, r.raw)
	}
	if !member("made") {
		t.Errorf("a created sale is not in the registry")
	}
}

// PUTs racing on new sales: on each "race" sale one with stock and one
// without, in either order; on each "lone" sale two without. Whatever each
// answers, a sale exists exactly when the registry names it (exists with no
// id: the relay would never find its orders; an id with no sale: the
// refused create of issue 12), and an update can only have applied to a
// created sale.
func TestConcurrentCreatesAndRegistry(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	const sales = 40
	var mu sync.Mutex
	answers := map[string][]int{}
	saletest.Burst(4*sales, sales, func(i int) {
		sale, body := "race"+itoa(i/4), `{"stock":3}`
		switch i % 4 {
		case 1:
			body = `{"per_user_limit":2}`
		case 2, 3:
			sale, body = "lone"+itoa(i/4), `{"per_user_limit":2}`
		}
		r := g.put(sale, body)
		mu.Lock()
		answers[sale] = append(answers[sale], r.code)
		mu.Unlock()
	})
	for i := 0; i < sales; i++ {
		for _, sale := range []string{"race" + itoa(i), "lone" + itoa(i)} {
			exists := g.rdb.Exists(ctx, g.keys.Meta(sale)).Val() == 1
			member := g.rdb.SIsMember(ctx, g.keys.Sales(), sale).Val()
			if exists != strings.HasPrefix(sale, "race") || member != exists {
				t.Errorf("%s: exists %v, in the registry %v, answers %v", sale, exists, member, answers[sale])
			}
			got, want := fmt.Sprint(answers[sale]), []string{"[201 200]", "[200 201]", "[201 400]", "[400 201]"}
			if !exists {
				want = []string{"[400 400]"}
			}
			if !slices.Contains(want, got) {
				t.Errorf("%s: answers %s, want one of %v", sale, got, want)
			}
		}
	}
	if n := g.rdb.SCard(ctx, g.keys.Sales()).Val(); n != sales {
		t.Errorf("registry holds %d ids, want %d", n, sales)
	}
}

// Issue 12, finding 8: of two Authorization fields the first was used, and
// a token with white space after it was taken as the token (fasthttp trims
// it; it also joins a folded value into one). Credentials that can be read
// two ways are refused; the compare stays constant-time.
func TestAdminAuthorizationAsSent(t *testing.T) {
	g := startGateway(t)
	g.mustSale("s", `{"stock":1}`)
	tok := "Bearer " + testToken
	tests := []struct {
		name   string
		fields string
		code   int
	}{
		{"the token", "Authorization: " + tok + "\r\n", 200},
		{"lower-case name", "authorization: " + tok + "\r\n", 200},
		{"white space before it", "Authorization: \t " + tok + "\r\n", 200},
		{"twice", "Authorization: " + tok + "\r\nAuthorization: " + tok + "\r\n", 401},
		{"the token, then another", "Authorization: " + tok + "\r\nAuthorization: Bearer wrong-token-0123456789\r\n", 401},
		{"another, then the token", "Authorization: Bearer wrong-token-0123456789\r\nAuthorization: " + tok + "\r\n", 401},
		{"trailing space", "Authorization: " + tok + " \r\n", 401},
		{"trailing spaces", "Authorization: " + tok + "   \r\n", 401},
		{"trailing tab", "Authorization: " + tok + "\t\r\n", 401},
		{"folded", "Authorization: Bearer\r\n " + testToken + "\r\n", 401},
		{"folded after the token", "Authorization: " + tok + "\r\n x\r\n", 401},
		{"none", "", 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rawFields(t, g.srv.AdminAddr(), "GET", "/admin/v1/sales/s", "", tc.fields)
			want := "ok"
			if tc.code == 401 {
				want = "unauthorized"
			}
			if r.code != tc.code || r.status() != want {
				t.Errorf("%d %s, want %d %s", r.code, r.raw, tc.code, want)
			}
		})
	}
}

// A token of white space (which config should refuse at start) matches
// nothing, though the header is now read as sent: no credential with white
// space in it is compared at all.
func TestAdminTokenOfSpacesMatchesNothing(t *testing.T) {
	spaces := strings.Repeat(" ", 16)
	g := startGateway(t, func(c *config.Config) { c.Admin.Token = spaces })
	for _, fields := range []string{"Authorization: Bearer " + spaces + "\r\n", "Authorization: Bearer\r\n", "Authorization: Bearer \r\n"} {
		if r := rawFields(t, g.srv.AdminAddr(), "GET", "/admin/v1/scripts", "", fields); r.code != 401 {
			t.Errorf("%q: %d %s, want 401", fields, r.code, r.raw)
		}
	}
}
