package order

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// The lines form: an order as one line of tab-separated fields, a batch as
// such lines joined by "\n", which the relay sends by default
// (relay.wire). It carries what the JSON form carries in a third of the
// bytes, and is read with no reflection: the relay's encoding, RabbitMQ's
// bytes and the consumer's decoding are a fraction of the JSON form's.
//
//	1 \t order_id \t sale_id \t user_id \t quantity \t reserved_at \t state \t pay_by \t seq \t idempotency_key
//
// The first field is the form's version; reserved_at and pay_by are Unix
// ms (pay_by 0: none), idempotency_key is empty for none. No field can hold
// a tab or a newline: ids are of the id alphabet, a key is printable ASCII
// without tab, a state one of five words. A body starting with "1\t" is of
// this form, one starting with '{' or '[' of the JSON form (Split,
// Unmarshal): a consumer reads both, so that messages a relay of either
// setting sent, or one older, decode alike.

// ContentTypeLines is the AMQP content type of a body of the lines form.
const ContentTypeLines = "text/vnd.flashgate.orders; version=1"

// lineFields is the number of fields of a line.
const lineFields = 10

// linePrefix starts every line: the version field and its tab.
var linePrefix = []byte("1\t")

// LineSize is an upper bound of the bytes AppendLine appends for o, for a
// caller that sizes one buffer for the lines of many orders.
func LineSize(o Order) int {
	// Four numbers of at most 20 characters each (int64, with a sign), nine
	// tabs, the prefix and the longest state.
	return len(linePrefix) + len(o.OrderID) + len(o.SaleID) + len(o.UserID) + len(o.IdemKey) + 4*20 + 9 + len(StatePendingPayment)
}

// AppendLine appends to dst the line of o after validating it. The error
// wraps ErrMalformed; nothing is appended then.
func (o Order) AppendLine(dst []byte) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return dst, err
	}
	st := o.State
	if st == "" {
		st = StateConfirmed
	}
	var pb int64
	if !o.PayBy.IsZero() {
		pb = o.PayBy.UnixMilli()
	}
	dst = append(dst, linePrefix...)
	dst = append(dst, o.OrderID...)
	dst = append(dst, '\t')
	dst = append(dst, o.SaleID...)
	dst = append(dst, '\t')
	dst = append(dst, o.UserID...)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, int64(o.Quantity), 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, o.ReservedAt.UnixMilli(), 10)
	dst = append(dst, '\t')
	dst = append(dst, st...)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, pb, 10)
	dst = append(dst, '\t')
	dst = strconv.AppendInt(dst, o.Seq, 10)
	dst = append(dst, '\t')
	return append(dst, o.IdemKey...), nil
}

// IsLines reports whether body is of the lines form.
func IsLines(body []byte) bool { return bytes.HasPrefix(body, linePrefix) }

// splitLines returns the lines of a body of the lines form; an empty line
// (a trailing newline included) refuses the body whole.
func splitLines(body []byte) ([][]byte, error) {
	out := bytes.Split(body, []byte{'\n'})
	for i, line := range out {
		if len(line) == 0 {
			return nil, fmt.Errorf("%w: batch line %d is empty", ErrMalformed, i)
		}
	}
	return out, nil
}

// unmarshalLine decodes and validates one line. Every error wraps
// ErrMalformed.
func unmarshalLine(line []byte) (Order, error) {
	var f [lineFields][]byte
	rest := line
	for i := range lineFields - 1 {
		var ok bool
		if f[i], rest, ok = bytes.Cut(rest, []byte{'\t'}); !ok {
			return Order{}, fmt.Errorf("%w: line %q: %d fields, want %d", ErrMalformed, clip(string(line)), i+1, lineFields)
		}
	}
	f[lineFields-1] = rest
	if bytes.IndexByte(rest, '\t') >= 0 {
		return Order{}, fmt.Errorf("%w: line %q: more than %d fields", ErrMalformed, clip(string(line)), lineFields)
	}
	num := func(name string, b []byte) (int64, error) {
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %s %q", ErrMalformed, name, clip(string(b)))
		}
		return n, nil
	}
	q, err := num("quantity", f[4])
	if err != nil {
		return Order{}, err
	}
	at, err := num("reserved_at", f[5])
	if err != nil {
		return Order{}, err
	}
	pb, err := num("pay_by", f[7])
	if err != nil {
		return Order{}, err
	}
	seq, err := num("seq", f[8])
	if err != nil {
		return Order{}, err
	}
	if q < 1 || q > MaxQuantity {
		return Order{}, fmt.Errorf("%w: quantity %d out of 1..%d", ErrMalformed, q, MaxQuantity)
	}
	o := Order{OrderID: string(f[1]), SaleID: string(f[2]), UserID: string(f[3]), Quantity: int(q),
		ReservedAt: time.UnixMilli(at).UTC(), State: stateOf(f[6]), Seq: seq, IdemKey: string(f[9])}
	if o.State == "" {
		return Order{}, fmt.Errorf("%w: state %q", ErrMalformed, clip(string(f[6])))
	}
	if pb > 0 {
		o.PayBy = time.UnixMilli(pb).UTC()
	}
	return o, o.Validate()
}

var states = [...]string{StateConfirmed, StatePendingPayment, StatePaid, StateCancelled, StateExpired}

// stateOf is the State constant spelled by b ("" for none), without
// allocating.
func stateOf(b []byte) string {
	for _, s := range states {
		if string(b) == s {
			return s
		}
	}
	return ""
}
