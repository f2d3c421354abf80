package scripts

import "strconv"

// Code is an outcome code of the reserve, admin and order scripts: the first
// value of each reservation's triple in reserve's reply, the first element of
// admin's and of order's. The scripts draw on this one code space, so that a
// code means the same thing whichever script answered it. Each script declares the codes it
// returns as local constants at its top, named as String names them
// (codes_test.go reads the shipped Lua and holds the two sides together);
// the gateway maps them to its sentinels in one function.
type Code int64

const (
	// CodeOK is success: the reservation was accepted, the admin operation
	// applied (or the sale read).
	CodeOK Code = 0
	// CodeNotFound: the sale does not exist.
	CodeNotFound Code = 1
	// CodeNotStarted: the sale's window has not opened.
	CodeNotStarted Code = 2
	// CodeEnded: the sale's window has closed.
	CodeEnded Code = 3
	// CodeLocked: an operator locked the sale.
	CodeLocked Code = 4
	// CodeLimitReached: the buyer would hold more than the per-user limit.
	CodeLimitReached Code = 5
	// CodeSoldOut: no unit is left.
	CodeSoldOut Code = 6
	// CodeInsufficientStock: fewer units are left than asked for.
	CodeInsufficientStock Code = 7
	// CodeIdempotencyConflict: the Idempotency-Key was first used with
	// another user or quantity.
	CodeIdempotencyConflict Code = 8
	// CodeOrderIDCollision: the order id is taken by another reservation.
	// Never expected (the gateway draws ids that cannot collide); nothing
	// was reserved.
	CodeOrderIDCollision Code = 9
	// CodeStockBelowSold: an update would set the stock below the units sold.
	CodeStockBelowSold Code = 10
	// CodeBadWindow: an update would make the window end before it starts.
	CodeBadWindow Code = 11
	// CodeStockRequired: a sale cannot be created without a stock.
	CodeStockRequired Code = 12
	// CodeStockCeiling: a restock would take the stock above the ceiling
	// that a sale's stock may reach; nothing was changed.
	CodeStockCeiling Code = 13
	// CodeOrderNotFound: the sale holds no order of that id.
	CodeOrderNotFound Code = 14
	// CodeOrderPaid: the order is paid, which nothing undoes (a cancel).
	CodeOrderPaid Code = 15
	// CodeOrderCancelled: the order was cancelled (a pay).
	CodeOrderCancelled Code = 16
	// CodeOrderExpired: the order expired, or the call came at or after its
	// pay_by and expired it right there (a pay or a cancel).
	CodeOrderExpired Code = 17
	// CodeOrderConfirmed: the order is confirmed, its sale asked no payment
	// (a pay).
	CodeOrderConfirmed Code = 18
	// CodeRepairing: the sale is held (the hold script) because Redis
	// restarted or failed over and may be behind MySQL; package repair
	// releases it. Nothing was promised or changed: the gateway answers 503.
	CodeRepairing Code = 19
	// CodeBucketed: the sale keeps its stock in buckets (API.md "buckets"),
	// so its home slot reserves nothing: the gateway sends each buyer to
	// the bucket the buyer belongs to. Nothing was promised or changed.
	CodeBucketed Code = 20
	// CodeBucketsFixed: an update names a bucket count other than the
	// sale's, which is fixed at creation.
	CodeBucketsFixed Code = 21
	// CodeStockBelowMoved: an update of the home of a sale of several
	// buckets names a stock below the units the home has handed to its
	// buckets (sold or not); nothing was changed. The gateway takes the
	// buckets' unsold units back and tries again: only what they sold
	// refuses a stock.
	CodeStockBelowMoved Code = 22
	// CodeNoRoom: a join on a sale without a waiting room.
	CodeNoRoom Code = 23
	// CodeRoomFixed: an update names another waiting room after the sale's
	// window has started; nothing was changed.
	CodeRoomFixed Code = 24
)

// codeNames are the codes' names in the Lua scripts.
var codeNames = [...]string{
	CodeOK:                  "OK",
	CodeNotFound:            "NOT_FOUND",
	CodeNotStarted:          "NOT_STARTED",
	CodeEnded:               "ENDED",
	CodeLocked:              "LOCKED",
	CodeLimitReached:        "LIMIT_REACHED",
	CodeSoldOut:             "SOLD_OUT",
	CodeInsufficientStock:   "INSUFFICIENT_STOCK",
	CodeIdempotencyConflict: "IDEMPOTENCY_CONFLICT",
	CodeOrderIDCollision:    "ORDER_ID_COLLISION",
	CodeStockBelowSold:      "STOCK_BELOW_SOLD",
	CodeBadWindow:           "BAD_WINDOW",
	CodeStockRequired:       "STOCK_REQUIRED",
	CodeStockCeiling:        "STOCK_CEILING",
	CodeOrderNotFound:       "ORDER_NOT_FOUND",
	CodeOrderPaid:           "ORDER_PAID",
	CodeOrderCancelled:      "ORDER_CANCELLED",
	CodeOrderExpired:        "ORDER_EXPIRED",
	CodeOrderConfirmed:      "ORDER_CONFIRMED",
	CodeRepairing:           "REPAIRING",
	CodeBucketed:            "BUCKETED",
	CodeBucketsFixed:        "BUCKETS_FIXED",
	CodeStockBelowMoved:     "STOCK_BELOW_MOVED",
	CodeNoRoom:              "NO_ROOM",
	CodeRoomFixed:           "ROOM_FIXED",
}

// Known reports whether c is one of the codes above; a reply carrying any
// other number comes from a script this binary does not understand.
func (c Code) Known() bool { return c >= 0 && int(c) < len(codeNames) }

// String is the code's name in the Lua scripts ("SOLD_OUT"), or its number
// for a code that is not Known.
func (c Code) String() string {
	if c.Known() {
		return codeNames[c]
	}
	return "code " + strconv.FormatInt(int64(c), 10)
}
