package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale"
)

// The waiting room's edge (API.md "Waiting room"): the join, a script call
// shared with the sale's other joins in flight (sale.Store.Join); the poll,
// answered from the ticket and the gateway's memory of the room (rooms.go)
// with no Redis call; and the buy's check of the ticket, in memory, before
// anything else.

// ticketHeader carries a buyer's ticket on a poll and a buy.
const ticketHeader = "Flashgate-Ticket"

// Bounds of poll_after_ms (API.md).
const (
	minPollAfter = 500
	maxPollAfter = 20_000
)

// serveJoin answers a join; the router checked saleB, authenticate the
// token (buyer is its sub, "" with authentication off).
func (s *Server) serveJoin(ctx *fasthttp.RequestCtx, saleB []byte, buyer string) {
	user, refused := parseJoin(ctx.PostBody(), buyer)
	if refused.code != 0 {
		write(ctx, refused)
		return
	}
	now := time.Now()
	if err := s.closed.get(saleB, now); errors.Is(err, sale.ErrSoldOut) || errors.Is(err, sale.ErrEnded) || errors.Is(err, sale.ErrNotFound) {
		write(ctx, replyFor(err))
		return
	}
	if rm := s.rooms.peek(saleB); rm != nil && rm.SoldOut {
		write(ctx, replySoldOut) // a sale of buckets: its home cannot tell
		return
	}
	if !s.limits.allow(saleB, now) {
		writeRateLimited(ctx) // a join is a Redis call, as a buy is
		return
	}
	saleID := string(saleB)
	place, err := s.sales.Join(saleID, user)
	if err != nil {
		if errors.Is(err, sale.ErrRateLimited) {
			writeRateLimited(ctx)
			return
		}
		if errors.Is(err, sale.ErrUnavailable) {
			s.unavailable(ctx, "join", err)
			return
		}
		write(ctx, replyFor(err))
		return
	}
	s.rooms.joined(saleID, place.Room)
	t := sale.Ticket{User: user, Join: place.Join, Prequeue: place.Room.Prequeue, Clock: place.Room.Clock}
	write(ctx, reply{code: 200, body: appendQueueView(nil, place.Room, t, nil, now.UnixMilli())})
}

// parseJoin reads the buyer of a join: the body's user_id, or the token's
// sub (the buy's rules, parseBuyFor); quantity is not read.
func parseJoin(body []byte, sub string) (string, reply) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return "", badRequest("body must be a JSON object")
	}
	if !json.Valid(body) {
		return "", badRequest("malformed JSON")
	}
	userRaw, _ := topLevelFields(body)
	if sub != "" && (userRaw == nil || string(userRaw) == "null") {
		return sub, reply{}
	}
	user, ok := jsonString(userRaw)
	if !ok || !order.ValidID(user) {
		return "", badRequest(badUser)
	}
	if sub != "" && string(user) != sub {
		return "", replyForbidden
	}
	return string(user), reply{}
}

// servePoll answers a poll from memory; the router checked saleB.
func (s *Server) servePoll(ctx *fasthttp.RequestCtx, saleB []byte, buyer string) {
	now := time.Now()
	rm, e, err := s.rooms.get(saleB, now)
	if err != nil {
		s.unavailable(ctx, "room", err)
		return
	}
	switch {
	case rm == noSale:
		write(ctx, replyNotFound)
		return
	case rm.Mode == sale.RoomOff:
		write(ctx, replyNoRoom)
		return
	}
	e.polls.Add(1)
	ms := now.UnixMilli()
	if rm.End > 0 && ms >= rm.End {
		write(ctx, replyEnded)
		return
	}
	if rm.SoldOut || errors.Is(s.closed.get(saleB, now), sale.ErrSoldOut) {
		write(ctx, replySoldOut)
		return
	}
	raw, t, ok := s.ticket(ctx, rm, buyer)
	if !ok {
		e.notAdmitted.Add(1)
		write(ctx, replyNotAdmitted)
		return
	}
	var buf [512]byte // the view is built on the stack and copied into the response
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(jsonType)
	ctx.Response.SetBody(appendQueueView(buf[:0], rm, t, raw, ms))
}

// ticket reads the request's ticket of room rm: exactly one, genuine, of
// this sale, and of buyer when authentication names one. raw is the
// ticket as sent (aliasing the request).
func (s *Server) ticket(ctx *fasthttp.RequestCtx, rm *sale.Room, buyer string) (raw []byte, t sale.Ticket, ok bool) {
	v, n := headerValues(&ctx.Request.Header, ticketHeader)
	if n != 1 {
		return nil, t, false
	}
	t, err := rm.Key.Read(rm.Sale, v)
	if err != nil || buyer != "" && t.User != buyer {
		return nil, t, false
	}
	return v, t, true
}

// admitted tells whether a buy of user may pass room rm with ticket t (read
// by Server.ticket): t is user's, admitted, and its pass has not ended at
// now.
func admitted(rm *sale.Room, t sale.Ticket, user []byte, now time.Time) bool {
	if t.User != string(user) {
		return false
	}
	pl := placeOf(rm, t, now.UnixMilli())
	return pl.admitted && now.UnixMilli() < pl.passUntil
}

// place is a ticket's place in its room at one instant.
type place struct {
	known     bool  // false: a random room's pre-queue not yet sealed
	position  int64 // with known
	ahead     int64 // with known
	admitted  bool
	admitAt   int64 // Unix ms; with known
	passUntil int64 // Unix ms; with admitted
}

// placeOf reads t's place in rm at now (Unix ms). Of the clock the room's
// memory holds and the one the ticket carries, the newer counts; a
// position the newer clock had admitted before its anchor was admitted
// when the ticket's clock said, if that was earlier (it is exact for a
// ticket that saw every change of rate but the last).
func placeOf(rm *sale.Room, t sale.Ticket, now int64) place {
	prequeue := rm.Prequeue
	if prequeue < 0 {
		prequeue = t.Prequeue
	}
	p, known := rm.Key.Position(rm.Mode, prequeue, t.Join)
	if !known {
		return place{}
	}
	c := sale.Newer(rm.Clock, t.Clock)
	at := c.AdmitAt(p)
	if p <= c.Head && c.Version > t.Clock.Version {
		at = min(at, t.Clock.AdmitAt(p))
	}
	pl := place{known: true, position: p, admitAt: at}
	if head := c.HeadAt(now); p <= head {
		pl.admitted = true
		pl.passUntil = at + rm.Pass*1000
	} else {
		pl.ahead = p - 1 - head
	}
	return pl
}

// appendQueueView appends the queue view of ticket t (raw as sent, or nil
// to sign it here) in rm at now (Unix ms).
func appendQueueView(b []byte, rm *sale.Room, t sale.Ticket, raw []byte, now int64) []byte {
	pl := placeOf(rm, t, now)
	b = append(b, `{"status":"`...)
	if pl.admitted {
		b = append(b, "admitted"...)
	} else {
		b = append(b, "waiting"...)
	}
	b = append(b, `","sale_id":"`...)
	b = append(b, rm.Sale...)
	b = append(b, `","user_id":"`...)
	b = append(b, t.User...)
	b = append(b, `","ticket":"`...)
	if raw != nil {
		b = append(b, raw...)
	} else {
		b = rm.Key.Sign(b, rm.Sale, t)
	}
	b = append(b, `","position":`...)
	var eta, wait int64
	switch {
	case !pl.known:
		b = append(b, `null,"ahead":null`...)
		// The place is drawn at the start: until then, the start and
		// half the crowd so far ahead is the estimate.
		wait = rm.Start - now + rm.Joined*500/max(rm.Clock.Rate, 1)
	default:
		b = strconv.AppendInt(b, pl.position, 10)
		b = append(b, `,"ahead":`...)
		b = strconv.AppendInt(b, pl.ahead, 10)
		wait = pl.admitAt - now
	}
	if !pl.admitted {
		eta = max(0, (wait+999)/1000)
	}
	b = append(b, `,"eta_seconds":`...)
	b = strconv.AppendInt(b, eta, 10)
	b = append(b, `,"pass_until":`...)
	if pl.admitted {
		b = append(b, '"')
		b = time.UnixMilli(pl.passUntil).UTC().AppendFormat(b, payByLayout)
		b = append(b, '"')
		wait = pl.passUntil - now // nothing to wait for: ask again within the pass
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"poll_after_ms":`...)
	b = strconv.AppendInt(b, min(max(wait/2, minPollAfter), maxPollAfter), 10)
	return append(b, '}')
}
