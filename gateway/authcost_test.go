package gateway

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/sale"
)

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
