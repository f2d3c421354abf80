package sale

import "github.com/flashgate/flashgate/scripts"

// View is a sale as Redis holds it, read atomically, with Redis's clock.
type View struct {
	ID            string
	Now           int64 // Unix ms
	Stock         int64
	Sold          int64
	Limit         int64
	Locked        bool
	StartsAt      int64 // Unix ms, 0 for an open start
	EndsAt        int64 // Unix ms, 0 for an open end
	Buyers        int64
	OutboxPending int64
	PaymentWindow int64 // seconds; 0 for none
	// Numbers of orders: awaiting payment, and moved to each final state.
	Pending, Paid, Cancelled, Expired int64
	// Buckets is the sale's bucket count (1 for the one slot); Moved, of a
	// sale of several, the units its home has handed to them.
	Buckets, Moved int64
	// Room is the sale's waiting room (room.go).
	Room scripts.Room
}

// Admitted is the number of buyers the waiting room has let in at Now.
func (v *View) Admitted() int64 {
	w := v.Room
	return admitted(w.Mode, w.Prequeue, w.Joined, Clock{Version: w.Version, At: w.At, Head: w.Head, Rate: w.Rate}, v.Now)
}

// Remaining is stock not yet sold.
func (v *View) Remaining() int64 { return v.Stock - v.Sold }

// State is the sale's state; where several apply, the first of ended,
// upcoming, locked, sold_out wins.
func (v *View) State() string {
	switch {
	case v.EndsAt > 0 && v.Now >= v.EndsAt:
		return "ended"
	case v.StartsAt > 0 && v.Now < v.StartsAt:
		return "upcoming"
	case v.Locked:
		return "locked"
	case v.Remaining() <= 0:
		return "sold_out"
	default:
		return "active"
	}
}

// Update is an admin PUT: nil fields keep their value; a time of
// ClearTime clears it (open window). PaymentWindow is in seconds; a sale
// created without one has none (0). A new window applies to the orders
// accepted after it.
type Update struct {
	Stock         *int64
	Limit         *int64
	StartsAt      *int64
	EndsAt        *int64
	PaymentWindow *int64
	Buckets       *int64 // fixed at creation: another count on an update is ErrBucketsFixed
	// The waiting room: its mode (RoomOff, RoomFIFO, RoomRandom; fixed once
	// the window has started, ErrRoomFixed), admissions per second and
	// pass in seconds.
	WaitingRoom, AdmitPerSecond, PassSeconds *int64
}

// ClearTime, as a time of an Update, clears it (an open start or end).
const ClearTime = -1

// Bounds of a sale's settings (API.md), so that no arithmetic in Lua can
// overflow. MaxStock bounds the stock itself, not only an update's:
// restocks may add up to it and no further (admin.lua refuses one that
// would pass it, ErrStockCeiling).
const (
	MaxStock         = 1_000_000_000
	MaxLimit         = 1_000_000
	MaxPaymentWindow = 86_400 // seconds
	MaxBuckets       = 16
)
