package gateway

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// A header that decides what a request may do or reserve (Authorization,
// Idempotency-Key) must mean one thing to every hop that reads it. Sent
// twice, a proxy or log may act on the second while fasthttp's Peek answers
// the first; sent with white space around it or folded over lines, fasthttp
// trims and joins what a stricter reader would take as another value. So
// these headers are read here, refusing what could be read two ways.

// headerValues returns the first value of the request's fields named name
// (fasthttp's parsed, trimmed value, as Peek returns it) and how many such
// fields the request has, trailer fields included. It does not allocate
// once the header's buffers have grown, which the buy path needs.
func headerValues(h *fasthttp.RequestHeader, name string) (first []byte, n int) {
	all := h.PeekAll(name)
	if len(all) == 0 {
		return nil, 0
	}
	return all[0], len(all)
}

// wireHeader returns the value of the request's one field named name exactly
// as the client sent it: only the white space between the colon and the
// value is left out, as HTTP says; white space after the value stays, and
// so do the line breaks of a value folded over several lines (fasthttp
// trims the one and joins the other). ok is false when the request has no
// such field or more than one, in its header or its trailer. A request
// that was not read from a connection (built in memory) has no wire bytes:
// its parsed value is returned.
func wireHeader(h *fasthttp.RequestHeader, name string) (value []byte, ok bool) {
	first, n := headerValues(h, name)
	if n != 1 {
		return nil, false
	}
	raw := h.RawHeaders()
	if len(raw) == 0 {
		return first, true
	}
	found := 0
	for i := 0; i < len(raw); {
		start := i
		end, next := lineEnd(raw, i)
		i = next
		if line := raw[start:end]; len(line) <= len(name) || line[len(name)] != ':' ||
			!asciiEqualFold(line[:len(name)], name) {
			continue
		}
		found++
		v := start + len(name) + 1
		for v < end && (raw[v] == ' ' || raw[v] == '\t') {
			v++
		}
		// A folded value goes on over the lines that begin with white
		// space: keep them, line breaks and all.
		for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t') {
			end, i = lineEnd(raw, i)
		}
		value = raw[v:end]
	}
	if found != 1 {
		return nil, false
	}
	return value, true
}

// lineEnd finds the line of b that starts at i: end is where its CR LF (or
// LF) starts, next where the following line starts.
func lineEnd(b []byte, i int) (end, next int) {
	j := bytes.IndexByte(b[i:], '\n')
	if j < 0 {
		return len(b), len(b)
	}
	end, next = i+j, i+j+1
	if end > i && b[end-1] == '\r' {
		end--
	}
	return end, next
}

// asciiEqualFold is bytes.EqualFold for ASCII names, without Unicode folding
// (K is not the Kelvin sign here).
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// visibleASCII reports whether b is only printable ASCII other than the
// space (0x21-0x7e): no white space, control or non-ASCII byte.
func visibleASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// replyDuplicateIdemKey answers a buy with more than one Idempotency-Key:
// which one would the replay be keyed on?
var replyDuplicateIdemKey = badRequest("Idempotency-Key must be sent once")
