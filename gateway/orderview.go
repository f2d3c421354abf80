package gateway

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// payByLayout is RFC 3339 with exactly three fraction digits: pay_by is the
// deadline the scripts enforce, to the millisecond, so it is written to the
// millisecond, always (Nano's layout would drop trailing zeros).
const payByLayout = "2006-01-02T15:04:05.000Z07:00"

// appendPayBy appends a pay_by (Unix ms) as a JSON value: the RFC 3339 time
// in UTC, or null for 0.
func appendPayBy(b []byte, ms int64) []byte {
	if ms == 0 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = time.UnixMilli(ms).UTC().AppendFormat(b, payByLayout)
	return append(b, '"')
}

// writeAccepted answers a buy's 202. payBy is the order's deadline (Unix
// ms) or 0: the order is then confirmed, else pending_payment. The body is
// built on the stack; an Idempotency-Key replay, which has the same Result,
// answers the same bytes.
func writeAccepted(ctx *fasthttp.RequestCtx, orderID, sale, user string, qty int, payBy int64) {
	ctx.SetStatusCode(fasthttp.StatusAccepted)
	ctx.Response.Header.SetContentTypeBytes(jsonType)
	var buf [384]byte // ids are at most 64 bytes each: the reply fits
	ctx.Response.SetBody(appendAccepted(buf[:0], orderID, sale, user, qty, payBy))
}

// appendAccepted appends the 202 body of an accepted buy. The ids are
// valid ids (order.ValidID), which need no escaping.
func appendAccepted(b []byte, orderID, sale, user string, qty int, payBy int64) []byte {
	b = append(b, `{"status":"accepted","order_id":"`...)
	b = append(b, orderID...)
	b = append(b, `","sale_id":"`...)
	b = append(b, sale...)
	b = append(b, `","user_id":"`...)
	b = append(b, user...)
	b = append(b, `","quantity":`...)
	b = strconv.AppendInt(b, int64(qty), 10)
	b = append(b, `,"state":"`...)
	if payBy > 0 {
		b = append(b, order.StatePendingPayment...)
	} else {
		b = append(b, order.StateConfirmed...)
	}
	b = append(b, `","pay_by":`...)
	b = appendPayBy(b, payBy)
	return append(b, '}')
}

// appendOrderView appends the order view of API.md, the answer of an order
// status request and of an admin pay or cancel:
// {"status":"queued"|"created","order_id","sale_id","user_id","quantity",
// "state","pay_by"}. status is created once the order is in MySQL; pay_by
// is given while a payment is due (pending_payment), else null. The router
// checked both ids; the user id is escaped, coming from Redis.
func appendOrderView(b []byte, sale, orderID string, r scripts.Record) []byte {
	b = append(b, `{"status":"`...)
	if r.Created {
		b = append(b, "created"...)
	} else {
		b = append(b, "queued"...)
	}
	b = append(b, `","order_id":"`...)
	b = append(b, orderID...)
	b = append(b, `","sale_id":"`...)
	b = append(b, sale...)
	b = append(b, `","user_id":`...)
	b = appendString(b, r.UserID)
	b = append(b, `,"quantity":`...)
	b = strconv.AppendInt(b, r.Quantity, 10)
	b = append(b, `,"state":`...)
	b = appendString(b, r.State)
	b = append(b, `,"pay_by":`...)
	var payBy int64
	if r.State == order.StatePendingPayment {
		payBy = r.PayBy
	}
	b = appendPayBy(b, payBy)
	return append(b, '}')
}
