package scripts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/order"
)

// Record is one order as the sale's Orders hash holds it, the value
//
//	F:S:PAYBY:AT:QTY:USER
//
// F is "q" as the reserve script writes it and "c" for an order known to be
// in MySQL: the repair script writes it so, and so did the mark script of
// the releases before the created set (Keys.Created), whose records still
// read as created. An order flagged "q" is in MySQL when its id is in the
// sale's created set, which the order script reads beside the record (its
// reply flags such an order "c"); S is the
// state, one letter (C confirmed, P pending_payment, D paid, X cancelled,
// E expired); PAYBY the pay_by in Unix ms (0: none); AT the time the order
// was reserved, in Unix ms; QTY the units; USER the buyer, last because a
// user id may contain ':'. The reserve and order scripts write it; Go only
// reads it (the order view, reconciliation) and tests build it.
//
// ParseRecord also reads the form written before payment windows,
// "F:QTY:USER": a confirmed order, with neither pay_by nor reservation
// time.
type Record struct {
	Created    bool   // "c": the order is in MySQL (see above for "q")
	State      string // one of order's State constants
	PayBy      int64  // Unix ms; 0 for none
	ReservedAt int64  // Unix ms; 0 when unknown (a record of the old form)
	Quantity   int64
	UserID     string
}

// ErrBadRecord is wrapped by ParseRecord's error for a value that is not a
// record.
var ErrBadRecord = errors.New("not an order record")

// stateLetters are the states' letters in a record, in both directions.
var stateLetters = map[string]string{
	order.StateConfirmed:      "C",
	order.StatePendingPayment: "P",
	order.StatePaid:           "D",
	order.StateCancelled:      "X",
	order.StateExpired:        "E",
}

var letterStates = func() map[string]string {
	m := make(map[string]string, len(stateLetters))
	for s, l := range stateLetters {
		m[l] = s
	}
	return m
}()

// ParseRecord reads an Orders hash value, of either form.
func ParseRecord(v string) (Record, error) {
	flag, rest, ok := strings.Cut(v, ":")
	if !ok || flag != "q" && flag != "c" {
		return Record{}, fmt.Errorf("%w: %q", ErrBadRecord, v)
	}
	r := Record{Created: flag == "c", State: order.StateConfirmed}
	if letter, tail, ok := strings.Cut(rest, ":"); ok && len(letter) == 1 && letter[0] >= 'A' && letter[0] <= 'Z' {
		if r.State = letterStates[letter]; r.State == "" {
			return Record{}, fmt.Errorf("%w: state in %q", ErrBadRecord, v)
		}
		f := strings.SplitN(tail, ":", 3)
		if len(f) != 3 {
			return Record{}, fmt.Errorf("%w: %q", ErrBadRecord, v)
		}
		var err1, err2 error
		r.PayBy, err1 = strconv.ParseInt(f[0], 10, 64)
		r.ReservedAt, err2 = strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || r.PayBy < 0 || r.ReservedAt < 0 {
			return Record{}, fmt.Errorf("%w: times in %q", ErrBadRecord, v)
		}
		rest = f[2]
	}
	qty, user, ok := strings.Cut(rest, ":")
	if !ok || user == "" {
		return Record{}, fmt.Errorf("%w: %q", ErrBadRecord, v)
	}
	q, err := strconv.ParseInt(qty, 10, 64)
	if err != nil || q < 1 {
		return Record{}, fmt.Errorf("%w: quantity in %q", ErrBadRecord, v)
	}
	r.Quantity, r.UserID = q, user
	return r, nil
}

// String is the record as the Orders hash holds it, in the current form.
// A State that is none of order's constants is written as confirmed.
func (r Record) String() string {
	flag := "q"
	if r.Created {
		flag = "c"
	}
	letter := stateLetters[r.State]
	if letter == "" {
		letter = stateLetters[order.StateConfirmed]
	}
	b := make([]byte, 0, 48+len(r.UserID))
	b = append(b, flag...)
	b = append(b, ':')
	b = append(b, letter...)
	b = append(b, ':')
	b = strconv.AppendInt(b, r.PayBy, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, r.ReservedAt, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, r.Quantity, 10)
	b = append(b, ':')
	b = append(b, r.UserID...)
	return string(b)
}

// Due reports whether the order awaits a payment whose deadline has come at
// now (Unix ms, Redis's clock): a pay now would expire it instead.
func (r Record) Due(now int64) bool {
	return r.State == order.StatePendingPayment && r.PayBy > 0 && now >= r.PayBy
}

// StateLetter is the letter of state (one of package order's State
// constants) in a record and in the repair script's arguments; "" for
// another string.
func StateLetter(state string) string { return stateLetters[state] }
