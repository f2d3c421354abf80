package gateway

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// readRequest parses a request as the server reads it off a connection.
func readRequest(t *testing.T, wire string) *fasthttp.Request {
	t.Helper()
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(wire))); err != nil {
		t.Fatalf("fasthttp refused %q: %v", wire, err)
	}
	return &req
}

// What wireHeader makes of a header field as sent, against what fasthttp's
// parsed value (Peek) makes of it: the two rows fasthttp reads as one clean
// token (trailing white space, a fold) are where they differ.
func TestWireHeader(t *testing.T) {
	tests := []struct {
		name   string
		fields string // header lines after the Host line, each ending in CRLF
		want   string
		ok     bool
		peek   string // fasthttp's own value
	}{
		{"one", "Authorization: Bearer tok\r\n", "Bearer tok", true, "Bearer tok"},
		{"no space after the colon", "Authorization:Bearer tok\r\n", "Bearer tok", true, "Bearer tok"},
		{"white space before the value", "Authorization: \t Bearer tok\r\n", "Bearer tok", true, "Bearer tok"},
		{"lower-case name", "authorization: Bearer tok\r\n", "Bearer tok", true, "Bearer tok"},
		{"trailing space", "Authorization: Bearer tok \r\n", "Bearer tok ", true, "Bearer tok"},
		{"trailing tab", "Authorization: Bearer tok\t\r\n", "Bearer tok\t", true, "Bearer tok"},
		{"folded", "Authorization: Bearer\r\n tok\r\n", "Bearer\r\n tok", true, "Bearer tok"},
		{"two", "Authorization: Bearer tok\r\nAuthorization: Bearer other\r\n", "", false, "Bearer tok"},
		{"two, names cased apart", "Authorization: Bearer tok\r\nAUTHORIZATION: Bearer tok\r\n", "", false, "Bearer tok"},
		{"none", "X-Authorization: Bearer tok\r\nAuthorizationx: y\r\n", "", false, ""},
		{"among others", "Accept: */*\r\nAuthorization: Bearer tok\r\nX-Other: 1\r\n", "Bearer tok", true, "Bearer tok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := readRequest(t, "GET /x HTTP/1.1\r\nHost: h\r\n"+tc.fields+"\r\n")
			if p := string(req.Header.Peek("Authorization")); p != tc.peek {
				t.Errorf("fasthttp's value %q, want %q (has fasthttp changed?)", p, tc.peek)
			}
			v, ok := wireHeader(&req.Header, "Authorization")
			if string(v) != tc.want || ok != tc.ok {
				t.Errorf("wireHeader = %q, %v; want %q, %v", v, ok, tc.want, tc.ok)
			}
		})
	}
}

// A request built in memory has no wire bytes: its parsed value stands.
func TestWireHeaderInMemory(t *testing.T) {
	var req fasthttp.Request
	req.Header.Set("Authorization", "Bearer tok")
	if v, ok := wireHeader(&req.Header, "Authorization"); string(v) != "Bearer tok" || !ok {
		t.Errorf("wireHeader = %q, %v", v, ok)
	}
	req.Header.Add("Authorization", "Bearer tok")
	if v, ok := wireHeader(&req.Header, "Authorization"); ok {
		t.Errorf("two fields: wireHeader = %q, %v", v, ok)
	}
}

func TestHeaderValues(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		first  string
		n      int
	}{
		{"none", "", "", 0},
		{"one", "Idempotency-Key: k1\r\n", "k1", 1},
		{"empty", "Idempotency-Key:\r\n", "", 1},
		{"two", "Idempotency-Key: k1\r\nidempotency-key: k2\r\n", "k1", 2},
		{"two alike", "Idempotency-Key: k1\r\nIdempotency-Key: k1\r\n", "k1", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := readRequest(t, "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n"+tc.fields+"\r\n")
			first, n := headerValues(&req.Header, "Idempotency-Key")
			if string(first) != tc.first || n != tc.n {
				t.Errorf("headerValues = %q, %d; want %q, %d", first, n, tc.first, tc.n)
			}
		})
	}
}

func TestVisibleASCII(t *testing.T) {
	for s, want := range map[string]bool{
		"abc-DEF_0.9~+/=": true, "": true, "a b": false, "ab ": false, "ab\t": false,
		"ab\r\n": false, "\x00": false, "\x7f": false, "é": false,
	} {
		if got := visibleASCII([]byte(s)); got != want {
			t.Errorf("visibleASCII(%q) = %v", s, got)
		}
	}
}
