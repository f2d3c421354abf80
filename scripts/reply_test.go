package scripts

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/order"
)

// Invariant 7: a reply the caller cannot read promises nothing. Each
// decoder takes the shape its script answers and refuses any other: a
// mistyped code once read as 0, accepted. (The rows of gateway's
// TestDecodeReserve, TestDecodeAdmin and TestDecodeOrderReplies, which
// decoded these replies there.)
func TestDecodeReserve(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		n     int        // reservations sent
		want  []Reserved // nil: the reply is refused
	}{
		{"accepted and sold out", "0\n0\to1\t0\n6\t\t0\n", 2, []Reserved{{OrderID: "o1"}, {Code: CodeSoldOut}}},
		{"accepted with a pay_by", "3\n0\to1\t1735689600123\n", 1, []Reserved{{OrderID: "o1", PayBy: 1735689600123}}},
		{"accepted, sold out, pending", "3\n0\to1\t0\n6\t\t0\n0\to2\t99\n", 3,
			[]Reserved{{OrderID: "o1"}, {Code: CodeSoldOut}, {OrderID: "o2", PayBy: 99}}},
		{"limit reached", "3\n5\t\t0\n", 1, []Reserved{{Code: CodeLimitReached}}},
		// The shape is right; what the code means is the caller's.
		{"unknown code", "3\n99\t\t0\n", 1, []Reserved{{Code: 99}}},
		{"order id collision", "3\n9\to1\t0\n", 1, []Reserved{{Code: CodeOrderIDCollision, OrderID: "o1"}}},
		{"no reservation", "-1\n", 0, []Reserved{}},
		{"units left unknown", "-1\n5\t\t0\n", 1, []Reserved{{Code: CodeLimitReached}}},
		{"no units left line", "0\to1\t0\n", 1, nil},
		{"units left below -1", "-2\n0\to1\t0\n", 1, nil},
		{"units left not a number", "many\n0\to1\t0\n", 1, nil},
		{"code not a number", "3\nok\to1\t0\n", 1, nil},
		{"code empty", "3\n\to1\t0\n", 1, nil},
		{"second code not a number", "3\n0\to1\t0\nsix\t\t0\n", 2, nil},
		{"accepted without an order id", "3\n0\t\t0\n", 1, nil},
		{"pay_by not a number", "3\n0\to1\tsoon\n", 1, nil},
		{"pay_by negative", "3\n0\to1\t-1\n", 1, nil},
		{"a fourth field", "3\n0\to1\t0\t0\n", 1, nil},
		{"two fields", "3\n0\to1\n", 1, nil},
		{"no final newline", "3\n0\to1\t0", 1, nil},
		{"short", "3\n0\to1\t0\n", 2, nil},
		{"empty", "", 1, nil},
		{"long", "3\n0\to1\t0\n0\to2\t0\n", 1, nil},
		{"the old form, an array", []any{int64(0), "o1", int64(0)}, 1, nil},
		{"an integer", int64(0), 1, nil},
		{"nil", nil, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeReserve(tc.reply, tc.n)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("decodeReserve(%#v, %d) took it: %d outcomes", tc.reply, tc.n, r.Len())
				}
				if r.Len() != 0 {
					t.Errorf("a refused reply has %d outcomes", r.Len())
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeReserve(%#v, %d): %v", tc.reply, tc.n, err)
			}
			if r.Len() != len(tc.want) {
				t.Fatalf("%d outcomes, want %d", r.Len(), len(tc.want))
			}
			for i, want := range tc.want {
				if got := r.At(i); got != want {
					t.Errorf("outcome %d = %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// The reply's first line is the units the sale has left, -1 for unknown.
func TestDecodeReserveLeft(t *testing.T) {
	for reply, want := range map[string]int64{"0\n6\t\t0\n": 0, "-1\n6\t\t0\n": -1, "12\n0\to1\t0\n": 12} {
		r, err := decodeReserve(reply, 1)
		if err != nil || r.Left != want {
			t.Errorf("decodeReserve(%q) = left %d, %v; want %d", reply, r.Left, err, want)
		}
	}
}

// The reserve reply is decoded per batch on the buy path: reading it
// allocates one slice, whatever the batch's size (the order ids are the
// reply's own bytes).
func TestDecodeReserveAllocs(t *testing.T) {
	for _, n := range []int{1, 3, 200} {
		var reply strings.Builder
		reply.WriteString("7\n")
		for i := range n {
			fmt.Fprintf(&reply, "0\to%d\t%d\n", i, 1735689600123+i)
		}
		v := any(reply.String())
		var sum int64
		allocs := testing.AllocsPerRun(200, func() {
			r, err := decodeReserve(v, n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range r.Len() {
				sum += r.At(i).PayBy + int64(len(r.At(i).OrderID))
			}
		})
		if allocs != 1 {
			t.Errorf("decoding a reserve reply of %d reservations allocates %.1f times, want 1", n, allocs)
		}
		_ = sum
	}
}

// A batch packs its reservations as the script reads them.
func TestReserveBatch(t *testing.T) {
	var b ReserveBatch
	b.Add("o1", "u1", 2, 0).Add("o2", "u:2@x", 1, 6)
	if got, want := string(b.buf), "o1\tu1\t2\t0\no2\tu:2@x\t1\t6\n"; got != want || b.Len() != 2 {
		t.Errorf("batch = %q (%d), want %q (2)", got, b.Len(), want)
	}
	b.Reset()
	if len(b.buf) != 0 || b.Len() != 0 {
		t.Errorf("reset batch = %q (%d)", b.buf, b.Len())
	}
}

// The queue script's reply: twelve integers and the key, then a join
// number per buyer of the call, or an error; an accepted call always has a
// key and every buyer's join number, a refusal none.
func TestDecodeJoin(t *testing.T) {
	good := func() []any {
		return []any{int64(0), int64(9), int64(-1), int64(2), int64(1700000000000), int64(0), int64(100),
			int64(120), int64(2), int64(1700000000000), int64(0), int64(1699999999000), "abcd", int64(7), int64(9), int64(7)}
	}
	want := JoinReply{Code: CodeOK, Joins: []int64{7, 9, 7}, StartsAt: 1700000000000, Now: 1699999999000,
		Room: Room{Mode: 2, Rate: 100, Pass: 120, Joined: 9, Prequeue: -1, Version: 2, At: 1700000000000, Key: "abcd"}}
	if got, err := decodeJoin(good(), 3); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeJoin(good) = %+v, %v; want %+v", got, err, want)
	}
	refused := func() []any { a := good()[:13]; a[0] = int64(CodeNoRoom); a[12] = ""; return a }
	if got, err := decodeJoin(refused(), 3); err != nil || got.Code != CodeNoRoom || got.Joins != nil {
		t.Fatalf("decodeJoin(refused) = %+v, %v", got, err)
	}
	for name, tc := range map[string]struct {
		reply func() any
		users int
	}{
		"accepted without a place":     {func() any { a := good(); a[14] = int64(0); return a }, 3},
		"accepted without a key":       {func() any { a := good(); a[12] = ""; return a }, 3},
		"a join number short":          {func() any { return good() }, 4},
		"a join number too many":       {func() any { return good() }, 2},
		"accepted with no join number": {func() any { return good()[:13] }, 1},
		"a refusal with join numbers":  {func() any { a := good(); a[0] = int64(CodeSoldOut); return a }, 3},
		"a join number as a string":    {func() any { a := good(); a[15] = "7"; return a }, 3},
		"short":                        {func() any { return good()[:12] }, 1},
		"key as an integer":            {func() any { a := good(); a[12] = int64(1); return a }, 3},
		"not an array":                 {func() any { return "pong" }, 1},
	} {
		if got, err := decodeJoin(tc.reply(), tc.users); err == nil || !reflect.DeepEqual(got, JoinReply{}) {
			t.Errorf("%s: decodeJoin = %+v, %v; want an error and nothing read", name, got, err)
		}
	}
}

// The order script's replies to pay, cancel and get: any shape but the one
// it answers is an error, never an order made up.
func TestDecodeOrder(t *testing.T) {
	rec := "q:P:2000:1000:1:u"
	got, err := decodeOrder([]any{int64(0), rec, int64(1500), int64(1)})
	want := OrderReply{Code: CodeOK, Record: Record{State: order.StatePendingPayment, PayBy: 2000, ReservedAt: 1000,
		Quantity: 1, UserID: "u"}, Now: 1500, Changed: true}
	if err != nil || got != want {
		t.Errorf("decodeOrder(good) = %+v, %v; want %+v", got, err, want)
	}
	if got, err := decodeOrder([]any{int64(CodeOrderPaid), "c:D:2000:1000:2:u", int64(1500), int64(0)}); err != nil ||
		got.Code != CodeOrderPaid || !got.Record.Created || got.Record.State != order.StatePaid || got.Changed {
		t.Errorf("decodeOrder(paid) = %+v, %v", got, err)
	}
	got, err = decodeOrder([]any{int64(CodeOrderNotFound), "", int64(1), int64(1)})
	if err != nil || got != (OrderReply{Code: CodeOrderNotFound, Now: 1}) {
		t.Errorf("decodeOrder(not found) = %+v, %v; want the code, the time, no record, not changed", got, err)
	}
	// A held sale answers REPAIRING without reading the order (the caller
	// says 503 and asks for a hold pass).
	got, err = decodeOrder([]any{int64(CodeRepairing), "", int64(1), int64(0)})
	if err != nil || got != (OrderReply{Code: CodeRepairing, Now: 1}) {
		t.Errorf("decodeOrder(repairing) = %+v, %v; want the code, the time, no record", got, err)
	}
	for name, v := range map[string]any{
		"short":               []any{int64(0), rec, int64(1)},
		"long":                []any{int64(0), rec, int64(1), int64(0), int64(0)},
		"code as a string":    []any{"0", rec, int64(1), int64(0)},
		"record as a number":  []any{int64(0), int64(5), int64(1), int64(0)},
		"now as a string":     []any{int64(0), rec, "1", int64(0)},
		"changed as a string": []any{int64(0), rec, int64(1), "1"},
		"bad record":          []any{int64(0), "q:1", int64(1), int64(0)},
		"accepted, no record": []any{int64(0), "", int64(1), int64(0)},
		"not an array":        "OK",
		"nil":                 nil,
	} {
		if got, err := decodeOrder(v); err == nil || got != (OrderReply{}) {
			t.Errorf("decodeOrder(%s) = %+v, %v; want an error and nothing read", name, got, err)
		}
	}
}

// The sweep's reply: now, next and pairs of an order id and its pay_by.
func TestDecodeSweep(t *testing.T) {
	if s, err := decodeSweep([]any{int64(5), int64(0), "o1", int64(3)}); err != nil || s.Now != 5 || s.Next != 0 ||
		len(s.Expired) != 1 || s.Expired[0] != (Expiry{OrderID: "o1", PayBy: 3}) {
		t.Errorf("decodeSweep(good) = %+v %v", s, err)
	}
	if s, err := decodeSweep([]any{int64(5), int64(9)}); err != nil || s.Now != 5 || s.Next != 9 || s.Expired != nil {
		t.Errorf("decodeSweep(none expired) = %+v %v", s, err)
	}
	for name, v := range map[string]any{
		"odd":              []any{int64(5), int64(0), "o1"},
		"short":            []any{int64(5)},
		"empty":            []any{},
		"id as a number":   []any{int64(5), int64(0), int64(1), int64(3)},
		"pay_by as string": []any{int64(5), int64(0), "o1", "3"},
		"now as a string":  []any{"5", int64(0)},
		"next as a string": []any{int64(5), "0"},
		"an order reply":   []any{int64(0), "q:P:2000:1000:1:u", int64(1500), int64(1)},
		"not an array":     "OK",
	} {
		if s, err := decodeSweep(v); err == nil || s.Expired != nil || s.Now != 0 {
			t.Errorf("decodeSweep(%s) = %+v, %v; want an error and nothing read", name, s, err)
		}
	}
}

// The move script's reply {code, n}, n never negative (the rule of
// gateway/buckets.go's move, which read it there).
func TestDecodeMove(t *testing.T) {
	if m, err := decodeMove([]any{int64(0), int64(7)}); err != nil || m != (MoveReply{Code: CodeOK, N: 7}) {
		t.Errorf("decodeMove(good) = %+v, %v", m, err)
	}
	if m, err := decodeMove([]any{int64(CodeRepairing), int64(0)}); err != nil || m != (MoveReply{Code: CodeRepairing}) {
		t.Errorf("decodeMove(repairing) = %+v, %v", m, err)
	}
	for name, v := range map[string]any{
		"negative units":   []any{int64(0), int64(-1)},
		"code as a string": []any{"0", int64(1)},
		"units as string":  []any{int64(0), "1"},
		"short":            []any{int64(0)},
		"long":             []any{int64(0), int64(1), int64(2)},
		"not an array":     int64(0),
		"nil":              nil,
	} {
		if m, err := decodeMove(v); err == nil || m != (MoveReply{}) {
			t.Errorf("decodeMove(%s) = %+v, %v; want an error and nothing read", name, m, err)
		}
	}
}

// The repair script's reply {held, changed, raised} (read by hand in
// repair/repair.go before, where a mistyped element read as 0).
func TestDecodeRepair(t *testing.T) {
	if r, err := decodeRepair([]any{int64(1), int64(4), int64(2)}); err != nil || r != (RepairReply{Applied: true, Changed: 4, Raised: 2}) {
		t.Errorf("decodeRepair(applied) = %+v, %v", r, err)
	}
	if r, err := decodeRepair([]any{int64(0), int64(0), int64(0)}); err != nil || r != (RepairReply{}) {
		t.Errorf("decodeRepair(not held) = %+v, %v", r, err)
	}
	for name, v := range map[string]any{
		"held as a string":    []any{"1", int64(4), int64(2)},
		"changed as a string": []any{int64(1), "4", int64(2)},
		"raised nil":          []any{int64(1), int64(4), nil},
		"short":               []any{int64(1), int64(4)},
		"long":                []any{int64(1), int64(4), int64(2), int64(0)},
		"not an array":        "OK",
	} {
		if r, err := decodeRepair(v); err == nil || r != (RepairReply{}) {
			t.Errorf("decodeRepair(%s) = %+v, %v; want an error and nothing read", name, r, err)
		}
	}
}

// The mark script's (and the relay's remove script's) reply: a count.
func TestDecodeCount(t *testing.T) {
	for _, n := range []int64{0, 3} {
		if got, err := decodeCount(n); err != nil || got != n {
			t.Errorf("decodeCount(%d) = %d, %v", n, got, err)
		}
	}
	for name, v := range map[string]any{
		"negative":   int64(-1),
		"a string":   "3",
		"an array":   []any{int64(3)},
		"nil":        nil,
		"a float":    3.0,
		"an integer": 3, // go-redis answers int64, never int
	} {
		if got, err := decodeCount(v); err == nil || got != 0 {
			t.Errorf("decodeCount(%s) = %d, %v; want an error", name, got, err)
		}
	}
}

// The hold script's reply {held, run id}.
func TestDecodeHold(t *testing.T) {
	for _, tc := range []struct {
		v    []any
		want bool
	}{
		{[]any{int64(1), "abc"}, true},
		{[]any{int64(0), "abc"}, false},
	} {
		if got, err := decodeHold(tc.v); err != nil || got != tc.want {
			t.Errorf("decodeHold(%#v) = %v, %v; want %v", tc.v, got, err, tc.want)
		}
	}
	for name, v := range map[string]any{
		"held as a string": []any{"1", "abc"},
		"no run id":        []any{int64(1)},
		"run id a number":  []any{int64(1), int64(2)},
		"long":             []any{int64(1), "abc", int64(0)},
		"not an array":     int64(1),
	} {
		if got, err := decodeHold(v); err == nil || got {
			t.Errorf("decodeHold(%s) = %v, %v; want an error and not held", name, got, err)
		}
	}
}
