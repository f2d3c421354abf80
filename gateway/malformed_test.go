package gateway

import (
	"reflect"
	"strings"
	"testing"
)

// Every malformed request gets its contract status and changes nothing.
func TestMalformedRequests(t *testing.T) {
	g := startGateway(t)
	g.mustSale("m", `{"stock":50,"per_user_limit":2}`)
	if r := g.buy("m", "holder", 1, ""); r.code != 202 {
		t.Fatalf("setup buy: %d %s", r.code, r.raw)
	}
	before := g.view("m")

	buy := g.base + "/v1/sales/m/orders"
	adm := g.admin + "/admin/v1/sales/m"
	long := strings.Repeat("a", 65)
	json := map[string]string{"Content-Type": "application/json"}
	rows := []struct {
		name, method, url, body string
		hdr                     map[string]string
		code                    int
		status                  string
	}{
		{"bad JSON", "POST", buy, `{"user_id":`, json, 400, "bad_request"},
		{"empty body", "POST", buy, ``, nil, 400, "bad_request"},
		{"JSON array", "POST", buy, `[1,2]`, nil, 400, "bad_request"},
		{"JSON null", "POST", buy, `null`, nil, 400, "bad_request"},
		{"oversized body", "POST", buy, `{"user_id":"u1","pad":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, "too_large"},
		{"missing user", "POST", buy, `{"quantity":1}`, nil, 400, "bad_request"},
		{"user id with space", "POST", buy, `{"user_id":"a b"}`, nil, 400, "bad_request"},
		{"user id unicode", "POST", buy, `{"user_id":"ünï"}`, nil, 400, "bad_request"},
		{"user id NUL", "POST", buy, `{"user_id":"a\u0000b"}`, nil, 400, "bad_request"},
		{"user id newline", "POST", buy, `{"user_id":"a\nb"}`, nil, 400, "bad_request"},
		{"user id 65 chars", "POST", buy, `{"user_id":"` + long + `"}`, nil, 400, "bad_request"},
		{"user id starts with dash", "POST", buy, `{"user_id":"-a"}`, nil, 400, "bad_request"},
		{"user id number", "POST", buy, `{"user_id":42}`, nil, 400, "bad_request"},
		{"sale id 65 chars", "POST", g.base + "/v1/sales/" + long + "/orders", `{"user_id":"u1"}`, nil, 400, "bad_request"},
		{"sale id with space", "POST", g.base + "/v1/sales/a%20b/orders", `{"user_id":"u1"}`, nil, 400, "bad_request"},
		{"sale id with NUL", "POST", g.base + "/v1/sales/a%00b/orders", `{"user_id":"u1"}`, nil, 400, "bad_request"},
		{"sale id unicode", "POST", g.base + "/v1/sales/%C3%BC/orders", `{"user_id":"u1"}`, nil, 400, "bad_request"},
		{"quantity 0", "POST", buy, `{"user_id":"u1","quantity":0}`, nil, 400, "bad_request"},
		{"quantity -1", "POST", buy, `{"user_id":"u1","quantity":-1}`, nil, 400, "bad_request"},
		{"quantity 1.5", "POST", buy, `{"user_id":"u1","quantity":1.5}`, nil, 400, "bad_request"},
		{"quantity string", "POST", buy, `{"user_id":"u1","quantity":"1"}`, nil, 400, "bad_request"},
		{"quantity 1e9", "POST", buy, `{"user_id":"u1","quantity":1e9}`, nil, 400, "bad_request"},
		{"quantity 1001", "POST", buy, `{"user_id":"u1","quantity":1001}`, nil, 400, "bad_request"},
		{"quantity huge", "POST", buy, `{"user_id":"u1","quantity":99999999999999999999999}`, nil, 400, "bad_request"},
		{"idempotency key too long", "POST", buy, `{"user_id":"u1"}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, 400, "bad_request"},
		{"GET on buy", "GET", buy, ``, nil, 405, "method_not_allowed"},
		{"DELETE on buy", "DELETE", buy, ``, nil, 405, "method_not_allowed"},
		{"POST on sale view", "POST", g.base + "/v1/sales/m", `{}`, nil, 405, "method_not_allowed"},
		{"unknown route", "GET", g.base + "/v2/anything", ``, nil, 404, "not_found"},
		{"admin without token", "PUT", adm, `{"stock":1}`, nil, 401, "unauthorized"},
		{"admin wrong token", "PUT", adm, `{"stock":1}`, map[string]string{"Authorization": "Bearer wrong-token-0123456789"}, 401, "unauthorized"},
		{"admin token without Bearer", "POST", adm + "/lock", ``, map[string]string{"Authorization": testToken}, 401, "unauthorized"},
		{"negative stock", "PUT", adm, `{"stock":-1}`, auth, 400, "bad_request"},
		{"stock below sold", "PUT", adm, `{"stock":0}`, auth, 409, "conflict"},
		{"limit 0", "PUT", adm, `{"per_user_limit":0}`, auth, 400, "bad_request"},
		{"end before start", "PUT", adm, `{"starts_at":"2030-01-02T00:00:00Z","ends_at":"2030-01-01T00:00:00Z"}`, auth, 400, "bad_request"},
		{"end equals start", "PUT", adm, `{"starts_at":"2030-01-01T00:00:00Z","ends_at":"2030-01-01T00:00:00Z"}`, auth, 400, "bad_request"},
		{"time not RFC 3339", "PUT", adm, `{"starts_at":"tomorrow"}`, auth, 400, "bad_request"},
		{"stock as string", "PUT", adm, `{"stock":"10"}`, auth, 400, "bad_request"},
		{"admin bad JSON", "PUT", adm, `{`, auth, 400, "bad_request"},
		{"restock 0", "POST", adm + "/restock", `{"quantity":0}`, auth, 400, "bad_request"},
		{"restock negative", "POST", adm + "/restock", `{"quantity":-5}`, auth, 400, "bad_request"},
		{"restock missing", "POST", adm + "/restock", `{}`, auth, 400, "bad_request"},
		{"restock unknown sale", "POST", g.admin + "/admin/v1/sales/nosale/restock", `{"quantity":5}`, auth, 404, "not_found"},
		{"lock unknown sale", "POST", g.admin + "/admin/v1/sales/nosale/lock", ``, auth, 404, "not_found"},
		{"create without stock", "PUT", g.admin + "/admin/v1/sales/nostock", `{"per_user_limit":1}`, auth, 400, "bad_request"},
		{"GET on lock", "GET", adm + "/lock", ``, auth, 405, "method_not_allowed"},
		{"unknown admin action", "POST", adm + "/explode", ``, auth, 404, "not_found"},
		// Paths are routed as sent: an escape is no second spelling of an id
		// ("%6D" is not "m"), and a path with more or less than a route's
		// segments is no route.
		{"sale id escaping its letter", "POST", g.base + "/v1/sales/%6D/orders", `{"user_id":"u1"}`, nil, 400, "bad_request"},
		{"sale view escaping its letter", "GET", g.base + "/v1/sales/%6D", ``, nil, 400, "bad_request"},
		{"order id with escape", "GET", buy + "/%41", ``, nil, 400, "bad_request"},
		{"trailing slash on buy", "POST", buy + "/", `{"user_id":"u1"}`, nil, 404, "not_found"},
		{"trailing segment on order status", "GET", buy + "/x/extra", ``, nil, 404, "not_found"},
		{"double slash in buy", "POST", g.base + "/v1/sales//m/orders", `{"user_id":"u1"}`, nil, 404, "not_found"},
		{"admin sale id escaping its letter", "POST", g.admin + "/admin/v1/sales/%6D/lock", ``, auth, 400, "bad_request"},
		{"admin upsert escaping its letter", "PUT", g.admin + "/admin/v1/sales/%6D", `{"stock":1}`, auth, 400, "bad_request"},
		{"admin trailing slash", "PUT", adm + "/", `{"stock":1}`, auth, 404, "not_found"},
		{"admin trailing segment", "POST", adm + "/lock/now", ``, auth, 404, "not_found"},
		{"pay not served yet", "POST", adm + "/orders/x/pay", ``, auth, 404, "not_found"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			res := g.do(r.method, r.url, r.body, r.hdr)
			if res.code != r.code || res.status() != r.status {
				t.Errorf("got %d %s, want %d %s", res.code, res.raw, r.code, r.status)
			}
			if r.code == 400 && res.str("error") == "" {
				t.Errorf("400 without an error field: %s", res.raw)
			}
			if ct := res.hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	after := g.view("m")
	if !reflect.DeepEqual(before.body, after.body) {
		t.Errorf("the sale changed: %s → %s", before.raw, after.raw)
	}
	if n := g.rdb.Exists(t.Context(), g.keys.Meta("nosale"), g.keys.Meta("nostock")).Val(); n != 0 {
		t.Errorf("a refused request created %d sales", n)
	}
}
