package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
)

// testSecret is an HS256 buyer secret of the minimum length.
const testSecret = "buyer-secret-0123456789abcdefghij"

// buyerKeys are the signing keys of the tests, made once per test binary
// (an RSA key takes a while).
type buyerKeys struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}

var (
	keysOnce sync.Once
	keys     buyerKeys
)

func testKeys(t testing.TB) buyerKeys {
	keysOnce.Do(func() {
		var err error
		if keys.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keys.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keys.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		if _, keys.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
			panic(err)
		}
	})
	return keys
}

// publicPEM is the PKIX PEM of pub.
func publicPEM(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// keyFile writes pub's PEM to a fresh file and returns its path.
func keyFile(t testing.TB, pub any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "buyer.pem")
	if err := os.WriteFile(path, publicPEM(t, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func withBuyerSecret(secret string) gwOption {
	return func(c *config.Config) { c.Buyer.JWTSecret = secret }
}

func withBuyerKeyFile(path string) gwOption {
	return func(c *config.Config) { c.Buyer.JWTKeyFile = path }
}

// claimsOf are the claims of a good token for sub, valid for an hour.
func claimsOf(sub string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
}

// sign makes a token; it fails the test when the library refuses to.
func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

// b64 is JWT's base64url without padding.
func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// handMade builds a token from raw header and claims JSON and a signature.
func handMade(header, claims string, sig []byte) string {
	return b64([]byte(header)) + "." + b64([]byte(claims)) + "." + b64(sig)
}

// hs256 signs the first two segments of a token with key, as HS256 does.
func hs256(key []byte, signingInput string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signingInput))
	return m.Sum(nil)
}

// send makes a request with each of authz as its own Authorization header.
func (g *testGateway) send(method, path, body string, authz ...string) response {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	for _, a := range authz {
		req.Header.Add("Authorization", a)
	}
	res, err := g.client.Do(req)
	if err != nil {
		g.t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{code: res.StatusCode, raw: raw, hdr: res.Header}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		g.t.Errorf("%s %s: %d body is not JSON: %q", method, path, res.StatusCode, raw)
	}
	return r
}

func bearer(tok string) string { return "Bearer " + tok }

// checkNothingSold fails the test unless sale has no unit sold and no buyer.
func (g *testGateway) checkNothingSold(sale string) {
	g.t.Helper()
	if v := g.view(sale); v.num("sold") != 0 || v.num("buyers") != 0 {
		g.t.Errorf("sale %s: sold %d to %d buyers, want nothing", sale, v.num("sold"), v.num("buyers"))
	}
	if n := g.rdb.HLen(context.Background(), g.keys.Users(sale)).Val(); n != 0 {
		g.t.Errorf("sale %s: %d users hold units", sale, n)
	}
	g.checkLedger(sale)
}

// refusals are tokens that must be 401 against a gateway whose buyer key is
// keys.rsa's public key (RS256), each for a buyer "alice".
func refusals(t *testing.T, k buyerKeys) []struct {
	name  string
	authz []string
} {
	now := time.Now()
	good := sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf("alice"))
	goodParts := strings.Split(good, ".")
	rsaPEM := publicPEM(t, &k.rsa.PublicKey)
	// Alg confusion: HS256 with the RSA public key (its PEM, as a naive
	// library would take it from the key file) as the HMAC secret.
	confusedHeader := `{"alg":"HS256","typ":"JWT"}`
	confusedClaims := fmt.Sprintf(`{"sub":"alice","exp":%d}`, now.Add(time.Hour).Unix())
	confusedInput := b64([]byte(confusedHeader)) + "." + b64([]byte(confusedClaims))
	derKey, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	// Tampering: the payload of a good token changed to another buyer.
	tampered := goodParts[0] + "." + b64([]byte(fmt.Sprintf(`{"sub":"bob","exp":%d}`, now.Add(time.Hour).Unix()))) + "." + goodParts[2]
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claimsOf("alice"))
	return []struct {
		name  string
		authz []string
	}{
		{"missing header", nil},
		{"empty header", []string{""}},
		{"scheme only", []string{"Bearer"}},
		{"scheme and spaces", []string{"Bearer    "}},
		{"basic scheme", []string{"Basic YWxpY2U6cHc="}},
		{"token without scheme", []string{good}},
		{"scheme glued to the token", []string{"Bearer" + good}},
		{"garbage", []string{"Bearer not-a-token"}},
		{"two segments", []string{"Bearer " + goodParts[0] + "." + goodParts[1]}},
		{"four segments", []string{"Bearer " + good + ".x"}},
		{"bad base64", []string{"Bearer " + goodParts[0] + ".!!!." + goodParts[2]}},
		{"non-canonical base64 signature", []string{"Bearer " + goodParts[0] + "." + goodParts[1] + "." + goodParts[2][:len(goodParts[2])-1] + "B"}},
		{"header not JSON", []string{bearer(b64([]byte("alg=RS256")) + "." + goodParts[1] + "." + goodParts[2])}},
		{"alg none", []string{bearer(none)}},
		{"alg none upper case", []string{bearer(handMade(`{"alg":"NONE"}`, confusedClaims, nil))}},
		{"alg missing", []string{bearer(handMade(`{"typ":"JWT"}`, confusedClaims, nil))}},
		{"HS256 with some secret", []string{bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("alice")))}},
		{"HS256 with the RSA public key PEM as secret", []string{bearer(handMade(confusedHeader, confusedClaims, hs256(rsaPEM, confusedInput)))}},
		{"HS256 with the RSA public key DER as secret", []string{bearer(handMade(confusedHeader, confusedClaims, hs256(derKey, confusedInput)))}},
		{"RS512 with the right key", []string{bearer(sign(t, jwt.SigningMethodRS512, k.rsa, claimsOf("alice")))}},
		{"PS256 with the right key", []string{bearer(sign(t, jwt.SigningMethodPS256, k.rsa, claimsOf("alice")))}},
		{"ES256", []string{bearer(sign(t, jwt.SigningMethodES256, k.ec, claimsOf("alice")))}},
		{"EdDSA", []string{bearer(sign(t, jwt.SigningMethodEdDSA, k.ed, claimsOf("alice")))}},
		{"RS256 by another key", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa2, claimsOf("alice")))}},
		{"tampered payload", []string{bearer(tampered)}},
		{"signature cut short", []string{bearer(good[:len(good)-8])}},
		{"expired", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Second).Unix()}))}},
		{"expires now", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "exp": now.Add(-time.Millisecond).Unix()}))}},
		{"no exp", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice"}))}},
		{"exp not a number", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "exp": "tomorrow"}))}},
		{"not yet valid (nbf)", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(30 * time.Minute).Unix()}))}},
		// Claim names are case-sensitive (RFC 7519 §4): these are not
		// sub and exp.
		{"sub and exp in upper case", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"SUB": "alice", "EXP": now.Add(time.Hour).Unix()}))}},
		{"exp in another case", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": "alice", "Exp": now.Add(time.Hour).Unix()}))}},
		{"sub in another case", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"Sub": "alice", "exp": now.Add(time.Hour).Unix()}))}},
		{"no sub", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"exp": now.Add(time.Hour).Unix()}))}},
		{"empty sub", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf("")))}},
		{"sub with a space", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf("alice smith")))}},
		{"sub starting with a dot", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf(".alice")))}},
		{"sub too long", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf(strings.Repeat("a", 65))))}},
		{"sub a number", []string{bearer(sign(t, jwt.SigningMethodRS256, k.rsa, jwt.MapClaims{"sub": 42, "exp": now.Add(time.Hour).Unix()}))}},
		{"claims an array", []string{bearer(handMade(`{"alg":"RS256"}`, `[1]`, nil))}},
		{"two headers, both good", []string{bearer(good), bearer(good)}},
		{"two headers, good then bad", []string{bearer(good), "Bearer x"}},
		{"two headers, bad then good", []string{"Bearer x", bearer(good)}},
	}
}

// Every refusal of API.md's "Buyer authentication" is 401 unauthorized, on
// the buy and on the order status, and reserves nothing.
func TestBuyerTokenRefused(t *testing.T) {
	k := testKeys(t)
	g := startGateway(t, withBuyerKeyFile(keyFile(t, &k.rsa.PublicKey)))
	g.mustSale("s1", `{"stock":100,"per_user_limit":5}`)
	alice := bearer(sign(t, jwt.SigningMethodRS256, k.rsa, claimsOf("alice")))
	// An order of alice's, whose status the refused tokens must not read.
	r := g.send("POST", "/v1/sales/s1/orders", `{"quantity":1}`, alice)
	if r.code != 202 {
		t.Fatalf("setup buy: %d %s", r.code, r.raw)
	}
	id := r.str("order_id")
	g.mustSale("s2", `{"stock":100,"per_user_limit":5}`)

	for _, tt := range refusals(t, k) {
		t.Run(tt.name, func(t *testing.T) {
			for _, req := range []struct{ method, path, body string }{
				{"POST", "/v1/sales/s2/orders", `{"user_id":"alice","quantity":1}`},
				{"POST", "/v1/sales/s2/orders", `{"quantity":1}`},
				{"GET", "/v1/sales/s1/orders/" + id, ""},
			} {
				r := g.send(req.method, req.path, req.body, tt.authz...)
				if r.code != 401 || r.status() != "unauthorized" {
					t.Errorf("%s %s: %d %s, want 401 unauthorized", req.method, req.path, r.code, r.raw)
				}
				if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
					t.Errorf("%s %s: Content-Type %q", req.method, req.path, ct)
				}
				if ch := r.hdr.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer") {
					t.Errorf("%s %s: WWW-Authenticate %q, want a Bearer challenge", req.method, req.path, ch)
				}
			}
		})
	}
	// What Go's client cannot send: white space after the token, a value
	// folded over two lines, a tab for the space, the field twice under
	// names that differ in case.
	tok := strings.TrimPrefix(alice, "Bearer ")
	for _, fields := range []string{
		"Authorization: " + alice + " \r\n",
		"Authorization: " + alice + "\t\r\n",
		"Authorization: Bearer\r\n " + tok + "\r\n",
		"Authorization: Bearer \r\n " + tok + "\r\n",
		"Authorization: Bearer\t" + tok + "\r\n",
		"Authorization: " + alice + "\r\nauthorization: " + alice + "\r\n",
	} {
		r := rawFields(t, g.srv.Addr(), "POST", "/v1/sales/s2/orders", `{"quantity":1}`, fields)
		if r.code != 401 || r.status() != "unauthorized" {
			t.Errorf("%q: %d %s, want 401 unauthorized", fields, r.code, r.raw)
		}
	}
	if r := rawFields(t, g.srv.Addr(), "POST", "/v1/sales/s1/orders", `{"quantity":1}`, "Authorization: "+alice+"\r\n"); r.code != 202 {
		t.Errorf("the same request, the token as it should be: %d %s, want 202", r.code, r.raw)
	}
	g.checkNothingSold("s2")
	if v := g.view("s1"); v.num("sold") != 2 {
		t.Errorf("s1 sold %d, want alice's 2", v.num("sold"))
	}
}

// The token is checked before anything else: a request that would be 400
// for its sale id or its body, 404 for its sale or 410 for a sold-out one
// is 401 without a good token.
func TestBuyerTokenCheckedFirst(t *testing.T) {
	g := startGateway(t, withBuyerSecret(testSecret))
	g.mustSale("gone", `{"stock":0}`)
	for _, tt := range []struct{ name, method, path, body string }{
		{"bad sale id", "POST", "/v1/sales/bad%20id/orders", `{"quantity":1}`},
		{"bad order id", "GET", "/v1/sales/s/orders/bad%20id", ""},
		{"malformed body", "POST", "/v1/sales/s/orders", `{"user_id":`},
		{"bad quantity", "POST", "/v1/sales/s/orders", `{"quantity":0}`},
		{"unknown sale", "POST", "/v1/sales/nosuch/orders", `{"quantity":1}`},
		{"sold-out sale", "POST", "/v1/sales/gone/orders", `{"quantity":1}`},
		{"unknown order", "GET", "/v1/sales/gone/orders/nosuch", ""},
		{"HEAD of an order", "HEAD", "/v1/sales/gone/orders/nosuch", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, g.base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 401 || (tt.method != "HEAD" && string(raw) != `{"status":"unauthorized"}`) {
				t.Errorf("%d %s, want 401 unauthorized", res.StatusCode, raw)
			}
		})
	}
	// What needs no token still answers without one.
	for _, path := range []string{"/v1/sales/gone", "/healthz", "/livez", "/readyz"} {
		if r := g.send("GET", path, ""); r.code != 200 {
			t.Errorf("GET %s without a token: %d %s, want 200", path, r.code, r.raw)
		}
	}
	// And what routes nowhere is still 404 / 405, not 401.
	if r := g.send("GET", "/v1/sales/gone/orders", ""); r.code != 405 {
		t.Errorf("GET on the buy path: %d %s, want 405", r.code, r.raw)
	}
	if r := g.send("POST", "/v1/sales/gone/orders/x/extra", ""); r.code != 404 {
		t.Errorf("unrouted path: %d %s, want 404", r.code, r.raw)
	}
}

// A good token of each kind of key buys for its sub, and only a token of
// the key's own algorithm is accepted.
func TestBuyerTokenEachKey(t *testing.T) {
	k := testKeys(t)
	type signer struct {
		m   jwt.SigningMethod
		key any
	}
	signers := map[string]signer{
		"HS256": {jwt.SigningMethodHS256, []byte(testSecret)},
		"RS256": {jwt.SigningMethodRS256, k.rsa},
		"ES256": {jwt.SigningMethodES256, k.ec},
		"EdDSA": {jwt.SigningMethodEdDSA, k.ed},
	}
	for _, tt := range []struct {
		alg string
		opt gwOption
	}{
		{"HS256", withBuyerSecret(testSecret)},
		{"RS256", withBuyerKeyFile(keyFile(t, &k.rsa.PublicKey))},
		{"ES256", withBuyerKeyFile(keyFile(t, &k.ec.PublicKey))},
		{"EdDSA", withBuyerKeyFile(keyFile(t, k.ed.Public()))},
	} {
		t.Run(tt.alg, func(t *testing.T) {
			g := startGateway(t, tt.opt)
			g.mustSale("s", `{"stock":100,"per_user_limit":4}`)
			for alg, s := range signers {
				tok := bearer(sign(t, s.m, s.key, claimsOf("u-"+alg)))
				r := g.send("POST", "/v1/sales/s/orders", `{"quantity":1}`, tok)
				if alg != tt.alg {
					if r.code != 401 {
						t.Errorf("%s token: %d %s, want 401", alg, r.code, r.raw)
					}
					continue
				}
				if r.code != 202 || r.str("user_id") != "u-"+alg {
					t.Fatalf("%s token: %d %s, want 202 for u-%s", alg, r.code, r.raw, alg)
				}
				// The scheme is case-insensitive (RFC 9110 §11.1), and
				// more than one space may follow it.
				for _, scheme := range []string{"bearer ", "BEARER ", "Bearer   "} {
					tok := scheme + strings.TrimPrefix(tok, "Bearer ")
					if r := g.send("POST", "/v1/sales/s/orders", `{"user_id":"u-`+alg+`"}`, tok); r.code != 202 {
						t.Errorf("%q scheme: %d %s, want 202", scheme, r.code, r.raw)
					}
				}
			}
			if v := g.view("s"); v.num("sold") != 4 || v.num("buyers") != 1 {
				t.Errorf("sold %d to %d buyers, want 4 to 1", v.num("sold"), v.num("buyers"))
			}
			g.checkLedger("s")
		})
	}
}

// The body's user_id must be the token's sub (403 forbidden otherwise); left
// out, the buy is sub's. An order-status request for another buyer's order
// is the same 404 as for an order that does not exist.
func TestBuyerTokenBindsUser(t *testing.T) {
	g := startGateway(t, withBuyerSecret(testSecret))
	g.mustSale("s", `{"stock":100,"per_user_limit":10}`)
	alice := bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("alice")))
	bob := bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("bob")))

	for _, tt := range []struct {
		name, body string
		code       int
		status     string
		qty        int64
	}{
		{"user_id is sub", `{"user_id":"alice","quantity":2}`, 202, "accepted", 2},
		{"no user_id", `{"quantity":3}`, 202, "accepted", 3},
		{"no user_id, no quantity", `{}`, 202, "accepted", 1},
		{"null user_id", `{"user_id":null}`, 202, "accepted", 1},
		{"escaped user_id that is sub", `{"user_id":"\u0061lice"}`, 202, "accepted", 1},
		{"another user_id", `{"user_id":"bob","quantity":1}`, 403, "forbidden", 0},
		{"user_id differing in case", `{"user_id":"Alice"}`, 403, "forbidden", 0},
		{"user_id given twice, last another", `{"user_id":"alice","user_id":"bob"}`, 403, "forbidden", 0},
		{"invalid user_id", `{"user_id":"al ice"}`, 400, "bad_request", 0},
		{"user_id a number", `{"user_id":7}`, 400, "bad_request", 0},
		{"no user_id, bad quantity", `{"quantity":1001}`, 400, "bad_request", 0},
		{"no user_id, fractional quantity", `{"quantity":1.5}`, 400, "bad_request", 0},
		{"not an object", `[]`, 400, "bad_request", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := g.view("s").num("sold")
			r := g.send("POST", "/v1/sales/s/orders", tt.body, alice)
			if r.code != tt.code || r.status() != tt.status {
				t.Fatalf("%d %s, want %d %s", r.code, r.raw, tt.code, tt.status)
			}
			if r.code == 202 && (r.str("user_id") != "alice" || r.num("quantity") != tt.qty) {
				t.Errorf("accepted %s, want alice × %d", r.raw, tt.qty)
			}
			if r.code == 403 && string(r.raw) != `{"status":"forbidden"}` {
				t.Errorf("403 body %s", r.raw)
			}
			if got := g.view("s").num("sold") - before; got != tt.qty {
				t.Errorf("sold %d more, want %d", got, tt.qty)
			}
		})
	}
	if held := g.rdb.HGetAll(context.Background(), g.keys.Users("s")).Val(); len(held) != 1 || held["alice"] != "8" {
		t.Errorf("users hash %v, want alice: 8", held)
	}

	r := g.send("POST", "/v1/sales/s/orders", `{}`, bob)
	if r.code != 202 {
		t.Fatalf("bob's buy: %d %s", r.code, r.raw)
	}
	bobs := r.str("order_id")
	unknown := g.send("GET", "/v1/sales/s/orders/nosuch-order", "", alice)
	if unknown.code != 404 {
		t.Fatalf("unknown order: %d %s", unknown.code, unknown.raw)
	}
	if r := g.send("GET", "/v1/sales/s/orders/"+bobs, "", alice); r.code != 404 || !bytes.Equal(r.raw, unknown.raw) {
		t.Errorf("alice reads bob's order: %d %s, want the unknown order's 404 %s", r.code, r.raw, unknown.raw)
	}
	if r := g.send("GET", "/v1/sales/s/orders/"+bobs, "", bob); r.code != 200 || r.str("user_id") != "bob" {
		t.Errorf("bob reads his order: %d %s", r.code, r.raw)
	}
}

// With buyer authentication off (the default) nothing changes: user_id is
// required, and orders are read without a token.
func TestBuyerAuthOff(t *testing.T) {
	g := startGateway(t)
	g.mustSale("s", `{"stock":10}`)
	if r := g.send("POST", "/v1/sales/s/orders", `{"quantity":1}`); r.code != 400 {
		t.Errorf("buy without user_id: %d %s, want 400", r.code, r.raw)
	}
	// A token is ignored, good or not: the body says who buys.
	tok := bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("alice")))
	r := g.send("POST", "/v1/sales/s/orders", `{"user_id":"bob"}`, tok)
	if r.code != 202 || r.str("user_id") != "bob" {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	if r := g.send("GET", "/v1/sales/s/orders/"+r.str("order_id"), ""); r.code != 200 {
		t.Errorf("order status without a token: %d %s", r.code, r.raw)
	}
}

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

// soldOutServerWith is soldOutServer (alloc_test.go) with options.
func soldOutServerWith(t testing.TB, opts ...gwOption) *Server {
	g := startGateway(t, opts...)
	g.srv.closed.remember("gone", sale.ErrSoldOut, g.srv.closed.epoch.Load(), time.Now().Add(time.Hour))
	g.srv.closed.ttl = 24 * time.Hour
	return g.srv
}

// newAuthBuyCtx is newBuyCtx with an Authorization header.
func newAuthBuyCtx(sale, body, authz string) *fasthttp.RequestCtx {
	ctx := newBuyCtx(sale, body)
	ctx.Request.Header.Set("Authorization", authz)
	return ctx
}

// The sold-out path with authentication on: what verifying the token adds.
// Not pinned (the count is golang-jwt's), but measured: see
// BenchmarkSoldOutHandlerAuth and the report of `make bench`.
func TestSoldOutPathAllocsAuth(t *testing.T) {
	s := soldOutServerWith(t, withBuyerSecret(testSecret))
	ctx := newAuthBuyCtx("gone", `{"quantity":1}`, bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("u-123456"))))
	s.servePublic(ctx)
	if ctx.Response.StatusCode() != 410 {
		t.Fatalf("setup: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	})
	t.Logf("sold-out buy with an HS256 token: %.0f allocations per request", allocs)
}

func BenchmarkSoldOutHandlerAuth(b *testing.B) {
	k := testKeys(b)
	for _, tt := range []struct {
		alg string
		opt gwOption
		tok string
	}{
		{"HS256", withBuyerSecret(testSecret), sign(b, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("u-123456"))},
		{"RS256", withBuyerKeyFile(keyFile(b, &k.rsa.PublicKey)), sign(b, jwt.SigningMethodRS256, k.rsa, claimsOf("u-123456"))},
		{"ES256", withBuyerKeyFile(keyFile(b, &k.ec.PublicKey)), sign(b, jwt.SigningMethodES256, k.ec, claimsOf("u-123456"))},
		{"EdDSA", withBuyerKeyFile(keyFile(b, k.ed.Public())), sign(b, jwt.SigningMethodEdDSA, k.ed, claimsOf("u-123456"))},
	} {
		b.Run(tt.alg, func(b *testing.B) {
			s := soldOutServerWith(b, tt.opt)
			ctx := newAuthBuyCtx("gone", `{"quantity":1}`, bearer(tt.tok))
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				s.servePublic(ctx)
			}
			if ctx.Response.StatusCode() != 410 {
				b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		})
	}
}

// BenchmarkBuyerToken is the token check alone, per algorithm.
func BenchmarkBuyerToken(b *testing.B) {
	k := testKeys(b)
	for _, tt := range []struct {
		alg string
		key any
		tok string
	}{
		{"HS256", []byte(testSecret), sign(b, jwt.SigningMethodHS256, []byte(testSecret), claimsOf("u-123456"))},
		{"RS256", &k.rsa.PublicKey, sign(b, jwt.SigningMethodRS256, k.rsa, claimsOf("u-123456"))},
		{"ES256", &k.ec.PublicKey, sign(b, jwt.SigningMethodES256, k.ec, claimsOf("u-123456"))},
		{"EdDSA", k.ed.Public(), sign(b, jwt.SigningMethodEdDSA, k.ed, claimsOf("u-123456"))},
	} {
		b.Run(tt.alg, func(b *testing.B) {
			a, err := newKeyAuth(tt.key)
			if err != nil {
				b.Fatal(err)
			}
			tok := []byte(tt.tok)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzToken feeds the token check Authorization values built from a fuzzed
// scheme, header JSON, claims JSON and signature (or a true HS256 signature
// of the fuzzed parts, so that the claims checks are reached). Whatever it
// accepts must hold up to an independent reading: "Bearer" and one token of
// exactly three base64url segments, a signature that is the HMAC-SHA256 of
// the first two, a header whose alg is HS256, an exp in the future and a
// sub that is a valid id and the one returned.
func FuzzToken(f *testing.F) {
	secret := []byte(testSecret)
	exp := time.Now().Add(24 * time.Hour).Unix()
	good := fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)
	for _, seed := range []struct {
		scheme, header, claims string
		sign                   bool
		sig                    string
	}{
		{"Bearer ", `{"alg":"HS256","typ":"JWT"}`, good, true, ""},
		{"bearer ", `{"alg":"HS256"}`, good, true, ""},
		{"Bearer ", `{"alg":"none"}`, good, false, ""},
		{"Bearer ", `{"alg":"HS256"}`, good, false, "AAAA"},
		{"Bearer ", `{"alg":"RS256"}`, good, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, `{"sub":"alice"}`, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, `{"sub":"alice","exp":1}`, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"a b","exp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d}`, exp, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":"%d"}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d.5,"aud":["x"]}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256","alg":"none"}`, good, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","sub":"bob","exp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, good, true, ".x"},
		{"Bearer ", `{"alg":"HS256","AlG":""}`, fmt.Sprintf(`{"suB":"0","eXp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","SUB":"bob","exp":%d}`, exp), true, ""},
		{"Basic ", `{"alg":"HS256"}`, good, true, ""},
		{"Bearer", `{"alg":"HS256"}`, good, true, ""},
		{"", "", "", false, ""},
	} {
		f.Add(seed.scheme, []byte(seed.header), []byte(seed.claims), seed.sign, seed.sig)
	}
	a, err := newKeyAuth(secret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, scheme string, header, claims []byte, signIt bool, sig string) {
		input := b64(header) + "." + b64(claims)
		tok := input + "."
		if signIt {
			tok += b64(hs256(secret, input))
		}
		tok += sig
		var h fasthttp.RequestHeader
		h.Set("Authorization", scheme+tok)
		// fasthttp keeps what the client could have sent: read it back.
		value := string(h.Peek("Authorization"))
		sub, err := a.check(&h)
		if err != nil {
			return
		}
		rest, ok := strings.CutPrefix(strings.ToLower(value), "bearer ")
		if !ok {
			t.Fatalf("accepted %q without the Bearer scheme", value)
		}
		got := value[len(value)-len(strings.TrimLeft(rest, " ")):]
		parts := strings.Split(got, ".")
		if len(parts) != 3 {
			t.Fatalf("accepted %q: %d segments", got, len(parts))
		}
		mac, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
		if err != nil || !hmac.Equal(mac, hs256(secret, parts[0]+"."+parts[1])) {
			t.Fatalf("accepted %q without its HMAC-SHA256 signature", got)
		}
		// Member names are case-sensitive (RFC 7515 §4): read both
		// segments into maps, never into structs, which encoding/json
		// matches case-insensitively.
		var hdr map[string]any
		if err := decodeSegment(parts[0], &hdr); err != nil || hdr["alg"] != "HS256" {
			t.Fatalf("accepted %q with header alg %v (%v)", got, hdr["alg"], err)
		}
		var c map[string]any
		if err := decodeSegment(parts[1], &c); err != nil {
			t.Fatalf("accepted %q with claims that are not an object: %v", got, err)
		}
		// exp is a number, in the future.
		e, ok := c["exp"].(float64)
		if !ok || time.Unix(int64(e), 0).Before(time.Now().Add(-time.Second)) {
			t.Fatalf("accepted %q with exp %v", got, c["exp"])
		}
		if s, ok := c["sub"].(string); !ok || s != sub || !order.ValidID(sub) {
			t.Fatalf("accepted %q as %q with sub %v", got, sub, c["sub"])
		}
	})
}

// decodeSegment reads one base64url JSON segment into v.
func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// The verifier refuses at construction a key whose algorithm it could not
// pin.
func TestBuyerAuthKeys(t *testing.T) {
	k := testKeys(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		key  any
		alg  string // "" for a refusal
	}{
		{"secret", []byte(testSecret), "HS256"},
		{"rsa", &k.rsa.PublicKey, "RS256"},
		{"ecdsa p-256", &k.ec.PublicKey, "ES256"},
		{"ed25519", k.ed.Public(), "EdDSA"},
		{"ecdsa p-384", &p384.PublicKey, ""},
		{"rsa private key", k.rsa, ""},
		{"string secret", testSecret, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := newKeyAuth(tt.key)
			switch {
			case tt.alg == "" && err == nil:
				t.Errorf("accepted, pinned to %s", a.alg)
			case tt.alg != "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.alg != "" && a.alg != tt.alg:
				t.Errorf("pinned %s, want %s", a.alg, tt.alg)
			}
		})
	}
	// Off builds nothing.
	if a, err := newBuyerAuth(config.Buyer{}); a != nil || err != nil {
		t.Errorf("newBuyerAuth(off) = %v, %v", a, err)
	}
}
