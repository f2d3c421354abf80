package bench

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// queueView is what a run reads of a queue view (API.md, "Queue view").
type queueView struct {
	ticket    []byte
	position  int64         // 0: null
	passUntil int64         // ns since the load's start; 0: null
	pollAfter time.Duration // poll_after_ms
}

var (
	ticketKey    = []byte(`"ticket"`)
	positionKey  = []byte(`"position"`)
	passUntilKey = []byte(`"pass_until"`)
	pollAfterKey = []byte(`"poll_after_ms"`)
)

// parseView reads a queue view; ok is false when it has no ticket.
func parseView(body []byte, start time.Time) (v queueView, ok bool) {
	v.ticket = jsonString(body, ticketKey)
	v.position, _ = jsonInt(body, positionKey)
	if p := jsonString(body, passUntilKey); len(p) > 0 {
		if t, err := time.Parse(time.RFC3339Nano, string(p)); err == nil {
			v.passUntil = int64(t.Sub(start))
		}
	}
	v.pollAfter = pollDefault
	if ms, ok := jsonInt(body, pollAfterKey); ok && ms > 0 {
		v.pollAfter = time.Duration(ms) * time.Millisecond
	}
	return v, len(v.ticket) > 0
}

// jsonInt returns the value of the top-level integer field key (given with
// its quotes) of a flat JSON object; ok is false when it is absent, null
// or not an integer.
func jsonInt(body, key []byte) (n int64, ok bool) {
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			return 0, false
		}
		body = body[i+len(key):]
		rest := bytes.TrimLeft(body, " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		j := 0
		for j < len(rest) && (rest[j] == '-' && j == 0 || rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
		return n, err == nil
	}
}

// errView describes an answer of the queue routes the run could not use.
func errView(body []byte) error {
	const most = 200
	if len(body) > most {
		body = body[:most]
	}
	return fmt.Errorf("queue: answer %q", body)
}
