package gateway

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
)

var (
	salesPrefix = []byte("/v1/sales/")
	ordersSeg   = []byte("orders")
)

// servePublic routes the public listener.
func (s *Server) servePublic(ctx *fasthttp.RequestCtx) {
	if s.draining.Load() {
		// Keep-alive clients learn to reconnect, to a gateway that stays.
		ctx.SetConnectionClose()
	}
	path := ctx.Path()
	if rest, ok := bytes.CutPrefix(path, salesPrefix); ok {
		sale, rest, _ := bytes.Cut(rest, []byte{'/'})
		switch {
		case len(rest) == 0 && !bytes.HasSuffix(path, []byte{'/'}):
			if !s.method(ctx, fasthttp.MethodGet) {
				return
			}
			s.serveSaleView(ctx, sale)
			return
		case bytes.Equal(rest, ordersSeg):
			if !s.method(ctx, fasthttp.MethodPost) {
				return
			}
			s.serveBuy(ctx, sale)
			return
		case bytes.HasPrefix(rest, ordersSeg) && len(rest) > len(ordersSeg)+1 && rest[len(ordersSeg)] == '/':
			if !s.method(ctx, fasthttp.MethodGet) {
				return
			}
			s.serveOrder(ctx, sale, rest[len(ordersSeg)+1:])
			return
		}
	}
	switch string(path) {
	case "/healthz", "/livez":
		if s.method(ctx, fasthttp.MethodGet) {
			write(ctx, replyOK)
		}
	case "/readyz":
		if s.method(ctx, fasthttp.MethodGet) {
			s.serveReady(ctx)
		}
	default:
		write(ctx, replyNotFound)
	}
}

// method answers 405 unless the request has method m (HEAD counts as GET).
func (s *Server) method(ctx *fasthttp.RequestCtx, m string) bool {
	got := ctx.Method()
	if string(got) == m || (m == fasthttp.MethodGet && ctx.IsHead()) {
		return true
	}
	ctx.Response.Header.Set("Allow", m)
	write(ctx, replyMethodNotAllowed)
	return false
}

// serveBuy is the hot path: validate, reserve, answer. Nothing here keeps a
// reference to ctx's buffers past the call: ids are copied into strings.
func (s *Server) serveBuy(ctx *fasthttp.RequestCtx, saleB []byte) {
	start := time.Now()
	status := s.buy(ctx, saleB, start)
	s.metrics.observeBuy(status, start)
}

// buy answers one buy and returns the status it answered.
func (s *Server) buy(ctx *fasthttp.RequestCtx, saleB []byte, now time.Time) string {
	if !order.ValidID(saleB) {
		return write(ctx, badRequest(badSale))
	}
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

func (s *Server) serveSaleView(ctx *fasthttp.RequestCtx, saleB []byte) {
	if !order.ValidID(saleB) {
		write(ctx, badRequest(badSale))
		return
	}
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

func (s *Server) serveOrder(ctx *fasthttp.RequestCtx, saleB, orderB []byte) {
	if !order.ValidID(saleB) || !order.ValidID(orderB) {
		write(ctx, badRequest(badOrder))
		return
	}
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
