package bench

import "bytes"

// Outcomes of a buy, in report order; oError is a request that got no
// answer at all (timeout, reset, refused).
const (
	oAccepted = iota
	oSoldOut
	oLimitReached
	oInsufficient
	oRateLimited
	oLocked
	oNotStarted
	oEnded
	oNotFound
	oIdemConflict
	oBadRequest
	oTooLarge
	oUnavailable
	oUnauthorized
	oForbidden
	oNotAdmitted
	oOther
	oError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"accepted", "sold_out", "limit_reached", "insufficient_stock", "rate_limited", "locked",
	"not_started", "ended", "not_found", "idempotency_conflict", "bad_request", "too_large",
	"unavailable", "unauthorized", "forbidden", "not_admitted", "other", "error",
}

var (
	statusKey  = []byte(`"status"`)
	orderIDKey = []byte(`"order_id"`)
)

// classify maps an answer to its outcome by the body's status, which is the
// contract (the HTTP code is kept for the report only).
func classify(body []byte) int {
	switch string(jsonString(body, statusKey)) {
	case "accepted":
		return oAccepted
	case "sold_out":
		return oSoldOut
	case "limit_reached":
		return oLimitReached
	case "insufficient_stock":
		return oInsufficient
	case "rate_limited":
		return oRateLimited
	case "locked":
		return oLocked
	case "not_started":
		return oNotStarted
	case "ended":
		return oEnded
	case "not_found":
		return oNotFound
	case "idempotency_conflict":
		return oIdemConflict
	case "bad_request":
		return oBadRequest
	case "too_large":
		return oTooLarge
	case "unavailable":
		return oUnavailable
	case "unauthorized":
		return oUnauthorized
	case "forbidden":
		return oForbidden
	case "not_admitted":
		return oNotAdmitted
	}
	return oOther
}

// jsonString returns the value of the top-level string field key (given
// with its quotes) of a flat JSON object, or nil. It does not unescape: the
// ids and statuses of API.md never need escaping.
func jsonString(body, key []byte) []byte {
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			return nil
		}
		body = body[i+len(key):]
		rest := bytes.TrimLeft(body, " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue // the key's text inside a value
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if len(rest) == 0 || rest[0] != '"' {
			return nil
		}
		rest = rest[1:]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			return nil
		}
		return rest[:j]
	}
}
