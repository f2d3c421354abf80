package sale

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate/scripts"
)

// Invariant 7: a reply the store cannot read promises nothing. The reply
// here stands in for the reserve script's (what is under test is the
// decoding); a mistyped code once read as 0, accepted.
func TestDecodeReserve(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		n     int     // reservations sent
		want  []error // per reservation, when the reply is readable
	}{
		{"accepted and sold out", []any{int64(0), "o1", int64(0), int64(6), "", int64(0)}, 2, []error{nil, ErrSoldOut}},
		{"accepted with a pay_by", []any{int64(0), "o1", int64(1735689600123)}, 1, []error{nil}},
		{"limit reached", []any{int64(5), "", int64(0)}, 1, []error{ErrLimitReached}},
		{"unknown code", []any{int64(99), "", int64(0)}, 1, []error{ErrUnavailable}},
		{"order id collision", []any{int64(scripts.CodeOrderIDCollision), "o1", int64(0)}, 1, []error{ErrUnavailable}},
		{"code as a string", []any{"0", "o1", int64(0)}, 1, nil},
		{"code as nil", []any{nil, "o1", int64(0)}, 1, nil},
		{"second code mistyped", []any{int64(0), "o1", int64(0), "6", "", int64(0)}, 2, nil},
		{"order id as an integer", []any{int64(0), int64(0), int64(0)}, 1, nil},
		{"accepted without an order id", []any{int64(0), "", int64(0)}, 1, nil},
		{"pay_by as a string", []any{int64(0), "o1", "0"}, 1, nil},
		{"pay_by negative", []any{int64(0), "o1", int64(-1)}, 1, nil},
		{"short", []any{int64(0), "o1"}, 1, nil},
		{"empty", []any{}, 1, nil},
		{"long", []any{int64(0), "o1", int64(0), int64(0), "o2", int64(0)}, 1, nil},
		{"not an array", "OK", 1, nil},
		{"nil", nil, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]Result, tc.n)
			err := decodeReserve(tc.reply, out)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("decodeReserve(%#v) = %+v, want an error", tc.reply, out)
				}
				for i, r := range out {
					if r != (Result{}) {
						t.Errorf("result %d set by a refused reply: %+v", i, r)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeReserve(%#v): %v", tc.reply, err)
			}
			for i, want := range tc.want {
				if want == nil && out[i].Err != nil || want != nil && !errors.Is(out[i].Err, want) {
					t.Errorf("result %d = %+v, want %v", i, out[i], want)
				}
			}
		})
	}
}

// Invariant 7, for the admin script's reply: eighteen integers or an error.
func TestDecodeAdmin(t *testing.T) {
	good := func() []any {
		return []any{int64(0), int64(1), int64(1700000000000), int64(10), int64(3), int64(2), int64(0),
			int64(0), int64(0), int64(2), int64(1), int64(60), int64(1), int64(0), int64(0), int64(0), int64(1), int64(0)}
	}
	if n, err := decodeAdmin(good()); err != nil || n[3] != 10 || n[9] != 2 {
		t.Fatalf("decodeAdmin(good) = %v, %v", n, err)
	}
	tests := []struct {
		name  string
		reply func() any
	}{
		{"code as a string", func() any { a := good(); a[0] = "0"; return a }},
		{"stock as a string", func() any { a := good(); a[3] = "10"; return a }},
		{"element nil", func() any { a := good(); a[10] = nil; return a }},
		{"short", func() any { return good()[:15] }},
		{"eleven, as before payment windows", func() any { return good()[:11] }},
		{"sixteen, as before buckets", func() any { return good()[:16] }},
		{"long", func() any { return append(good(), int64(0)) }},
		{"not an array", func() any { return "pong" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n, err := decodeAdmin(tc.reply()); err == nil {
				t.Errorf("decodeAdmin = %v, want an error", n)
			}
		})
	}
}

// Every code the scripts can answer has its outcome; only an order id
// collision, a sale held for repair, a bucketed sale's home (which
// Store.Reserve never lets a buyer hear), a stock below what a home handed
// its buckets (which Store.Upsert never lets an admin hear) and codes no
// script has are 503.
func TestOutcomeOfEveryCode(t *testing.T) {
	seen := map[error]scripts.Code{}
	for c := scripts.Code(0); c.Known(); c++ {
		err := outcome(c)
		switch {
		case c == scripts.CodeOK:
			if err != nil {
				t.Errorf("%s: %v", c, err)
			}
		case c == scripts.CodeOrderIDCollision || c == scripts.CodeRepairing || c == scripts.CodeBucketed ||
			c == scripts.CodeStockBelowMoved:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", c, err)
			}
		case err == nil || errors.Is(err, ErrUnavailable):
			t.Errorf("%s has no outcome: %v", c, err)
		default:
			if prev, dup := seen[err]; dup {
				t.Errorf("%s and %s are both %v", prev, c, err)
			}
			seen[err] = c
		}
	}
}

// Invariant 7 for the order script's replies: any shape but the one it
// answers is an error, never an order or an expiry made up.
func TestDecodeOrderReplies(t *testing.T) {
	rec := "q:P:2000:1000:1:u"
	if code, r, now, ch, err := decodeOrder([]any{int64(0), rec, int64(1500), int64(1)}); err != nil ||
		code != scripts.CodeOK || r.PayBy != 2000 || now != 1500 || !ch {
		t.Errorf("decodeOrder(good) = %v %+v %d %v %v", code, r, now, ch, err)
	}
	if code, _, _, _, err := decodeOrder([]any{int64(scripts.CodeOrderNotFound), "", int64(1), int64(0)}); err != nil ||
		code != scripts.CodeOrderNotFound {
		t.Errorf("decodeOrder(not found) = %v %v", code, err)
	}
	for name, v := range map[string]any{
		"short":               []any{int64(0), rec, int64(1)},
		"code as a string":    []any{"0", rec, int64(1), int64(0)},
		"record as a number":  []any{int64(0), int64(5), int64(1), int64(0)},
		"bad record":          []any{int64(0), "q:1", int64(1), int64(0)},
		"accepted, no record": []any{int64(0), "", int64(1), int64(0)},
		"not an array":        "OK",
	} {
		if _, _, _, _, err := decodeOrder(v); err == nil {
			t.Errorf("decodeOrder(%s) took it", name)
		}
	}
	good := []any{int64(0), "o1", int64(0), int64(6), "", int64(0), int64(0), "o2", int64(99)}
	out := make([]Result, 3)
	if err := decodeReserve(good, out); err != nil || out[0].PayBy != 0 || !errors.Is(out[1].Err, ErrSoldOut) || out[2].PayBy != 99 {
		t.Errorf("decodeReserve(good) = %+v %v", out, err)
	}
	for name, v := range map[string]any{
		"pay_by as a string": []any{int64(0), "o1", "5"},
		"negative pay_by":    []any{int64(0), "o1", int64(-1)},
		"two values":         []any{int64(0), "o1"},
	} {
		if err := decodeReserve(v, make([]Result, 1)); err == nil {
			t.Errorf("decodeReserve(%s) took it", name)
		}
	}
}
