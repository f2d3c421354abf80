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
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/config"
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
// for its sale id or its body, or 404 for its sale, is 401 without a good
// token (a sale the gateway knows to be closed is the exception:
// TestClosedSaleAnsweredBeforeToken).
func TestBuyerTokenCheckedFirst(t *testing.T) {
	g := startGateway(t, withBuyerSecret(testSecret))
	g.mustSale("gone", `{"stock":0}`)
	for _, tt := range []struct{ name, method, path, body string }{
		{"bad sale id", "POST", "/v1/sales/bad%20id/orders", `{"quantity":1}`},
		{"bad order id", "GET", "/v1/sales/s/orders/bad%20id", ""},
		{"malformed body", "POST", "/v1/sales/s/orders", `{"user_id":`},
		{"bad quantity", "POST", "/v1/sales/s/orders", `{"quantity":0}`},
		{"unknown sale", "POST", "/v1/sales/nosuch/orders", `{"quantity":1}`},
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
