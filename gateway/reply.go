package gateway

import (
	"errors"

	"github.com/flashgate/flashgate/sale"
)

// reply is a fixed response: HTTP code and the bytes of its body.
type reply struct {
	code   int
	body   []byte
	status string // for metrics; empty for replies built per request
}

func fixed(code int, status string) reply {
	return reply{code: code, body: []byte(`{"status":"` + status + `"}`), status: status}
}

// Replies built once; the hot path writes these bytes as they are.
var (
	replyNotFound         = fixed(404, "not_found")
	replyNotStarted       = fixed(403, "not_started")
	replyEnded            = fixed(403, "ended")
	replyLocked           = fixed(423, "locked")
	replyLimitReached     = fixed(409, "limit_reached")
	replySoldOut          = fixed(410, "sold_out")
	replyInsufficient     = fixed(409, "insufficient_stock")
	replyIdemConflict     = fixed(422, "idempotency_conflict")
	replyStockCeiling     = conflict(sale.ErrStockCeiling.Error())
	replyOrderPaid        = fixed(409, "order_paid")
	replyOrderCancelled   = fixed(409, "order_cancelled")
	replyOrderExpired     = fixed(409, "order_expired")
	replyOrderConfirmed   = conflict(sale.ErrOrderConfirmed.Error())
	replyUnavailable      = fixed(503, "unavailable")
	replyUnconfirmed      = fixed(503, "unconfirmed")
	replyTooLarge         = fixed(413, "too_large")
	replyRateLimited      = fixed(429, "rate_limited")
	replyUnauthorized     = fixed(401, "unauthorized")
	replyMethodNotAllowed = fixed(405, "method_not_allowed")
	replyOK               = fixed(200, "ok")
	replyDraining         = fixed(503, "draining")
	replyNotAdmitted      = fixed(403, "not_admitted")
	replyNoRoom           = conflict(sale.ErrNoRoom.Error())
)

// replyFor maps an error to its response. Errors that are not business
// outcomes are 503 unavailable: the gateway promised nothing.
func replyFor(err error) reply {
	switch {
	case errors.Is(err, sale.ErrNotFound), errors.Is(err, sale.ErrOrderNotFound):
		return replyNotFound
	case errors.Is(err, sale.ErrNotStarted):
		return replyNotStarted
	case errors.Is(err, sale.ErrEnded):
		return replyEnded
	case errors.Is(err, sale.ErrLocked):
		return replyLocked
	case errors.Is(err, sale.ErrLimitReached):
		return replyLimitReached
	case errors.Is(err, sale.ErrSoldOut):
		return replySoldOut
	case errors.Is(err, sale.ErrInsufficientStock):
		return replyInsufficient
	case errors.Is(err, sale.ErrIdempotencyConflict):
		return replyIdemConflict
	case errors.Is(err, sale.ErrNoRoom):
		return replyNoRoom
	case errors.Is(err, sale.ErrStockBelowSold), errors.Is(err, sale.ErrBucketsFixed), errors.Is(err, sale.ErrRoomFixed):
		// An admin answer: the error says which numbers refused it.
		return conflict(err.Error())
	case errors.Is(err, sale.ErrStockCeiling):
		return replyStockCeiling
	case errors.Is(err, sale.ErrOrderPaid):
		return replyOrderPaid
	case errors.Is(err, sale.ErrOrderCancelled):
		return replyOrderCancelled
	case errors.Is(err, sale.ErrOrderExpired):
		return replyOrderExpired
	case errors.Is(err, sale.ErrOrderConfirmed):
		return replyOrderConfirmed
	case errors.Is(err, sale.ErrRateLimited):
		return replyRateLimited
	case errors.Is(err, sale.ErrUnconfirmed):
		return replyUnconfirmed
	case errors.Is(err, sale.ErrBadWindow), errors.Is(err, sale.ErrStockRequired):
		return badRequest(err.Error())
	default:
		return replyUnavailable
	}
}

// unconfirmed is a buy's 503 in replicated mode: its order is made on the
// primary, which the replicas have not confirmed in time; the body names
// the order, whose status the buyer can poll, and a repeat of the buy with
// its Idempotency-Key answers 202 once the order is safe.
func unconfirmed(orderID string) reply {
	b := make([]byte, 0, 48+len(orderID))
	b = append(b, `{"status":"unconfirmed","order_id":`...)
	b = appendString(b, orderID)
	return reply{code: 503, body: append(b, '}'), status: "unconfirmed"}
}

// badRequest is a 400 with the reason in "error". Reasons are the gateway's
// own fixed texts, never echoed input, so they need no escaping beyond quotes.
func badRequest(reason string) reply {
	b := make([]byte, 0, 48+len(reason))
	b = append(b, `{"status":"bad_request","error":`...)
	b = appendString(b, reason)
	b = append(b, '}')
	return reply{code: 400, body: b, status: "bad_request"}
}

// unavailableBecause is a 503 unavailable with the reason in "error": why
// the gateway cannot promise anything now, in its own or a server's words,
// never a client's input.
func unavailableBecause(reason string) reply {
	b := append([]byte(nil), `{"status":"unavailable","error":`...)
	b = appendString(b, reason)
	return reply{code: 503, body: append(b, '}'), status: "unavailable"}
}

// conflict is a 409: the request is well formed, but the sale's state
// refuses it; "error" says which state.
func conflict(reason string) reply {
	b := append([]byte(nil), `{"status":"conflict","error":`...)
	b = appendString(b, reason)
	return reply{code: 409, body: append(b, '}'), status: "conflict"}
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
