package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// buyRequest is a parsed buy body.
type buyRequest struct {
	user     string
	quantity int
}

const maxQuantity = 1000

// parseBuy parses {"user_id": "...", "quantity": N}. It returns the reason of
// a 400 when the body is not acceptable; unknown fields are ignored.
func parseBuy(body []byte) (buyRequest, string) {
	var raw struct {
		UserID   json.RawMessage `json:"user_id"`
		Quantity json.RawMessage `json:"quantity"`
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return buyRequest{}, "body must be a JSON object"
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return buyRequest{}, "malformed JSON"
	}
	var r buyRequest
	var user string
	if len(raw.UserID) == 0 || raw.UserID[0] != '"' || json.Unmarshal(raw.UserID, &user) != nil || !validID([]byte(user)) {
		return r, "user_id must be 1-64 of A-Z a-z 0-9 _ . : @ - starting with a letter or digit"
	}
	r.user = user
	r.quantity = 1
	if len(raw.Quantity) > 0 && string(raw.Quantity) != "null" {
		q, ok := wholeNumber(raw.Quantity)
		if !ok || q < 1 || q > maxQuantity {
			return r, "quantity must be a whole number from 1 to 1000"
		}
		r.quantity = int(q)
	}
	return r, ""
}

// wholeNumber parses a JSON number that is written as an integer (no
// fraction, no exponent), such as -3 or 42.
func wholeNumber(b []byte) (int64, bool) {
	s := string(b)
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	for i, c := range []byte(s) {
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
