package gateway

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// servePublic routes the public listener.
func (s *Server) servePublic(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		// Keep-alive clients learn to reconnect, to a gateway that stays.
		ctx.SetConnectionClose()
	}
	m := publicRoutes.match(ctx.Method(), requestPath(ctx.Request.Header.RequestURI()))
	if m.miss.code != 0 {
		writeMiss(ctx, m)
		if m.route == routeBuy {
			// A buy refused for its sale id counts among the buys, as one
			// refused for its body does.
			s.metrics.observeBuy(m.miss.status, time.Now())
		}
		return
	}
	switch m.route {
	case routeBuy:
		s.serveBuy(ctx, m.sale)
	case routeSaleView:
		s.serveSaleView(ctx, m.sale)
	case routeOrderStatus:
		s.serveOrder(ctx, m.sale, m.order)
	case routeHealthz:
		write(ctx, replyOK)
	case routeReadyz:
		s.serveReady(ctx)
	default:
		write(ctx, replyNotFound)
	}
}

// writeMiss answers a request the router did not route: 404, 405 (with Allow)
// or 400 for an id.
func writeMiss(ctx *fasthttp.RequestCtx, m match) {
	if m.allow != "" {
		ctx.Response.Header.Set("Allow", m.allow)
	}
	write(ctx, m.miss)
}

// serveBuy is the hot path: validate, reserve, answer. The router checked
// saleB. Nothing here keeps a reference to ctx's buffers past the call: ids
// are copied into strings.
func (s *Server) serveBuy(ctx *fasthttp.RequestCtx, saleB []byte) {
	start := time.Now()
	status := s.buy(ctx, saleB, start)
	s.metrics.observeBuy(status, start)
}

// buy answers one buy and returns the status it answered.
func (s *Server) buy(ctx *fasthttp.RequestCtx, saleB []byte, now time.Time) string {
	req, reason := parseBuy(ctx.PostBody())
	if reason != "" {
		return write(ctx, badRequest(reason))
	}
	var idem string
	if k := ctx.Request.Header.Peek("Idempotency-Key"); k != nil {
		if !validIdemKey(k) {
			return write(ctx, badRequest("Idempotency-Key must be 1-128 printable ASCII characters"))
		}
		idem = string(k)
	}
	if idem == "" {
		if err := s.closed.get(saleB, now); err != nil {
			s.metrics.shortCircuit.Inc()
			return write(ctx, replyFor(err))
		}
	}
	if !s.limits.allow(saleB, now) {
		return writeRateLimited(ctx)
	}
	sale, user := string(saleB), string(req.user)
	epoch := s.closed.epoch.Load()
	res, err := s.batch.reserve(sale, Reservation{OrderID: s.ids.next(), UserID: user, Quantity: req.quantity, IdemKey: idem})
	if err != nil {
		if errors.Is(err, ErrRateLimited) {
			return writeRateLimited(ctx)
		}
		return s.unavailable(ctx, "reserve", err)
	}
	if res.Err != nil {
		s.closed.remember(sale, res.Err, epoch, now)
		return write(ctx, replyFor(res.Err))
	}
	s.writeAccepted(ctx, res.OrderID, sale, user, req.quantity)
	return "accepted"
}

func (s *Server) writeAccepted(ctx *fasthttp.RequestCtx, orderID, sale, user string, qty int) {
	ctx.SetStatusCode(fasthttp.StatusAccepted)
	ctx.Response.Header.SetContentTypeBytes(jsonType)
	var buf [256]byte // ids are at most 64 bytes each: the reply fits
	b := append(buf[:0], `{"status":"accepted","order_id":"`...)
	b = append(b, orderID...)
	b = append(b, `","sale_id":"`...)
	b = append(b, sale...)
	b = append(b, `","user_id":"`...)
	b = append(b, user...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, int64(qty), 10)
	b = append(b, '}')
	ctx.Response.SetBody(b)
}

func writeRateLimited(ctx *fasthttp.RequestCtx) string {
	ctx.Response.Header.Set("Retry-After", "1")
	return write(ctx, replyRateLimited)
}

// unavailable answers 503 for a Redis failure and logs it (sampled by zap).
func (s *Server) unavailable(ctx *fasthttp.RequestCtx, op string, err error) string {
	s.log.Warn("redis unavailable", zap.String("op", op), zap.Error(err))
	return write(ctx, replyUnavailable)
}

// serveSaleView answers the public sale view; the router checked saleB.
func (s *Server) serveSaleView(ctx *fasthttp.RequestCtx, saleB []byte) {
	rctx, cancel := s.redisCtx()
	v, err := s.store.Sale(rctx, string(saleB))
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			write(ctx, replyNotFound)
			return
		}
		s.unavailable(ctx, "sale", err)
		return
	}
	b := append([]byte(nil), `{"status":"ok","sale_id":"`...)
	b = append(b, v.ID...)
	b = append(b, `","state":"`...)
	b = append(b, v.State()...)
	b = append(b, `","remaining":`...)
	b = strconv.AppendInt(b, max(v.Remaining(), 0), 10)
	b = append(b, `,"per_user_limit":`...)
	b = strconv.AppendInt(b, v.Limit, 10)
	b = appendTimes(b, v)
	b = append(b, '}')
	write(ctx, reply{code: 200, body: b})
}

func appendTimes(b []byte, v *SaleView) []byte {
	b = append(b, `,"starts_at":`...)
	b = appendTime(b, v.StartsAt)
	b = append(b, `,"ends_at":`...)
	return appendTime(b, v.EndsAt)
}

func appendTime(b []byte, ms int64) []byte {
	if ms == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = time.UnixMilli(ms).UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// serveOrder answers an order's status; the router checked both ids.
func (s *Server) serveOrder(ctx *fasthttp.RequestCtx, saleB, orderB []byte) {
	rctx, cancel := s.redisCtx()
	o, err := s.store.Order(rctx, string(saleB), string(orderB))
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			write(ctx, replyNotFound)
			return
		}
		s.unavailable(ctx, "order", err)
		return
	}
	state := "queued"
	if o.Created {
		state = "created"
	}
	b := append([]byte(nil), `{"status":"`...)
	b = append(b, state...)
	b = append(b, `","order_id":"`...)
	b = append(b, orderB...)
	b = append(b, `","sale_id":"`...)
	b = append(b, saleB...)
	b = append(b, `","user_id":`...)
	b = appendString(b, o.UserID)
	b = append(b, `,"quantity":`...)
	b = strconv.AppendInt(b, o.Quantity, 10)
	b = append(b, '}')
	write(ctx, reply{code: 200, body: b})
}

// serveReady is 200 only when the script path answers and the process is not
// draining.
func (s *Server) serveReady(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		write(ctx, replyDraining)
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.store.Ping(rctx)
	cancel()
	if err != nil {
		s.unavailable(ctx, "ready", err)
		return
	}
	write(ctx, replyOK)
}
