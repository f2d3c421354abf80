// Package order is the order: what one holds, its wire format from the Redis
// outbox through RabbitMQ to MySQL, and its rules (ValidID, MaxQuantity),
// which the gateway applies to a buy at the edge and the consumer to a
// message. It is the one thing the gateway, the relay and the consumer must
// agree on.
//
// On the wire an order is a JSON object
//
//	{"order_id":"…","sale_id":"…","user_id":"…","quantity":1,"reserved_at":1735689600123}
//
// with reserved_at in milliseconds since the Unix epoch (Redis time, as the
// reserve script wrote it). Unknown fields are ignored, so that a newer relay
// may add fields before every consumer knows them; every field above is
// required.
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

// Order is one accepted order.
type Order struct {
	OrderID    string
	SaleID     string
	UserID     string
	Quantity   int
	ReservedAt time.Time // millisecond precision, UTC
}

// wire is the JSON form. Pointers tell a missing field from a zero one.
type wire struct {
	OrderID    *string `json:"order_id"`
	SaleID     *string `json:"sale_id"`
	UserID     *string `json:"user_id"`
	Quantity   *int64  `json:"quantity"`
	ReservedAt *int64  `json:"reserved_at"`
}

// Validate reports whether o can be stored: ids by ValidID, a quantity from
// 1 to MaxQuantity and a reservation time after the epoch. The error wraps
// ErrMalformed.
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
	return json.Marshal(wire{OrderID: &o.OrderID, SaleID: &o.SaleID, UserID: &o.UserID, Quantity: &q, ReservedAt: &ms})
}

// Unmarshal decodes and validates the wire form of an order. Every error
// wraps ErrMalformed: a message that fails here fails every time.
func Unmarshal(body []byte) (Order, error) {
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
	}
	return o, o.Validate()
}

// FromStream builds an order from the fields of an outbox stream entry, as
// the reserve script writes them (order_id, sale_id, user_id, quantity,
// reserved_at; all strings). The error wraps ErrMalformed.
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
	return o, o.Validate()
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
