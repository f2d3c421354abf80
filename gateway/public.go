package gateway

import (
	"context"
	"errors"
	"github.com/flashgate/flashgate/sale"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
)

// servePublic routes the public listener.
func (s *Server) servePublic(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		// Keep-alive clients learn to reconnect, to a gateway that stays.
		ctx.SetConnectionClose()
	}
	m := publicRoutes.match(ctx.Method(), requestPath(ctx.Request.Header.RequestURI()))
	if m.allow != "" && ctx.IsOptions() {
		s.cors.preflight(ctx, m.allow)
		return
	}
	s.cors.answer(ctx)
	var buyer string
	// A poll needs no token (API.md lists the buy and the order status; the
	// ticket is the buyer's already): one that comes with a token is
	// checked, and its ticket must be the token's buyer's.
	authPoll := m.route == routePoll && len(ctx.Request.Header.Peek("Authorization")) > 0
	if m.route == routeBuy || m.route == routeOrderStatus || m.route == routeJoin || authPoll {
		if s.answeredClosed(ctx, m) {
			return
		}
		var ok bool
		if buyer, ok = s.authenticate(ctx, m.route); !ok {
			return
		}
	}
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
		s.serveBuy(ctx, m.sale, buyer)
	case routeSaleView:
		s.serveSaleView(ctx, m.sale)
	case routeOrderStatus:
		s.serveOrder(ctx, m.sale, m.order, buyer)
	case routeJoin:
		s.serveJoin(ctx, m.sale, buyer) // queue.go
	case routePoll:
		s.servePoll(ctx, m.sale, buyer)
	case routePage:
		s.servePage(ctx, m.sale)
	case routeProof:
		s.serveProof(ctx, m.sale)
	case routeHealthz:
		write(ctx, replyOK)
	case routeReadyz:
		s.serveReady(ctx)
	default:
		write(ctx, replyNotFound)
	}
}

// answeredClosed answers, before the buyer's token is checked, a buy or a
// join of a sale this gateway knows to be sold out or ended (API.md "Buyer
// authentication"): the public sale view tells anyone as much, and the
// crowd that arrives after the last unit then costs no signature check. A
// buy with an Idempotency-Key goes on to the token: its repeat answers the
// first answer, which may be a 202. It reports whether it answered.
func (s *Server) answeredClosed(ctx *fasthttp.RequestCtx, m match) bool {
	if s.auth == nil || m.miss.code != 0 || m.route != routeBuy && m.route != routeJoin {
		return false
	}
	if m.route == routeBuy && len(ctx.Request.Header.Peek("Idempotency-Key")) > 0 {
		return false
	}
	now := time.Now()
	err := s.closed.get(m.sale, now)
	if !errors.Is(err, sale.ErrSoldOut) && !errors.Is(err, sale.ErrEnded) {
		return false
	}
	status := write(ctx, replyFor(err))
	if m.route == routeBuy {
		s.metrics.shortCircuit.Inc()
		s.metrics.observeBuy(status, now)
	}
	return true
}

// authenticate checks the buyer's token of a buy or an order-status request
// (auth.go), before anything else is looked at: the ids, the body. It returns
// the token's sub, or "" with authentication off; false when it answered 401.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, rt route) (string, bool) {
	a := s.auth
	if a == nil {
		return "", true
	}
	sub, err := a.check(&ctx.Request.Header)
	if err != nil {
		if ce := s.log.Check(zap.DebugLevel, "buyer token refused"); ce != nil {
			ce.Write(zap.Error(err), zap.String("remote", remote(ctx)))
		}
		status := writeUnauthorized(ctx, err)
		if rt == routeBuy {
			s.metrics.observeBuy(status, time.Now())
		}
		return "", false
	}
	return sub, true
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
// saleB; buyer is the authenticated buyer ("" with authentication off).
// Nothing here keeps a reference to ctx's buffers past the call: ids are
// copied into strings.
func (s *Server) serveBuy(ctx *fasthttp.RequestCtx, saleB []byte, buyer string) {
	start := time.Now()
	status := s.buy(ctx, saleB, buyer, start)
	s.metrics.observeBuy(status, start)
}

// buy answers one buy and returns the status it answered.
func (s *Server) buy(ctx *fasthttp.RequestCtx, saleB []byte, buyer string, now time.Time) string {
	// A sale with a waiting room sells only to an admitted ticket
	// (queue.go), checked first; whether it has one is in memory.
	rm, room, err := s.rooms.get(saleB, now)
	if err != nil {
		return s.unavailable(ctx, "room", err)
	}
	var st sale.Standing
	if rm.Mode != sale.RoomOff {
		var ok bool
		if _, st, ok = where(ctx, rm, buyer, now.UnixMilli()); !ok {
			room.notAdmitted.Add(1)
			return write(ctx, replyNotAdmitted)
		}
	}
	var req buyRequest
	if buyer == "" {
		var reason string
		if req, reason = parseBuy(ctx.PostBody()); reason != "" {
			return write(ctx, badRequest(reason))
		}
	} else {
		var refused reply
		if req, refused = parseBuyFor(ctx.PostBody(), buyer); refused.code != 0 {
			return write(ctx, refused)
		}
	}
	if rm.Mode != sale.RoomOff && !st.Admits(req.user) {
		room.notAdmitted.Add(1)
		return write(ctx, replyNotAdmitted)
	}
	var idem string
	if k, n := headerValues(&ctx.Request.Header, "Idempotency-Key"); n > 1 {
		return write(ctx, replyDuplicateIdemKey)
	} else if n == 1 {
		if !order.ValidIdemKey(k) {
			return write(ctx, badRequest("Idempotency-Key must be 1-128 printable ASCII characters"))
		}
		idem = string(k)
	}
	if !s.sales.Durable() {
		return write(ctx, replyUnavailable) // zero-loss mode, Redis not fsyncing each write: promise nothing
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
	saleID, user := string(saleB), string(req.user)
	epoch := s.closed.epoch.Load()
	res, err := s.sales.Buy(saleID, user, req.quantity, idem)
	if err != nil {
		if errors.Is(err, sale.ErrRateLimited) {
			return writeRateLimited(ctx)
		}
		return s.unavailable(ctx, "reserve", err)
	}
	if res.Err != nil {
		if errors.Is(res.Err, sale.ErrUnavailable) {
			return s.unavailable(ctx, "reserve", res.Err) // logged, like a failed call
		}
		if res.Err == sale.ErrUnconfirmed {
			ctx.Response.Header.Set("Retry-After", "1")
			return write(ctx, unconfirmed(res.OrderID))
		}
		s.closed.remember(saleID, res.Err, epoch, now)
		s.rememberSoldOut(saleID, res, epoch, now)
		return write(ctx, replyFor(res.Err))
	}
	s.rememberSoldOut(saleID, res, epoch, now)
	writeAccepted(ctx, res.OrderID, saleID, user, req.quantity, res.PayBy) // orderview.go
	return "accepted"
}

// rememberSoldOut remembers a sale sold out when the call that decided res
// left it no unit, whatever res's own answer: the buy that took the last
// unit, or a buyer at the limit (whom Redis tells limit_reached before
// sold_out), so that the crowd after the sell-out is answered from memory
// without one more call, and a crowd of buyers back at their limit keeps
// the memory fresh.
func (s *Server) rememberSoldOut(saleID string, res sale.Result, epoch uint64, now time.Time) {
	if res.SoldOut {
		s.closed.remember(saleID, sale.ErrSoldOut, epoch, now)
	}
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
	v, err := s.sales.Sale(rctx, string(saleB))
	cancel()
	if err != nil {
		if errors.Is(err, sale.ErrNotFound) {
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
	b = append(b, `,"waiting_room":"`...)
	b = append(b, sale.RoomName(v.Room.Mode)...)
	b = append(b, `"}`...)
	write(ctx, reply{code: 200, body: b})
}

func appendTimes(b []byte, v *sale.View) []byte {
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

// serveOrder answers an order's status; the router checked both ids. With
// buyer authentication on (buyer not ""), another buyer's order is not
// found: the same answer as an order that does not exist.
func (s *Server) serveOrder(ctx *fasthttp.RequestCtx, saleB, orderB []byte, buyer string) {
	rctx, cancel := s.redisCtx()
	o, err := s.sales.Order(rctx, string(saleB), string(orderB))
	cancel()
	if err == nil && buyer != "" && o.UserID != buyer {
		err = sale.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, sale.ErrNotFound) {
			write(ctx, replyNotFound)
			return
		}
		s.unavailable(ctx, "order", err)
		return
	}
	write(ctx, reply{code: 200, body: appendOrderView(nil, string(saleB), string(orderB), o)}) // orderview.go
}

// serveReady is 200 only when the script path answers, the process is not
// draining and, in zero-loss mode, every Redis primary fsyncs before it
// replies.
func (s *Server) serveReady(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		write(ctx, replyDraining)
		return
	}
	if reason, not := s.sales.NotDurable(); not {
		write(ctx, unavailableBecause(reason))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.sales.Ping(rctx)
	cancel()
	if err != nil {
		s.unavailable(ctx, "ready", err)
		return
	}
	write(ctx, replyOK)
}
