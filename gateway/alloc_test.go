package gateway

import (
	"bytes"
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

// roomServer is a Server with a waiting room "wait" whose one buyer waits
// (one admission an hour from an hour hence), and that buyer's poll.
func roomServer(t testing.TB, opts ...gwOption) (*Server, *fasthttp.RequestCtx) {
	g := startGateway(t, opts...)
	g.mustSale("wait", `{"stock":10,"waiting_room":"fifo","admit_per_second":1,"starts_at":"`+
		time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	r := g.join("wait", "u-123456")
	if r.code != 200 {
		t.Fatalf("join: %d %s", r.code, r.raw)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/v1/sales/wait/queue")
	ctx.Request.Header.Set(ticketHeader, r.str("ticket"))
	g.srv.servePublic(ctx)
	if ctx.Response.StatusCode() != 200 || !bytes.Contains(ctx.Response.Body(), []byte(`"status":"waiting"`)) {
		t.Fatalf("poll: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	return g.srv, ctx
}

// A poll is the bulk of a waiting crowd's traffic: it allocates only the
// ticket's buyer id, and makes no Redis call (the script calls counted).
func TestPollPathAllocs(t *testing.T) {
	s, ctx := roomServer(t)
	calls := s.loader.Stats().Calls
	allocs := testing.AllocsPerRun(1000, func() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	})
	if allocs > 1 {
		t.Errorf("a poll allocates %.1f times per request, pinned at 1", allocs)
	}
	if n := s.loader.Stats().Calls - calls; n != 0 {
		t.Errorf("1000 polls made %d script calls", n)
	}
}

func BenchmarkPollHandler(b *testing.B) {
	s, ctx := roomServer(b)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		s.servePublic(ctx)
	}
}
