package order

// The states of an order, as strings on the wire, in Redis (one letter, see
// package scripts) and in the MySQL `state` column. An order without a
// payment window is confirmed at once; with one it is pending_payment until
// it is paid, cancelled or expired. The last three are final: nothing moves
// an order out of them (Invariant 8).
const (
	StateConfirmed      = "confirmed"
	StatePendingPayment = "pending_payment"
	StatePaid           = "paid"
	StateCancelled      = "cancelled"
	StateExpired        = "expired"
)

// Final reports whether state is one no order leaves: paid, cancelled or
// expired. An unknown state is not final.
func Final(state string) bool {
	switch state {
	case StatePaid, StateCancelled, StateExpired:
		return true
	}
	return false
}

// Live reports whether an order in state holds its units: pending_payment,
// paid or confirmed. Redis `sold` and the MySQL live units count exactly
// these.
func Live(state string) bool {
	switch state {
	case StateConfirmed, StatePendingPayment, StatePaid:
		return true
	}
	return false
}

// ValidState reports whether state is one of the five states.
func ValidState(state string) bool {
	switch state {
	case StateConfirmed, StatePendingPayment, StatePaid, StateCancelled, StateExpired:
		return true
	}
	return false
}
