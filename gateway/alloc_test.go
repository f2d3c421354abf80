package gateway

import (
	"github.com/flashgate/flashgate/sale"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// newBuyCtx builds a buy request as fasthttp hands it to the handler.
func newBuyCtx(sale, body string) *fasthttp.RequestCtx {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/v1/sales/" + sale + "/orders")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyString(body)
	return ctx
}

// soldOutServer is a Server whose memory says sale "gone" is sold out, so a
// buy is answered without Redis: the handler's own cost, parsing to reply.
func soldOutServer(t testing.TB) *Server {
	g := startGateway(t)
	g.srv.closed.remember("gone", sale.ErrSoldOut, g.srv.closed.epoch.Load(), time.Now().Add(time.Hour))
	g.srv.closed.ttl = 24 * time.Hour
	return g.srv
}

// The sold-out path is what most of a flash crowd meets: pin what it
// allocates per request, so a change that adds garbage there fails here.
func TestSoldOutPathAllocs(t *testing.T) {
	s := soldOutServer(t)
	ctx := newBuyCtx("gone", `{"user_id":"u-123456","quantity":1}`)
	s.servePublic(ctx)
	if ctx.Response.StatusCode() != 410 {
		t.Fatalf("setup: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	})
	const pinned = 0
	if allocs > pinned {
		t.Errorf("sold-out buy allocates %.1f times per request, pinned at %d", allocs, pinned)
	}
}

func BenchmarkSoldOutHandler(b *testing.B) {
	s := soldOutServer(b)
	ctx := newBuyCtx("gone", `{"user_id":"u-123456","quantity":1}`)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	}
}

func BenchmarkBadRequestHandler(b *testing.B) {
	s := soldOutServer(b)
	ctx := newBuyCtx("gone", `{"user_id":"u 1","quantity":1}`)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	}
}
