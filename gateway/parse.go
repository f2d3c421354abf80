package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/flashgate/flashgate/order"
)

// buyRequest is a parsed buy body.
type buyRequest struct {
	user     []byte // aliases the body (or a fresh copy when it had escapes)
	quantity int
}

// Reasons of a 400 for an id or a quantity, worded from order's rules.
const (
	badSale  = "sale_id must be " + order.IDRule
	badUser  = "user_id must be " + order.IDRule
	badOrder = "sale_id and order_id must be " + order.IDRule
)

var badQuantity = "quantity must be a whole number from 1 to " + strconv.Itoa(order.MaxQuantity)

// parseBuy parses {"user_id": "...", "quantity": N}. It returns the reason of
// a 400 when the body is not acceptable; unknown fields are ignored, and of a
// field given twice the last counts (as with encoding/json).
//
// It is on the hot path, so it does not decode through reflection: the
// standard library checks that the body is valid JSON, then a small scanner
// picks the two fields out of the top-level object.
func parseBuy(body []byte) (buyRequest, string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return buyRequest{}, "body must be a JSON object"
	}
	if !json.Valid(body) {
		return buyRequest{}, "malformed JSON"
	}
	userRaw, qtyRaw := topLevelFields(body)
	var r buyRequest
	user, ok := jsonString(userRaw)
	if !ok || !order.ValidID(user) {
		return r, badUser
	}
	r.user = user
	r.quantity = 1
	if len(qtyRaw) > 0 && string(qtyRaw) != "null" {
		q, ok := wholeNumber(qtyRaw)
		if !ok || q < 1 || q > order.MaxQuantity {
			return r, badQuantity
		}
		r.quantity = int(q)
	}
	return r, ""
}

// topLevelFields returns the raw values of "user_id" and "quantity" in obj,
// which must be a valid JSON object. Missing fields are nil.
func topLevelFields(obj []byte) (user, qty []byte) {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		key := obj[i+1 : kEnd-1]
		i = skipSpace(obj, kEnd)
		i = skipSpace(obj, i+1) // ':'
		vEnd := skipValue(obj, i)
		if bytes.IndexByte(key, '\\') >= 0 {
			if k, ok := jsonString(obj[kEnd-len(key)-2 : kEnd]); ok {
				key = k
			}
		}
		switch string(key) {
		case "user_id":
			user = obj[i:vEnd]
		case "quantity":
			qty = obj[i:vEnd]
		}
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return user, qty
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// jsonString returns the contents of a JSON string value, unescaping only
// when it has escapes.
func jsonString(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// wholeNumber parses a JSON number that is written as an integer (no
// fraction, no exponent), such as -3 or 42.
func wholeNumber(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	for i, c := range b {
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}
