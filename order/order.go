// Package order is the order: what one holds, its wire format from the Redis
// outbox through RabbitMQ to MySQL, and its rules (ValidID, MaxQuantity),
// which the gateway applies to a buy at the edge and the consumer to a
// message. It is the one thing the gateway, the relay and the consumer must
// agree on.
//
// On the wire an order is a JSON object
//
//	{"order_id":"…","sale_id":"…","user_id":"…","quantity":1,"reserved_at":1735689600123,
//	 "state":"pending_payment","pay_by":1735689720123}
//
// with reserved_at and pay_by in milliseconds since the Unix epoch (Redis
// time, as the scripts wrote them). Every message is a snapshot of the order
// in one state (state.go): the reserve script's entry, and one more entry per
// change of state (paid, cancelled, expired), all alike. Unknown fields are
// ignored, so that a newer relay may add fields before every consumer knows
// them; the first five fields are required. state and pay_by are optional,
// so that a message of a relay older than payment windows still decodes: no
// state is confirmed, no pay_by (absent, null or 0) is none. So are seq (the
// sale's event number, 0 or absent: unknown) and idempotency_key (the
// reservation's Idempotency-Key; absent: none), which let a rolled-back
// Redis be repaired from MySQL.
package order

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ContentType is the AMQP content type of an encoded order.
const ContentType = "application/json"

// MaxQuantity is the largest quantity one order may carry: the buy API
// refuses more, and so does every stage after it.
const MaxQuantity = 1000

// ErrMalformed is wrapped by every error about an order that can never be
// processed: bad JSON, a missing or invalid field. A consumer dead-letters
// such a message instead of retrying it.
var ErrMalformed = errors.New("malformed order")

// Order is one accepted order, as of one state.
type Order struct {
	OrderID    string
	SaleID     string
	UserID     string
	Quantity   int
	ReservedAt time.Time // millisecond precision, UTC
	// State is one of the State constants. The zero value means
	// StateConfirmed, so that an order built without a state is today's
	// order; Unmarshal and FromStream always set it.
	State string
	// PayBy is the payment deadline of an order that had one (millisecond
	// precision, UTC); zero: none.
	PayBy time.Time
	// Seq is the sale's event number of this snapshot: the scripts count
	// every outbox entry of a sale (a reservation, a change of state), so
	// that MySQL can tell which events a rolled-back Redis has forgotten
	// (package repair). 0: unknown (a relay older than the count).
	Seq int64
	// IdemKey is the Idempotency-Key the buyer sent with the reservation,
	// "" for none; kept in MySQL so that a rolled-back Redis can be given
	// its keys back. Only the reservation's snapshot carries it.
	IdemKey string
}

// MaxIdemKey is the longest Idempotency-Key a buy may carry (API.md).
const MaxIdemKey = 128

// wire is the JSON form. Pointers tell a missing field from a zero one.
type wire struct {
	OrderID    *string `json:"order_id"`
	SaleID     *string `json:"sale_id"`
	UserID     *string `json:"user_id"`
	Quantity   *int64  `json:"quantity"`
	ReservedAt *int64  `json:"reserved_at"`
	State      *string `json:"state,omitempty"`
	PayBy      *int64  `json:"pay_by,omitempty"`
	Seq        *int64  `json:"seq,omitempty"`
	IdemKey    *string `json:"idempotency_key,omitempty"`
}

// Validate reports whether o can be stored: ids by ValidID, a quantity from
// 1 to MaxQuantity, a reservation time after the epoch, a state of the five
// (or none: confirmed) and a pay_by that is none or after the epoch. The
// error wraps ErrMalformed.
func (o Order) Validate() error {
	switch {
	case !ValidID(o.OrderID):
		return fmt.Errorf("%w: order_id %q", ErrMalformed, clip(o.OrderID))
	case !ValidID(o.SaleID):
		return fmt.Errorf("%w: sale_id %q", ErrMalformed, clip(o.SaleID))
	case !ValidID(o.UserID):
		return fmt.Errorf("%w: user_id %q", ErrMalformed, clip(o.UserID))
	case o.Quantity < 1 || o.Quantity > MaxQuantity:
		return fmt.Errorf("%w: quantity %d out of 1..%d", ErrMalformed, o.Quantity, MaxQuantity)
	case o.ReservedAt.UnixMilli() <= 0:
		return fmt.Errorf("%w: reserved_at %d", ErrMalformed, o.ReservedAt.UnixMilli())
	case o.State != "" && !ValidState(o.State):
		return fmt.Errorf("%w: state %q", ErrMalformed, clip(o.State))
	case !o.PayBy.IsZero() && o.PayBy.UnixMilli() <= 0:
		return fmt.Errorf("%w: pay_by %d", ErrMalformed, o.PayBy.UnixMilli())
	case o.Seq < 0:
		return fmt.Errorf("%w: seq %d", ErrMalformed, o.Seq)
	case o.IdemKey != "" && !ValidIdemKey(o.IdemKey):
		return fmt.Errorf("%w: idempotency_key %q", ErrMalformed, clip(o.IdemKey))
	}
	return nil
}

// Marshal returns the wire form of o after validating it. The error wraps
// ErrMalformed.
func (o Order) Marshal() ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ms := o.ReservedAt.UnixMilli()
	q := int64(o.Quantity)
	st := o.State
	if st == "" {
		st = StateConfirmed
	}
	w := wire{OrderID: &o.OrderID, SaleID: &o.SaleID, UserID: &o.UserID, Quantity: &q, ReservedAt: &ms, State: &st}
	if !o.PayBy.IsZero() {
		pb := o.PayBy.UnixMilli()
		w.PayBy = &pb
	}
	if o.Seq > 0 {
		w.Seq = &o.Seq
	}
	if o.IdemKey != "" {
		w.IdemKey = &o.IdemKey
	}
	return json.Marshal(w)
}

// Unmarshal decodes and validates the wire form of an order, JSON or a line
// (line.go). A JSON message without state is confirmed; one without pay_by
// (or 0) has none. Every
// error wraps ErrMalformed: a message that fails here fails every time.
func Unmarshal(body []byte) (Order, error) {
	if IsLines(body) {
		return unmarshalLine(body) // line.go
	}
	var w wire
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&w); err != nil {
		return Order{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Order{}, fmt.Errorf("%w: trailing data after the JSON object", ErrMalformed)
	}
	switch {
	case w.OrderID == nil:
		return Order{}, fmt.Errorf("%w: order_id missing", ErrMalformed)
	case w.SaleID == nil:
		return Order{}, fmt.Errorf("%w: sale_id missing", ErrMalformed)
	case w.UserID == nil:
		return Order{}, fmt.Errorf("%w: user_id missing", ErrMalformed)
	case w.Quantity == nil:
		return Order{}, fmt.Errorf("%w: quantity missing", ErrMalformed)
	case w.ReservedAt == nil:
		return Order{}, fmt.Errorf("%w: reserved_at missing", ErrMalformed)
	case *w.Quantity < 1 || *w.Quantity > MaxQuantity:
		return Order{}, fmt.Errorf("%w: quantity %d out of 1..%d", ErrMalformed, *w.Quantity, MaxQuantity)
	}
	o := Order{
		OrderID:    *w.OrderID,
		SaleID:     *w.SaleID,
		UserID:     *w.UserID,
		Quantity:   int(*w.Quantity),
		ReservedAt: time.UnixMilli(*w.ReservedAt).UTC(),
		State:      StateConfirmed,
	}
	if w.State != nil {
		if !ValidState(*w.State) {
			return Order{}, fmt.Errorf("%w: state %q", ErrMalformed, clip(*w.State))
		}
		o.State = *w.State
	}
	if w.PayBy != nil && *w.PayBy != 0 {
		if *w.PayBy < 0 {
			return Order{}, fmt.Errorf("%w: pay_by %d", ErrMalformed, *w.PayBy)
		}
		o.PayBy = time.UnixMilli(*w.PayBy).UTC()
	}
	if w.Seq != nil {
		o.Seq = *w.Seq
	}
	if w.IdemKey != nil {
		o.IdemKey = *w.IdemKey
	}
	return o, o.Validate()
}

// FromStream builds an order from the fields of an outbox stream entry, as
// the scripts write them (order_id, sale_id, user_id, quantity, reserved_at,
// state, pay_by; all strings). An entry without state (written before
// payment windows) is confirmed; one without pay_by, or with 0, has none.
// The error wraps ErrMalformed.
func FromStream(values map[string]any) (Order, error) {
	str := func(name string) (string, error) {
		v, ok := values[name]
		if !ok {
			return "", fmt.Errorf("%w: stream entry has no %s", ErrMalformed, name)
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: stream entry field %s is %T", ErrMalformed, name, v)
		}
		return s, nil
	}
	var o Order
	var err error
	if o.OrderID, err = str("order_id"); err != nil {
		return Order{}, err
	}
	if o.SaleID, err = str("sale_id"); err != nil {
		return Order{}, err
	}
	if o.UserID, err = str("user_id"); err != nil {
		return Order{}, err
	}
	q, err := str("quantity")
	if err != nil {
		return Order{}, err
	}
	if o.Quantity, err = strconv.Atoi(q); err != nil {
		return Order{}, fmt.Errorf("%w: quantity %q", ErrMalformed, clip(q))
	}
	at, err := str("reserved_at")
	if err != nil {
		return Order{}, err
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return Order{}, fmt.Errorf("%w: reserved_at %q", ErrMalformed, clip(at))
	}
	o.ReservedAt = time.UnixMilli(ms).UTC()
	o.State = StateConfirmed
	if _, ok := values["state"]; ok {
		if o.State, err = str("state"); err != nil {
			return Order{}, err
		}
		if !ValidState(o.State) {
			return Order{}, fmt.Errorf("%w: state %q", ErrMalformed, clip(o.State))
		}
	}
	if _, ok := values["pay_by"]; ok {
		pb, err := str("pay_by")
		if err != nil {
			return Order{}, err
		}
		ms, err := strconv.ParseInt(pb, 10, 64)
		if err != nil || ms < 0 {
			return Order{}, fmt.Errorf("%w: pay_by %q", ErrMalformed, clip(pb))
		}
		if ms > 0 {
			o.PayBy = time.UnixMilli(ms).UTC()
		}
	}
	if _, ok := values["seq"]; ok {
		sq, err := str("seq")
		if err != nil {
			return Order{}, err
		}
		if o.Seq, err = strconv.ParseInt(sq, 10, 64); err != nil || o.Seq < 0 {
			return Order{}, fmt.Errorf("%w: seq %q", ErrMalformed, clip(sq))
		}
	}
	if _, ok := values["idem"]; ok {
		if o.IdemKey, err = str("idem"); err != nil {
			return Order{}, err
		}
	}
	return o, o.Validate()
}

// ValidIdemKey reports whether k is an Idempotency-Key as the buy API takes
// one: 1 to MaxIdemKey printable ASCII characters (space included). Like
// ValidID it takes bytes or a string and allocates nothing.
func ValidIdemKey[T ~string | ~[]byte](k T) bool {
	if len(k) == 0 || len(k) > MaxIdemKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// IDRule is the id rule in words, for the messages that refuse an id.
const IDRule = "1-64 of A-Z a-z 0-9 _ . : @ - starting with a letter or digit"

// ValidID reports whether s is a valid order, sale or user id (IDRule):
// 1-64 characters of A-Z a-z 0-9 _ . : @ -, starting with a letter or digit.
// It takes bytes or a string alike and allocates nothing, so the buy
// handler checks ids in the request's own buffers.
func ValidID[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 || len(s) > 64 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !alnum(c) && c != '_' && c != '.' && c != ':' && c != '@' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// clip keeps error messages short when a field is huge.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
