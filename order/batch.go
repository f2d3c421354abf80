package order

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A message carries one order or a batch of them. One order is its JSON
// object (Marshal); a batch is a JSON array of such objects, in the order
// the relay read them:
//
//	[{"order_id":"a",…},{"order_id":"b",…}]
//
// The AMQP type says which (TypeOrder, TypeBatch), and so does the body's
// first byte; a consumer goes by the body (Split), so that a message of
// either kind decodes whatever its headers say. A consumer older than
// batches reads a batch as malformed and dead-letters it whole: upgrade
// every consumer before a relay sends batches (relay.message_orders).
const (
	TypeOrder = "order"
	TypeBatch = "orders"
)

// CountHeader is the AMQP header in which the relay gives the number of
// orders a message carries, so that a consumer can gather messages up to a
// number of orders before it decodes them. It is a hint: the body decides.
const CountHeader = "x-flashgate-orders"

// Count returns the number of orders a message's headers announce
// (CountHeader), 1 when they announce none or an unreadable number.
func Count(h map[string]any) int {
	switch n := h[CountHeader].(type) {
	case int32:
		return max(int(n), 1)
	case int64:
		return max(int(n), 1)
	case int:
		return max(n, 1)
	}
	return 1
}

// AppendBatch appends to dst the body of a message carrying the encoded
// orders bodies (each from Marshal, or each from AppendLine): one order's
// body as it is, several as a JSON array, or lines joined by "\n".
func AppendBatch(dst []byte, bodies ...[]byte) []byte {
	if len(bodies) == 1 {
		return append(dst, bodies[0]...)
	}
	if len(bodies) > 0 && IsLines(bodies[0]) {
		for i, b := range bodies {
			if i > 0 {
				dst = append(dst, '\n')
			}
			dst = append(dst, b...)
		}
		return dst
	}
	dst = append(dst, '[')
	for i, b := range bodies {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, b...)
	}
	return append(dst, ']')
}

// Split returns the encoded orders a message body carries, each to be
// decoded by Unmarshal: the lines of a body of the lines form (line.go),
// the body itself when it is one JSON object, the elements when it is a
// JSON array of at least one. A body that is neither (not JSON, an empty array, an
// element that is not an object) is refused whole with an error wrapping
// ErrMalformed; an element that is an object but not an order is for
// Unmarshal to refuse, alone.
func Split(body []byte) ([][]byte, error) {
	if IsLines(body) {
		return splitLines(body) // line.go
	}
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 || b[0] != '[' {
		return [][]byte{body}, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrMalformed, err)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrMalformed)
	}
	out := make([][]byte, len(parts))
	for i, p := range parts {
		if len(p) == 0 || p[0] != '{' {
			return nil, fmt.Errorf("%w: batch element %d is not an object", ErrMalformed, i)
		}
		out[i] = p
	}
	return out, nil
}
