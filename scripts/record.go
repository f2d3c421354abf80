package scripts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Record is one order as the sale's Orders hash holds it: the value
// "q:QTY:USER" while the order is queued, "c:QTY:USER" once it is in MySQL.
// The reserve script writes it and the mark script flips q to c; Go only
// reads it (the order status endpoint, reconciliation).
type Record struct {
	Created  bool // "c": the order is in MySQL
	Quantity int64
	UserID   string
}

// ErrBadRecord is wrapped by ParseRecord's error for a value that is not a
// record.
var ErrBadRecord = errors.New("not an order record")

// ParseRecord reads an Orders hash value.
func ParseRecord(v string) (Record, error) {
	state, rest, ok := strings.Cut(v, ":")
	if !ok || state != "q" && state != "c" {
		return Record{}, fmt.Errorf("%w: %q", ErrBadRecord, v)
	}
	qty, user, ok := strings.Cut(rest, ":")
	if !ok || user == "" {
		return Record{}, fmt.Errorf("%w: %q", ErrBadRecord, v)
	}
	q, err := strconv.ParseInt(qty, 10, 64)
	if err != nil || q < 1 {
		return Record{}, fmt.Errorf("%w: quantity in %q", ErrBadRecord, v)
	}
	return Record{Created: state == "c", Quantity: q, UserID: user}, nil
}

// String is the record as the Orders hash holds it.
func (r Record) String() string {
	state := "q"
	if r.Created {
		state = "c"
	}
	return state + ":" + strconv.FormatInt(r.Quantity, 10) + ":" + r.UserID
}
