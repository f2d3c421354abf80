package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

const (
	shopOrigin  = "http://shop.test:3000"
	otherOrigin = "http://elsewhere.test"
)

// raw sends a request and returns the answer as it is (the page is not
// JSON, a preflight has no body).
func (g *testGateway) raw(method, url, body string, hdr map[string]string) (*http.Response, []byte) {
	g.t.Helper()
	res, b, err := g.exchange(method, url, body, hdr)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, url, err)
	}
	return res, b
}

func withCORS(c *config.Config) { c.HTTP.CORSOrigins = []string{shopOrigin, "https://shop.example"} }

// Every kind of public answer to a listed origin carries its CORS headers,
// errors, 410, 429, 413 (fasthttp's own refusal) and the page included;
// the same answers to another origin carry none.
func TestCORSOnEveryPublicAnswer(t *testing.T) {
	g := startGateway(t, withCORS)
	g.mustSale("gone", `{"stock":1}`)
	if r := g.buy("gone", "u0", 1, ""); r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	body := `{"user_id":"u1","quantity":1}`
	cases := []struct {
		name, method, path, body string
		code                     int
	}{
		{"view", "GET", "/v1/sales/gone", "", 200},
		{"unknown sale", "GET", "/v1/sales/nosuch", "", 404},
		{"buy", "POST", "/v1/sales/SALE/orders", body, 202},
		{"limit", "POST", "/v1/sales/SALE/orders", body, 409},
		{"sold out", "POST", "/v1/sales/gone/orders", body, 410},
		{"bad json", "POST", "/v1/sales/gone/orders", "{", 400},
		{"too large", "POST", "/v1/sales/gone/orders", strings.Repeat("x", 5000), 413},
		{"no route", "GET", "/v2/nothing", "", 404},
		{"wrong method", "DELETE", "/v1/sales/gone", "", 405},
		{"page", "GET", "/s/gone", "", 200},
		{"missing page", "GET", "/s/nosuch", "", 404},
		{"health", "GET", "/healthz", "", 200},
	}
	for i, origin := range []string{shopOrigin, otherOrigin} {
		sale := "open" + itoa(i)
		g.mustSale(sale, `{"stock":5,"per_user_limit":1}`)
		for _, c := range cases {
			res, b := g.raw(c.method, g.base+strings.Replace(c.path, "SALE", sale, 1), c.body, map[string]string{"Origin": origin})
			if res.StatusCode != c.code {
				t.Errorf("%s from %s: %d %s, want %d", c.name, origin, res.StatusCode, b, c.code)
				continue
			}
			checkCORS(t, c.name, origin, res)
		}
	}
	// A 429 of admission control, from a gateway that admits a buy a second.
	rl := startGateway(t, withCORS, func(c *config.Config) { c.Admission.Rate = 1; c.Admission.Burst = 1 })
	rl.mustSale("busy", `{"stock":100}`)
	for _, origin := range []string{shopOrigin, otherOrigin} {
		for i := 0; ; i++ {
			res, b := rl.raw("POST", rl.base+"/v1/sales/busy/orders", `{"user_id":"u`+itoa(i)+`"}`, map[string]string{"Origin": origin})
			if res.StatusCode == 429 {
				checkCORS(t, "rate limited", origin, res)
				break
			}
			if res.StatusCode != 202 || i == 100 {
				t.Fatalf("buy %d from %s: %d %s, want 202 until a 429", i, origin, res.StatusCode, b)
			}
		}
	}
}

// checkCORS checks the CORS headers of an answer to origin.
func checkCORS(t *testing.T, name, origin string, res *http.Response) {
	t.Helper()
	got := res.Header.Get("Access-Control-Allow-Origin")
	if origin == shopOrigin && got != shopOrigin {
		t.Errorf("%s from the shop: Access-Control-Allow-Origin %q, want %q", name, got, shopOrigin)
	}
	if origin != shopOrigin && got != "" {
		t.Errorf("%s from another origin: Access-Control-Allow-Origin %q, want none", name, got)
	}
	if origin == shopOrigin && res.Header.Get("Access-Control-Expose-Headers") != "Retry-After" {
		t.Errorf("%s: Retry-After not exposed: %v", name, res.Header)
	}
	if res.Header.Get("Vary") != "Origin" {
		t.Errorf("%s from %s: Vary %q, want Origin", name, origin, res.Header.Get("Vary"))
	}
}

// A preflight is 204 with the route's methods and the API's request headers
// for a listed origin, 204 without them for another; the admin listener
// answers no CORS at all.
func TestCORSPreflight(t *testing.T) {
	g := startGateway(t, withCORS)
	pre := map[string]string{"Origin": shopOrigin, "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization, content-type, idempotency-key, flashgate-ticket"}
	res, _ := g.raw("OPTIONS", g.base+"/v1/sales/s1/orders", "", pre)
	if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != shopOrigin ||
		res.Header.Get("Access-Control-Allow-Methods") != "POST" || res.Header.Get("Access-Control-Max-Age") == "" {
		t.Errorf("preflight of a buy: %d %v", res.StatusCode, res.Header)
	}
	for _, h := range []string{"Authorization", "Content-Type", "Idempotency-Key", "Flashgate-Ticket"} {
		if !strings.Contains(res.Header.Get("Access-Control-Allow-Headers"), h) {
			t.Errorf("preflight allows headers %q: %s missing", res.Header.Get("Access-Control-Allow-Headers"), h)
		}
	}
	res, _ = g.raw("OPTIONS", g.base+"/v1/sales/s1/queue", "", pre)
	if m := res.Header.Get("Access-Control-Allow-Methods"); res.StatusCode != 204 || !strings.Contains(m, "POST") || !strings.Contains(m, "GET") {
		t.Errorf("preflight of the queue: %d, methods %q", res.StatusCode, m)
	}
	pre["Origin"] = otherOrigin
	res, _ = g.raw("OPTIONS", g.base+"/v1/sales/s1/orders", "", pre)
	if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight from another origin: %d %v, want 204 without CORS", res.StatusCode, res.Header)
	}
	if res, _ := g.raw("OPTIONS", g.base+"/nowhere", "", pre); res.StatusCode != 404 {
		t.Errorf("preflight of no route: %d, want 404", res.StatusCode)
	}
	pre["Origin"] = shopOrigin
	for _, path := range []string{"/admin/v1/sales/s1", "/metrics"} {
		res, _ := g.raw("OPTIONS", g.admin+path, "", pre)
		if res.StatusCode == 204 || res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("admin preflight %s: %d %v, want a refusal without CORS", path, res.StatusCode, res.Header)
		}
		hdr := map[string]string{"Origin": shopOrigin, "Authorization": "Bearer " + testToken}
		if res, _ := g.raw("GET", g.admin+path, "", hdr); res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Vary") != "" {
			t.Errorf("admin GET %s from a listed origin: %v, want no CORS", path, res.Header)
		}
	}
}

// Without origins configured no answer carries CORS, and a preflight is
// still 204 without it, so that the browser refuses.
func TestCORSOff(t *testing.T) {
	g := startGateway(t)
	res, _ := g.raw("GET", g.base+"/v1/sales/none", "", map[string]string{"Origin": shopOrigin})
	if res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Vary") != "" {
		t.Errorf("CORS off: %v", res.Header)
	}
	res, _ = g.raw("OPTIONS", g.base+"/v1/sales/none/orders", "", map[string]string{"Origin": shopOrigin, "Access-Control-Request-Method": "POST"})
	if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Allow") != "POST" {
		t.Errorf("preflight with CORS off: %d %v", res.StatusCode, res.Header)
	}
}
