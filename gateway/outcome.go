package gateway

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/flashgate/flashgate/scripts"
)

// Business outcomes of a buy or an admin call. Store returns them unwrapped
// (errors.Is stays as cheap as ==), except ErrUnavailable, which wraps the
// cause, and the refusals of an update, ErrStockBelowSold and
// ErrBucketsFixed, which come with the numbers that refused it.
var (
	ErrNotFound            = errors.New("no such sale")
	ErrNotStarted          = errors.New("sale not started")
	ErrEnded               = errors.New("sale ended")
	ErrLocked              = errors.New("sale locked")
	ErrLimitReached        = errors.New("per-user limit reached")
	ErrSoldOut             = errors.New("sold out")
	ErrInsufficientStock   = errors.New("insufficient stock")
	ErrIdempotencyConflict = errors.New("idempotency key reused with another user or quantity")
	// ErrStockBelowSold is an update whose stock is below the units the
	// sale has sold; the error returned is a *StockBelowSoldError, which
	// names both.
	ErrStockBelowSold = errors.New("stock below units sold")
	// ErrBucketsFixed is an update naming a bucket count other than the
	// sale's, fixed at its creation; the error returned wraps it with the
	// sale's count.
	ErrBucketsFixed  = errors.New("buckets cannot change")
	ErrBadWindow     = errors.New("ends_at must be after starts_at")
	ErrStockRequired = errors.New("stock is required to create a sale")
	ErrStockCeiling  = errors.New("restock would take stock above " + strconv.Itoa(maxStock))
	// Outcomes of a pay or a cancel (Store.Pay, Store.Cancel).
	ErrOrderNotFound  = errors.New("no such order")
	ErrOrderPaid      = errors.New("order is paid")
	ErrOrderCancelled = errors.New("order is cancelled")
	ErrOrderExpired   = errors.New("order expired")
	ErrOrderConfirmed = errors.New("order is confirmed: its sale asks no payment")
	// ErrRateLimited is admission control shedding a buy before Redis.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnavailable wraps every failure to reach Redis in time, and every
	// reply the gateway cannot read: either way it promised nothing.
	ErrUnavailable = errors.New("redis unavailable")
	// errRepairing is a sale held after a Redis restart or failover until
	// it has been checked against MySQL (scripts' hold, package repair).
	errRepairing = fmt.Errorf("%w: the sale is held until it is checked against MySQL after a Redis restart", ErrUnavailable)
	// errBucketed is the home slot of a sale of several buckets asked to
	// reserve: Store.Reserve sends the buyers to their buckets, and no
	// buyer ever hears it (buckets.go).
	errBucketed = fmt.Errorf("%w: the sale's stock is in its buckets", ErrUnavailable)
	// errStockBelowMoved is the home of a sale of several buckets asked
	// for a stock below the units it has handed to them, sold or not:
	// Store.Upsert takes their unsold units back and tries again, and no
	// admin ever hears it (buckets_lower.go).
	errStockBelowMoved = fmt.Errorf("%w: the new stock is below the units the buckets hold", ErrUnavailable)
)

// StockBelowSoldError is an update refused because its stock is below the
// units the sale had sold when the update was decided. It matches
// ErrStockBelowSold.
type StockBelowSoldError struct {
	Stock, Sold int64
}

func (e *StockBelowSoldError) Error() string {
	return "stock " + strconv.FormatInt(e.Stock, 10) + " below the " + strconv.FormatInt(e.Sold, 10) + " units sold"
}

func (e *StockBelowSoldError) Unwrap() error { return ErrStockBelowSold }

// outcome maps a code of the Lua scripts to its sentinel; CodeOK is nil.
// This is the only place the scripts' codes are interpreted.
func outcome(code scripts.Code) error {
	switch code {
	case scripts.CodeOK:
		return nil
	case scripts.CodeNotFound:
		return ErrNotFound
	case scripts.CodeNotStarted:
		return ErrNotStarted
	case scripts.CodeEnded:
		return ErrEnded
	case scripts.CodeLocked:
		return ErrLocked
	case scripts.CodeLimitReached:
		return ErrLimitReached
	case scripts.CodeSoldOut:
		return ErrSoldOut
	case scripts.CodeInsufficientStock:
		return ErrInsufficientStock
	case scripts.CodeIdempotencyConflict:
		return ErrIdempotencyConflict
	case scripts.CodeStockBelowSold:
		return ErrStockBelowSold
	case scripts.CodeBadWindow:
		return ErrBadWindow
	case scripts.CodeStockRequired:
		return ErrStockRequired
	case scripts.CodeStockCeiling:
		return ErrStockCeiling
	case scripts.CodeOrderNotFound:
		return ErrOrderNotFound
	case scripts.CodeOrderPaid:
		return ErrOrderPaid
	case scripts.CodeOrderCancelled:
		return ErrOrderCancelled
	case scripts.CodeOrderExpired:
		return ErrOrderExpired
	case scripts.CodeOrderConfirmed:
		return ErrOrderConfirmed
	case scripts.CodeRepairing:
		return errRepairing
	case scripts.CodeBucketed:
		return errBucketed
	case scripts.CodeBucketsFixed:
		return ErrBucketsFixed
	case scripts.CodeStockBelowMoved:
		return errStockBelowMoved
	default:
		// An order id collision, or a code of a script the gateway does not
		// understand. Neither promised anything to the buyer.
		return fmt.Errorf("%w: script answered %s", ErrUnavailable, code)
	}
}

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
	replyStockCeiling     = conflict(ErrStockCeiling.Error())
	replyOrderPaid        = fixed(409, "order_paid")
	replyOrderCancelled   = fixed(409, "order_cancelled")
	replyOrderExpired     = fixed(409, "order_expired")
	replyOrderConfirmed   = conflict(ErrOrderConfirmed.Error())
	replyUnavailable      = fixed(503, "unavailable")
	replyTooLarge         = fixed(413, "too_large")
	replyRateLimited      = fixed(429, "rate_limited")
	replyUnauthorized     = fixed(401, "unauthorized")
	replyMethodNotAllowed = fixed(405, "method_not_allowed")
	replyOK               = fixed(200, "ok")
	replyDraining         = fixed(503, "draining")
)

// replyFor maps an error to its response. Errors that are not business
// outcomes are 503 unavailable: the gateway promised nothing.
func replyFor(err error) reply {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrOrderNotFound):
		return replyNotFound
	case errors.Is(err, ErrNotStarted):
		return replyNotStarted
	case errors.Is(err, ErrEnded):
		return replyEnded
	case errors.Is(err, ErrLocked):
		return replyLocked
	case errors.Is(err, ErrLimitReached):
		return replyLimitReached
	case errors.Is(err, ErrSoldOut):
		return replySoldOut
	case errors.Is(err, ErrInsufficientStock):
		return replyInsufficient
	case errors.Is(err, ErrIdempotencyConflict):
		return replyIdemConflict
	case errors.Is(err, ErrStockBelowSold), errors.Is(err, ErrBucketsFixed):
		// An admin answer: the error says which numbers refused it.
		return conflict(err.Error())
	case errors.Is(err, ErrStockCeiling):
		return replyStockCeiling
	case errors.Is(err, ErrOrderPaid):
		return replyOrderPaid
	case errors.Is(err, ErrOrderCancelled):
		return replyOrderCancelled
	case errors.Is(err, ErrOrderExpired):
		return replyOrderExpired
	case errors.Is(err, ErrOrderConfirmed):
		return replyOrderConfirmed
	case errors.Is(err, ErrRateLimited):
		return replyRateLimited
	case errors.Is(err, ErrBadWindow), errors.Is(err, ErrStockRequired):
		return badRequest(err.Error())
	default:
		return replyUnavailable
	}
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
