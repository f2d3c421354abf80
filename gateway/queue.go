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
// anything else. Where a ticket stands is the sale's arithmetic
// (sale.Room.Where): the edge reads the header, asks, and writes the
// answer.

// ticketHeader carries a buyer's ticket on a poll and a buy.
const ticketHeader = "Flashgate-Ticket"

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
	st := place.Standing(user, now.UnixMilli())
	// The units left, from the gateway's memory of the room (a read of it
	// the first time this gateway meets the sale).
	remaining := int64(-1)
	if rm, _, err := s.rooms.get(saleB, now); err == nil && rm != noSale {
		remaining = rm.Remaining
	}
	write(ctx, reply{code: 200, body: appendQueueView(nil, place.Room, &st, nil, remaining)})
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
	rm, e, ok := s.heldRoom(ctx, saleB, now)
	if !ok {
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
	raw, st, ok := where(ctx, rm, buyer, ms)
	if !ok {
		e.notAdmitted.Add(1)
		write(ctx, replyNotAdmitted)
		return
	}
	var buf [512]byte // the view is built on the stack and copied into the response
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(jsonType)
	ctx.Response.SetBody(appendQueueView(buf[:0], rm, &st, raw, rm.Remaining))
}

// heldRoom returns what the gateway holds of the room of saleB (read
// from Redis first when it holds nothing), or answers the request itself:
// 503 when Redis cannot answer, 404 for no sale, 409 for a sale without a
// room.
func (s *Server) heldRoom(ctx *fasthttp.RequestCtx, saleB []byte, now time.Time) (*sale.Room, *roomEntry, bool) {
	rm, e, err := s.rooms.get(saleB, now)
	switch {
	case err != nil:
		s.unavailable(ctx, "room", err)
	case rm == noSale:
		write(ctx, replyNotFound)
	case rm.Mode == sale.RoomOff:
		write(ctx, replyNoRoom)
	default:
		return rm, e, true
	}
	return nil, nil, false
}

// where asks the room rm where the request's ticket stands at now (Unix
// ms): the request carries exactly one, genuine, of this sale, and of
// buyer when authentication names one. raw is the ticket as sent
// (aliasing the request).
func where(ctx *fasthttp.RequestCtx, rm *sale.Room, buyer string, now int64) (raw []byte, st sale.Standing, ok bool) {
	raw, n := headerValues(&ctx.Request.Header, ticketHeader)
	if n != 1 {
		return nil, st, false
	}
	st, err := rm.Where(raw, buyer, now)
	if err != nil {
		return nil, st, false
	}
	return raw, st, true
}

// appendQueueView appends the queue view of st in rm, with its ticket raw
// as sent, or signed here when raw is nil, and the units left (null when
// below 0: not known). A random room's view adds the buyer's join number
// once its pre-queue is sealed, for the lottery's proof.
func appendQueueView(b []byte, rm *sale.Room, st *sale.Standing, raw []byte, remaining int64) []byte {
	b = append(b, `{"status":"`...)
	if st.Admitted {
		b = append(b, "admitted"...)
	} else {
		b = append(b, "waiting"...)
	}
	b = append(b, `","sale_id":"`...)
	b = append(b, rm.Sale...)
	b = append(b, `","user_id":"`...)
	b = append(b, st.Ticket.User...)
	b = append(b, `","ticket":"`...)
	if raw != nil {
		b = append(b, raw...)
	} else {
		b = rm.Key.Sign(b, rm.Sale, st.Ticket)
	}
	b = append(b, `","position":`...)
	if st.Known {
		b = strconv.AppendInt(b, st.Position, 10)
		b = append(b, `,"ahead":`...)
		b = strconv.AppendInt(b, st.Ahead, 10)
	} else {
		b = append(b, `null,"ahead":null`...)
	}
	b = append(b, `,"eta_seconds":`...)
	b = strconv.AppendInt(b, st.ETA, 10)
	b = append(b, `,"pass_until":`...)
	if st.Admitted {
		b = append(b, '"')
		b = time.UnixMilli(st.PassUntil).UTC().AppendFormat(b, payByLayout)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"poll_after_ms":`...)
	b = strconv.AppendInt(b, st.PollAfter, 10)
	b = append(b, `,"remaining":`...)
	if remaining < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, remaining, 10)
	}
	if rm.Mode == sale.RoomRandom && st.Known {
		b = append(b, `,"join":`...)
		b = strconv.AppendInt(b, st.Ticket.Join, 10)
	}
	return append(b, '}')
}
