package sale

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
	ErrBucketsFixed = errors.New("buckets cannot change")
	// ErrRoomFixed is an update naming another waiting room once the
	// sale's window has started.
	ErrRoomFixed = errors.New("waiting_room cannot change once the sale has started")
	// ErrNoRoom is a join on a sale without a waiting room.
	ErrNoRoom        = errors.New("the sale has no waiting room")
	ErrBadWindow     = errors.New("ends_at must be after starts_at")
	ErrStockRequired = errors.New("stock is required to create a sale")
	ErrStockCeiling  = errors.New("restock would take stock above " + strconv.Itoa(MaxStock))
	// Outcomes of a pay or a cancel (Store.Pay, Store.Cancel).
	ErrOrderNotFound  = errors.New("no such order")
	ErrOrderPaid      = errors.New("order is paid")
	ErrOrderCancelled = errors.New("order is cancelled")
	ErrOrderExpired   = errors.New("order expired")
	ErrOrderConfirmed = errors.New("order is confirmed: its sale asks no payment")
	// ErrRateLimited is a buy shed before Redis: the sale has as many
	// reservations in flight on this process as the batching allows
	// (Batching.MaxInFlight), or the edge's admission control refused it.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnavailable wraps every failure to reach Redis in time, and every
	// reply the gateway cannot read: either way it promised nothing.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrUnconfirmed is a change made on the sale's primary whose replicas
	// did not acknowledge it in time (replicated mode, redis.min_replicas):
	// a failover may still lose it. A buy's Result carries its order id.
	ErrUnconfirmed = errors.New("the replicas did not confirm the change in time")
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
	// admin ever hears it (lower.go).
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
	case scripts.CodeNoRoom:
		return ErrNoRoom
	case scripts.CodeRoomFixed:
		return ErrRoomFixed
	case scripts.CodeStockBelowMoved:
		return errStockBelowMoved
	default:
		// An order id collision, or a code of a script the gateway does not
		// understand. Neither promised anything to the buyer.
		return fmt.Errorf("%w: script answered %s", ErrUnavailable, code)
	}
}
