package gateway

import (
	"github.com/valyala/fasthttp"
)

// cors lets the pages of the shop's own origins (http.cors_origins) call
// the public API from a browser (API.md, "Buyers in a browser"). Every
// public answer to a listed Origin carries Access-Control-Allow-Origin with
// that origin and exposes Retry-After, so that the page can wait as told;
// an answer to any other origin carries no CORS header, and the browser
// keeps its body from the page. The admin listener never answers CORS.
//
// A preflight (OPTIONS on a path the public listener routes) is 204: for a
// listed origin with the methods the path takes and the request headers
// the API reads; for any other, without them, so that the browser refuses.
type cors struct {
	origins map[string]struct{}
}

// corsHeaders are the request headers a page may send the public API.
const corsHeaders = "Authorization, Content-Type, Idempotency-Key, Flashgate-Ticket"

// corsMaxAge is how long a browser may keep a preflight's answer, in
// seconds: a buyer's page sends one preflight per path, not one per poll.
const corsMaxAge = "600"

// newCORS returns the policy of origins (config checked them: scheme and
// host, no path), or nil when there are none: then no answer carries CORS.
func newCORS(origins []string) *cors {
	if len(origins) == 0 {
		return nil
	}
	c := &cors{origins: make(map[string]struct{}, len(origins))}
	for _, o := range origins {
		c.origins[o] = struct{}{}
	}
	return c
}

// answer adds the CORS headers of a public answer to the request in ctx:
// Vary: Origin on every answer (a cache must not give one origin's answer
// to another), and the origin and Retry-After's exposure when the request's
// Origin is listed. It reports whether it was. It allocates nothing.
func (c *cors) answer(ctx *fasthttp.RequestCtx) bool {
	if c == nil {
		return false
	}
	h := &ctx.Response.Header
	h.Set("Vary", "Origin")
	origin := ctx.Request.Header.Peek("Origin")
	if len(origin) == 0 {
		return false
	}
	if _, ok := c.origins[string(origin)]; !ok {
		return false
	}
	h.SetBytesV("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "Retry-After")
	return true
}

// preflight answers an OPTIONS on a path that takes the methods allow:
// 204, with the preflight's headers for a listed origin.
func (c *cors) preflight(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	if c.answer(ctx) {
		h := &ctx.Response.Header
		h.Set("Access-Control-Allow-Methods", allow)
		h.Set("Access-Control-Allow-Headers", corsHeaders)
		h.Set("Access-Control-Max-Age", corsMaxAge)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	ctx.Response.SkipBody = true
}
