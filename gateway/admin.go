package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

// serveAdmin routes the admin listener, by adminRoutes.
func (s *Server) serveAdmin(ctx *fasthttp.RequestCtx) {
	path := requestPath(ctx.Request.Header.RequestURI())
	m := adminRoutes.match(ctx.Method(), path)
	if m.route == routeMetrics && m.miss.code == 0 {
		s.serveMetrics(ctx)
		return
	}
	// Every /admin/ request needs the token, also one that matches no
	// route: without it a caller learns nothing of the routes.
	if bytes.HasPrefix(path, adminPrefix) && !s.authorized(ctx) {
		write(ctx, replyUnauthorized)
		return
	}
	if m.miss.code != 0 {
		writeMiss(ctx, m)
		return
	}
	switch m.route {
	case routePprof:
		// Profiles for the operator (behind the token): the same handlers
		// as net/http/pprof, under /admin/debug/pprof/.
		ctx.URI().SetPathBytes(append([]byte("/debug/pprof/"), m.profile...))
		pprofhandler.PprofHandler(ctx)
	case routeScripts:
		s.writeScripts(ctx)
	case routeReload:
		s.serveReload(ctx)
	case routeAdminSale, routeAdminUpsert, routeRestock, routeLock, routeUnlock:
		s.serveSale(ctx, m)
	case routePay, routeCancel:
		s.serveOrderChange(ctx, m)
	default:
		write(ctx, replyNotFound)
	}
}

var adminPrefix = []byte("/admin/")

// serveSale serves the admin calls on one sale; the router checked its id.
func (s *Server) serveSale(ctx *fasthttp.RequestCtx, m match) {
	saleID := string(m.sale)
	rctx, cancel := s.redisCtx()
	defer cancel()
	var (
		v       *sale.View
		created bool
		err     error
	)
	switch m.route {
	case routeAdminSale:
		v, err = s.sales.Sale(rctx, saleID)
	case routeAdminUpsert:
		u, reason := parseSaleUpdate(ctx.PostBody())
		if reason != "" {
			write(ctx, badRequest(reason))
			return
		}
		v, created, err = s.sales.Upsert(rctx, saleID, u)
		if err == nil {
			s.audit(ctx, "sale.upsert", saleID, zap.Bool("created", created), zap.Int64("stock", v.Stock),
				zap.Int64("per_user_limit", v.Limit), zap.Int64("starts_at_ms", v.StartsAt), zap.Int64("ends_at_ms", v.EndsAt),
				zap.Int64("payment_window", v.PaymentWindow), zap.String("waiting_room", sale.RoomName(v.Room.Mode)),
				zap.Int64("admit_per_second", v.Room.Rate), zap.Int64("pass_seconds", v.Room.Pass))
		}
	case routeRestock:
		n, reason := parseRestock(ctx.PostBody())
		if reason != "" {
			write(ctx, badRequest(reason))
			return
		}
		v, err = s.sales.Restock(rctx, saleID, n)
		if err == nil {
			s.audit(ctx, "sale.restock", saleID, zap.Int64("quantity", n), zap.Int64("stock", v.Stock))
		}
	case routeLock, routeUnlock:
		lock := m.route == routeLock
		v, err = s.sales.SetLocked(rctx, saleID, lock)
		if err == nil {
			what := "sale.unlock"
			if lock {
				what = "sale.lock"
			}
			s.audit(ctx, what, saleID)
		}
	}
	if err != nil {
		if errors.Is(err, sale.ErrUnavailable) {
			s.unavailable(ctx, "admin", err)
			return
		}
		write(ctx, replyFor(err))
		return
	}
	if m.route != routeAdminSale {
		// Other gateways learn of the change from its announcement; this one
		// needs no round trip for it.
		s.closed.forget(saleID)
		s.rooms.Changed(saleID)
	}
	code := fasthttp.StatusOK
	if created {
		code = fasthttp.StatusCreated
	}
	write(ctx, reply{code: code, body: adminView(v)})
}

// serveOrderChange serves an admin pay or cancel of one order; the router
// checked both ids. A body, if any, is ignored. It answers the order view,
// or the conflict of API.md. A call that changed the order is an audit
// event, also when what it did was to expire it (a pay or cancel at or
// after pay_by); a repeat that changed nothing, and a refusal, are not.
func (s *Server) serveOrderChange(ctx *fasthttp.RequestCtx, m match) {
	saleID, id := string(m.sale), string(m.order)
	rctx, cancel := s.redisCtx()
	defer cancel()
	what, change := "order.pay", s.sales.Pay
	if m.route == routeCancel {
		what, change = "order.cancel", s.sales.Cancel
	}
	rec, changed, err := change(rctx, saleID, id)
	if changed {
		s.audit(ctx, what, saleID, zap.String("order_id", id), zap.String("state", rec.State),
			zap.String("user_id", rec.UserID), zap.Int64("quantity", rec.Quantity))
		if rec.State != order.StatePaid {
			s.closed.forget(saleID) // units are back: a sold-out sale may sell again
		}
	}
	if err != nil {
		if errors.Is(err, sale.ErrUnavailable) {
			s.unavailable(ctx, "admin", err)
			return
		}
		write(ctx, replyFor(err))
		return
	}
	write(ctx, reply{code: fasthttp.StatusOK, body: appendOrderView(nil, saleID, id, rec)})
}

func (s *Server) audit(ctx *fasthttp.RequestCtx, what, saleID string, fields ...zap.Field) {
	s.log.Info("audit", append([]zap.Field{zap.String("action", what), zap.String("sale_id", saleID),
		zap.String("who", s.who(ctx))}, fields...)...)
}

// who names the operator: the admin listener has one token, so the remote
// address is what tells callers apart.
func (s *Server) who(ctx *fasthttp.RequestCtx) string {
	if len(s.token) == 0 {
		return "anonymous@" + remote(ctx)
	}
	return "token@" + remote(ctx)
}

func adminView(v *sale.View) []byte {
	b := append([]byte(nil), `{"status":"ok","sale_id":"`...)
	b = append(b, v.ID...)
	b = append(b, `","state":"`...)
	b = append(b, v.State()...)
	b = append(b, `","stock":`...)
	b = strconv.AppendInt(b, v.Stock, 10)
	b = append(b, `,"sold":`...)
	b = strconv.AppendInt(b, v.Sold, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, v.Remaining(), 10)
	b = append(b, `,"buyers":`...)
	b = strconv.AppendInt(b, v.Buyers, 10)
	b = append(b, `,"per_user_limit":`...)
	b = strconv.AppendInt(b, v.Limit, 10)
	b = append(b, `,"locked":`...)
	b = strconv.AppendBool(b, v.Locked)
	b = appendTimes(b, v)
	b = append(b, `,"outbox_pending":`...)
	b = strconv.AppendInt(b, v.OutboxPending, 10)
	b = append(b, `,"payment_window":`...)
	b = strconv.AppendInt(b, v.PaymentWindow, 10)
	b = append(b, `,"pending_payment":`...)
	b = strconv.AppendInt(b, v.Pending, 10)
	b = append(b, `,"buckets":`...)
	b = strconv.AppendInt(b, max(v.Buckets, 1), 10)
	b = append(b, `,"waiting_room":"`...)
	b = append(b, sale.RoomName(v.Room.Mode)...)
	b = append(b, `","admit_per_second":`...)
	b = strconv.AppendInt(b, v.Room.Rate, 10)
	b = append(b, `,"pass_seconds":`...)
	b = strconv.AppendInt(b, v.Room.Pass, 10)
	b = append(b, `,"joined":`...)
	b = strconv.AppendInt(b, v.Room.Joined, 10)
	b = append(b, `,"admitted":`...)
	b = strconv.AppendInt(b, v.Admitted(), 10)
	return append(b, '}')
}

// Reload reads the shop's page template (http.page_template) and the
// scripts again, as POST /admin/v1/scripts/reload does, and SIGHUP through
// the process: a template that fails leaves both as they were, and scripts
// that fail leave the page as it was.
func (s *Server) Reload(ctx context.Context, who string) ([]scripts.Script, error) {
	p, err := s.pages.build()
	if err != nil {
		return nil, err
	}
	list, err := s.reload(ctx, who)
	if err != nil {
		return nil, err
	}
	s.pages.use(p)
	return list, nil
}

func (s *Server) serveReload(ctx *fasthttp.RequestCtx) {
	rctx, cancel := s.redisCtx()
	defer cancel()
	if _, err := s.Reload(rctx, s.who(ctx)); err != nil {
		if se := (*config.SettingError)(nil); errors.As(err, &se) {
			b := append([]byte(nil), `{"status":"page_error","error":`...)
			b = appendString(b, err.Error())
			write(ctx, reply{code: 422, body: append(b, '}')})
			return
		}
		if errors.Is(err, scripts.ErrCompile) {
			b := append([]byte(nil), `{"status":"script_error","error":`...)
			b = appendString(b, err.Error())
			write(ctx, reply{code: 422, body: append(b, '}')})
			return
		}
		s.log.Error("script reload failed", zap.Error(err))
		write(ctx, unavailableBecause(err.Error()))
		return
	}
	// The set in use, as GET answers it: the one just loaded, unless a
	// reload that came after it has already replaced it.
	s.writeScripts(ctx)
}

// writeScripts answers the set in use beside the folder a reload would
// read: {"status":"ok","scripts":[{"name","sha"[,"folder_sha"|"folder_error"]}],
// "folder":"none"|"same"|"differs"|"unreadable"[,"read_at":RFC3339]}.
func (s *Server) writeScripts(ctx *fasthttp.RequestCtx) {
	c := s.loader.Compare()
	b := append([]byte(nil), `{"status":"ok","scripts":[`...)
	for i, sc := range c.Scripts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, sc.Name)
		b = append(b, `,"sha":"`...)
		b = append(b, sc.SHA...)
		b = append(b, '"')
		if sc.FolderSHA != "" {
			b = append(b, `,"folder_sha":"`...)
			b = append(b, sc.FolderSHA...)
			b = append(b, '"')
		}
		if sc.FolderErr != nil {
			b = append(b, `,"folder_error":`...)
			b = appendString(b, sc.FolderErr.Error())
		}
		b = append(b, '}')
	}
	b = append(b, `],"folder":`...)
	b = appendString(b, c.Folder)
	if !c.ReadAt.IsZero() {
		b = append(b, `,"read_at":"`...)
		b = c.ReadAt.UTC().AppendFormat(b, payByLayout) // RFC 3339 to the millisecond
		b = append(b, '"')
	}
	write(ctx, reply{code: 200, body: append(b, '}')})
}

func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	s.metrics.set.WritePrometheus(ctx)
	if s.extra != nil {
		s.extra(ctx)
	}
}

// parseSaleUpdate parses an admin PUT body. A field left out is nil; a time
// given as null is sale.ClearTime.
func parseSaleUpdate(body []byte) (sale.Update, string) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return sale.Update{}, "body must be a JSON object"
	}
	var u sale.Update
	for _, f := range []struct {
		name     string
		min, max int64
		unit     string // of the reason: "whole number of seconds"
		dst      **int64
	}{
		{"stock", 0, sale.MaxStock, "", &u.Stock},
		{"per_user_limit", 1, sale.MaxLimit, "", &u.Limit},
		{"payment_window", 0, sale.MaxPaymentWindow, " of seconds", &u.PaymentWindow},
		{"buckets", 1, sale.MaxBuckets, "", &u.Buckets},
		{"admit_per_second", 1, sale.MaxAdmitPerSecond, "", &u.AdmitPerSecond},
		{"pass_seconds", sale.MinPassSeconds, sale.MaxPassSeconds, " of seconds", &u.PassSeconds},
	} {
		r, ok := raw[f.name]
		if !ok {
			continue
		}
		n, ok := wholeNumber(r)
		if !ok || n < f.min || n > f.max {
			return u, f.name + " must be a whole number" + f.unit + " from " + strconv.FormatInt(f.min, 10) + " to " + strconv.FormatInt(f.max, 10)
		}
		*f.dst = &n
	}
	if r, ok := raw["waiting_room"]; ok {
		var name string
		mode, ok := int64(0), json.Unmarshal(r, &name) == nil
		if ok {
			mode, ok = sale.ParseRoom(name)
		}
		if !ok {
			return u, `waiting_room must be "off", "fifo" or "random"`
		}
		u.WaitingRoom = &mode
	}
	var reason string
	if u.StartsAt, reason = parseTime(raw, "starts_at"); reason != "" {
		return u, reason
	}
	if u.EndsAt, reason = parseTime(raw, "ends_at"); reason != "" {
		return u, reason
	}
	if u.StartsAt != nil && u.EndsAt != nil && *u.StartsAt > 0 && *u.EndsAt > 0 && *u.EndsAt <= *u.StartsAt {
		return u, sale.ErrBadWindow.Error()
	}
	return u, ""
}

func parseTime(raw map[string]json.RawMessage, field string) (*int64, string) {
	r, ok := raw[field]
	if !ok {
		return nil, ""
	}
	if string(r) == "null" {
		n := int64(sale.ClearTime)
		return &n, ""
	}
	var str string
	if json.Unmarshal(r, &str) != nil {
		return nil, field + " must be an RFC 3339 time or null"
	}
	t, err := time.Parse(time.RFC3339Nano, str)
	if err != nil || t.UnixMilli() <= 0 {
		return nil, field + " must be an RFC 3339 time or null"
	}
	n := t.UnixMilli()
	return &n, ""
}

func parseRestock(body []byte) (int64, string) {
	// Keys are read exactly, as parseSaleUpdate reads them: a struct would
	// match "QUANTITY" too (encoding/json folds case), so that
	// {"quantity":1,"QUANTITY":1000000000} would restock what a proxy or a
	// log reading the same body does not see.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return 0, "body must be a JSON object"
	}
	n, ok := wholeNumber(raw["quantity"])
	if !ok || n < 1 || n > sale.MaxStock {
		return 0, "quantity must be a whole number from 1 to 1000000000"
	}
	return n, ""
}
