package order

import (
	"fmt"
	"strconv"
	"strings"
)

// FromStreamEntry returns the orders of one outbox stream entry, in their
// order: one for an entry of one order (FromStream's form: an order or a
// change of its state), several for the reserve script's batch form, whose
// orders share what one script call decided for all of them:
//
//	sale_id, reserved_at, state, pay_by   as in FromStream
//	n                                     the number of orders
//	orders                                one line per order, "\n" between:
//	                                      order_id \t user_id \t quantity \t seq \t idempotency key ("" for none)
//
// An entry any of whose orders is not valid is refused whole; the error
// wraps ErrMalformed.
func FromStreamEntry(values map[string]any) ([]Order, error) {
	raw, ok := values["orders"]
	if !ok {
		o, err := FromStream(values)
		if err != nil {
			return nil, err
		}
		return []Order{o}, nil
	}
	lines, ok := raw.(string)
	if !ok {
		return nil, fmt.Errorf("%w: stream entry field orders is %T", ErrMalformed, raw)
	}
	// The shared fields, read as FromStream reads them, from a one-order
	// entry of the same fields.
	shared := map[string]any{"order_id": "x", "user_id": "x", "quantity": "1"}
	for _, k := range []string{"sale_id", "reserved_at", "state", "pay_by"} {
		if v, ok := values[k]; ok {
			shared[k] = v
		}
	}
	base, err := FromStream(shared)
	if err != nil {
		return nil, err
	}
	n := strings.Count(lines, "\n") + 1
	if v, ok := values["n"]; !ok || v != strconv.Itoa(n) {
		return nil, fmt.Errorf("%w: stream entry n %v, %d orders", ErrMalformed, v, n)
	}
	out := make([]Order, 0, n)
	for line := range strings.SplitSeq(lines, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("%w: stream entry order %q: %d fields, want 5", ErrMalformed, clip(line), len(f))
		}
		o := base
		o.OrderID, o.UserID, o.IdemKey = f[0], f[1], f[4]
		if o.Quantity, err = strconv.Atoi(f[2]); err != nil {
			return nil, fmt.Errorf("%w: quantity %q", ErrMalformed, clip(f[2]))
		}
		if o.Seq, err = strconv.ParseInt(f[3], 10, 64); err != nil || o.Seq < 0 {
			return nil, fmt.Errorf("%w: seq %q", ErrMalformed, clip(f[3]))
		}
		if err := o.Validate(); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
