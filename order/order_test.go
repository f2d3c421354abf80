package order

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func valid() Order {
	return Order{OrderID: "0123456789abcdef-1", SaleID: "sale-1", UserID: "u@x.com", Quantity: 2,
		ReservedAt: time.UnixMilli(1735689600123).UTC(), State: StateConfirmed}
}

// Invariants 3 and 8 (every 202 becomes exactly one MySQL row, whose state
// follows Redis) rest on this: what the relay encodes, the consumer decodes
// to the same order in the same state.
func TestRoundTrip(t *testing.T) {
	pending := valid()
	pending.State = StatePendingPayment
	pending.PayBy = time.UnixMilli(1735689720123).UTC()
	unset := valid()
	unset.State = ""
	reservation := pending
	reservation.Seq, reservation.IdemKey = 42, `key 1 "<&>" \`
	change := valid()
	change.State, change.Seq = StateCancelled, 43
	tests := []struct {
		name string
		o    Order
		want string
		back Order // what Unmarshal gives back
	}{
		{"confirmed", valid(),
			`{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123,"state":"confirmed"}`,
			valid()},
		{"pending with pay_by", pending,
			`{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123,"state":"pending_payment","pay_by":1735689720123}`,
			pending},
		{"no state is confirmed", unset,
			`{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123,"state":"confirmed"}`,
			valid()},
		{"a reservation with seq and idempotency key", reservation,
			`{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123,"state":"pending_payment","pay_by":1735689720123,` +
				`"seq":42,"idempotency_key":"key 1 \"\u003c\u0026\u003e\" \\"}`,
			reservation},
		{"a change of state with seq, no key", change,
			`{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123,"state":"cancelled","seq":43}`,
			change},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.o.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Fatalf("Marshal = %s\nwant      %s", b, tt.want)
			}
			got, err := Unmarshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.back {
				t.Fatalf("Unmarshal = %+v, want %+v", got, tt.back)
			}
		})
	}
}

// An order message written before payment windows (no state, no pay_by)
// still decodes, as a confirmed order without deadline; and every state and
// pay_by decodes as sent.
func TestUnmarshalState(t *testing.T) {
	const head = `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1`
	tests := []struct {
		name, tail string
		state      string
		payBy      int64 // ms, 0: none
	}{
		{"old message", `}`, StateConfirmed, 0},
		{"confirmed", `,"state":"confirmed"}`, StateConfirmed, 0},
		{"pending", `,"state":"pending_payment","pay_by":1735689720123}`, StatePendingPayment, 1735689720123},
		{"paid", `,"state":"paid","pay_by":5}`, StatePaid, 5},
		{"cancelled", `,"state":"cancelled"}`, StateCancelled, 0},
		{"expired", `,"state":"expired","pay_by":7}`, StateExpired, 7},
		{"pay_by zero is none", `,"state":"paid","pay_by":0}`, StatePaid, 0},
		{"pay_by null is none", `,"state":"paid","pay_by":null}`, StatePaid, 0},
		{"state null is confirmed", `,"state":null}`, StateConfirmed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Unmarshal([]byte(head + tt.tail))
			if err != nil {
				t.Fatal(err)
			}
			var want time.Time
			if tt.payBy != 0 {
				want = time.UnixMilli(tt.payBy).UTC()
			}
			if o.State != tt.state || o.PayBy != want {
				t.Fatalf("state %q pay_by %v; want %q %v", o.State, o.PayBy, tt.state, want)
			}
		})
	}
}

// seq and idempotency_key decode as sent; a message without them (a relay
// older than the count) has seq 0 and no key.
func TestUnmarshalSeq(t *testing.T) {
	const head = `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1`
	tests := []struct {
		name, tail string
		seq        int64
		key        string
	}{
		{"old message", `}`, 0, ""},
		{"seq and key", `,"seq":7,"idempotency_key":"k-7"}`, 7, "k-7"},
		{"a seq beyond float64 precision", `,"state":"paid","seq":9007199254740993}`, 9007199254740993, ""},
		{"seq 0 is unknown", `,"seq":0}`, 0, ""},
		{"seq null is unknown", `,"seq":null}`, 0, ""},
		{"key null is none", `,"idempotency_key":null}`, 0, ""},
		{"the longest key", `,"idempotency_key":"` + strings.Repeat("k", MaxIdemKey) + `"}`, 0, strings.Repeat("k", MaxIdemKey)},
		{"a key with escapes", `,"idempotency_key":" ~!\"#\\/\u0041"}`, 0, ` ~!"#\/A`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Unmarshal([]byte(head + tt.tail))
			if err != nil {
				t.Fatal(err)
			}
			if o.Seq != tt.seq || o.IdemKey != tt.key {
				t.Fatalf("seq %d key %q; want %d %q", o.Seq, o.IdemKey, tt.seq, tt.key)
			}
		})
	}
}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"valid", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`, true},
		{"unknown field ignored", `{"v":2,"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`, true},
		{"not json", `order o1`, false},
		{"empty", ``, false},
		{"array", `[]`, false},
		{"null", `null`, false},
		{"trailing", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1} {}`, false},
		{"missing order_id", `{"sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`, false},
		{"missing sale_id", `{"order_id":"o1","user_id":"u","quantity":1,"reserved_at":1}`, false},
		{"missing user_id", `{"order_id":"o1","sale_id":"s","quantity":1,"reserved_at":1}`, false},
		{"missing quantity", `{"order_id":"o1","sale_id":"s","user_id":"u","reserved_at":1}`, false},
		{"missing reserved_at", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1}`, false},
		{"quantity zero", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":0,"reserved_at":1}`, false},
		{"quantity too big", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1001,"reserved_at":1}`, false},
		{"quantity huge", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":99999999999999999999,"reserved_at":1}`, false},
		{"quantity fraction", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1.5,"reserved_at":1}`, false},
		{"quantity string", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":"1","reserved_at":1}`, false},
		{"empty order_id", `{"order_id":"","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`, false},
		{"bad sale_id", `{"order_id":"o1","sale_id":"s s","user_id":"u","quantity":1,"reserved_at":1}`, false},
		{"long user_id", `{"order_id":"o1","sale_id":"s","user_id":"` + strings.Repeat("u", 65) + `","quantity":1,"reserved_at":1}`, false},
		{"user_id starts with dash", `{"order_id":"o1","sale_id":"s","user_id":"-u","quantity":1,"reserved_at":1}`, false},
		{"reserved_at zero", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":0}`, false},
		{"null field", `{"order_id":null,"sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`, false},
		{"every state field", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"paid","pay_by":2}`, true},
		{"unknown state", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"shipped"}`, false},
		{"empty state", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":""}`, false},
		{"state in capitals", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"PAID"}`, false},
		{"state a number", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":3}`, false},
		{"pay_by negative", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"pending_payment","pay_by":-1}`, false},
		{"pay_by a string", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"pay_by":"soon"}`, false},
		{"pay_by fraction", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"pay_by":1.5}`, false},
		{"seq and key", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":3,"idempotency_key":"k"}`, true},
		{"seq negative", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":-1}`, false},
		{"seq fraction", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":1.5}`, false},
		{"seq a string", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":"3"}`, false},
		{"seq too big", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":9223372036854775808}`, false},
		{"key a number", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"idempotency_key":5}`, false},
		{"key too long", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"idempotency_key":"` + strings.Repeat("k", MaxIdemKey+1) + `"}`, false},
		{"key with a newline", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"idempotency_key":"a\nb"}`, false},
		{"key with DEL", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"idempotency_key":"a\u007fb"}`, false},
		{"key not ASCII", `{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"idempotency_key":"clé"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tt.body))
			if tt.ok && err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unmarshal error = %v, want ErrMalformed", err)
			}
		})
	}
}

// Invariants 3 and 8: the relay reads an outbox entry, as the scripts wrote
// it (an order, or a snapshot of its new state), into the order the
// consumer will store; a malformed one is refused. An entry written before
// payment windows (no state, no pay_by) is a confirmed order.
func TestFromStream(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{"order_id": "o1", "sale_id": "s1", "user_id": "u1", "quantity": "3", "reserved_at": "1735689600123"}
	}
	base := Order{OrderID: "o1", SaleID: "s1", UserID: "u1", Quantity: 3, ReservedAt: time.UnixMilli(1735689600123).UTC(), State: StateConfirmed}
	with := func(state string, payBy int64) Order {
		o := base
		o.State = state
		if payBy != 0 {
			o.PayBy = time.UnixMilli(payBy).UTC()
		}
		return o
	}
	withSeq := func(o Order, seq int64, key string) Order {
		o.Seq, o.IdemKey = seq, key
		return o
	}
	tests := []struct {
		name   string
		change func(m map[string]any)
		ok     bool
		want   Order // when ok; zero: base
	}{
		{"valid old entry", func(map[string]any) {}, true, base},
		{"confirmed, no pay_by", func(m map[string]any) { m["state"], m["pay_by"] = "confirmed", "0" }, true, base},
		{"pending", func(m map[string]any) { m["state"], m["pay_by"] = "pending_payment", "1735689720123" }, true,
			with(StatePendingPayment, 1735689720123)},
		{"paid", func(m map[string]any) { m["state"], m["pay_by"] = "paid", "1735689720123" }, true, with(StatePaid, 1735689720123)},
		{"cancelled", func(m map[string]any) { m["state"], m["pay_by"] = "cancelled", "0" }, true, with(StateCancelled, 0)},
		{"expired", func(m map[string]any) { m["state"], m["pay_by"] = "expired", "9" }, true, with(StateExpired, 9)},
		{"state without pay_by", func(m map[string]any) { m["state"] = "paid" }, true, with(StatePaid, 0)},
		{"a reservation with seq and idem", func(m map[string]any) {
			m["state"], m["pay_by"], m["seq"], m["idem"] = "pending_payment", "1735689720123", "17", "key 17"
		}, true, withSeq(with(StatePendingPayment, 1735689720123), 17, "key 17")},
		{"a change of state with seq", func(m map[string]any) { m["state"], m["pay_by"], m["seq"] = "paid", "0", "18" }, true,
			withSeq(with(StatePaid, 0), 18, "")},
		{"seq 0", func(m map[string]any) { m["seq"] = "0" }, true, base},
		{"the largest seq", func(m map[string]any) { m["seq"] = "9223372036854775807" }, true, withSeq(base, 9223372036854775807, "")},
		{"seq not a number", func(m map[string]any) { m["seq"] = "x" }, false, Order{}},
		{"seq empty", func(m map[string]any) { m["seq"] = "" }, false, Order{}},
		{"seq negative", func(m map[string]any) { m["seq"] = "-1" }, false, Order{}},
		{"seq fraction", func(m map[string]any) { m["seq"] = "1.5" }, false, Order{}},
		{"seq too big", func(m map[string]any) { m["seq"] = "9223372036854775808" }, false, Order{}},
		{"seq not a string", func(m map[string]any) { m["seq"] = int64(3) }, false, Order{}},
		{"idem too long", func(m map[string]any) { m["idem"] = strings.Repeat("k", MaxIdemKey+1) }, false, Order{}},
		{"idem with a control character", func(m map[string]any) { m["idem"] = "a\tb" }, false, Order{}},
		{"idem not ASCII", func(m map[string]any) { m["idem"] = "clé" }, false, Order{}},
		{"idem not a string", func(m map[string]any) { m["idem"] = int64(3) }, false, Order{}},
		{"unknown state", func(m map[string]any) { m["state"] = "P" }, false, Order{}},
		{"empty state", func(m map[string]any) { m["state"] = "" }, false, Order{}},
		{"state not a string", func(m map[string]any) { m["state"] = int64(1) }, false, Order{}},
		{"pay_by not a number", func(m map[string]any) { m["pay_by"] = "soon" }, false, Order{}},
		{"pay_by negative", func(m map[string]any) { m["pay_by"] = "-5" }, false, Order{}},
		{"pay_by empty", func(m map[string]any) { m["pay_by"] = "" }, false, Order{}},
		{"missing order_id", func(m map[string]any) { delete(m, "order_id") }, false, Order{}},
		{"missing sale_id", func(m map[string]any) { delete(m, "sale_id") }, false, Order{}},
		{"missing user_id", func(m map[string]any) { delete(m, "user_id") }, false, Order{}},
		{"missing quantity", func(m map[string]any) { delete(m, "quantity") }, false, Order{}},
		{"missing reserved_at", func(m map[string]any) { delete(m, "reserved_at") }, false, Order{}},
		{"quantity not a number", func(m map[string]any) { m["quantity"] = "x" }, false, Order{}},
		{"quantity zero", func(m map[string]any) { m["quantity"] = "0" }, false, Order{}},
		{"reserved_at not a number", func(m map[string]any) { m["reserved_at"] = "now" }, false, Order{}},
		{"field not a string", func(m map[string]any) { m["user_id"] = int64(5) }, false, Order{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := good()
			tt.change(m)
			o, err := FromStream(m)
			if !tt.ok {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("FromStream error = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o != tt.want {
				t.Fatalf("FromStream = %+v, want %+v", o, tt.want)
			}
		})
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	tests := []struct {
		name   string
		change func(o *Order)
	}{
		{"quantity zero", func(o *Order) { o.Quantity = 0 }},
		{"unknown state", func(o *Order) { o.State = "shipped" }},
		{"pay_by before the epoch", func(o *Order) { o.PayBy = time.UnixMilli(-1) }},
		{"seq negative", func(o *Order) { o.Seq = -1 }},
		{"key too long", func(o *Order) { o.IdemKey = strings.Repeat("k", MaxIdemKey+1) }},
		{"key with a newline", func(o *Order) { o.IdemKey = "a\nb" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.change(&o)
			if _, err := o.Marshal(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Marshal error = %v, want ErrMalformed", err)
			}
		})
	}
}

// The states: five, three of them final (Invariant 8: nothing leaves a
// final state), three live (Invariant 1: sold counts their units).
func TestStates(t *testing.T) {
	tests := []struct {
		state              string
		valid, final, live bool
	}{
		{StateConfirmed, true, false, true},
		{StatePendingPayment, true, false, true},
		{StatePaid, true, true, true},
		{StateCancelled, true, true, false},
		{StateExpired, true, true, false},
		{"", false, false, false},
		{"Paid", false, false, false},
	}
	for _, tt := range tests {
		if ValidState(tt.state) != tt.valid || Final(tt.state) != tt.final || Live(tt.state) != tt.live {
			t.Errorf("%q: valid %v final %v live %v; want %v %v %v", tt.state,
				ValidState(tt.state), Final(tt.state), Live(tt.state), tt.valid, tt.final, tt.live)
		}
	}
}

// FuzzUnmarshal checks that decoding never panics and that whatever it
// accepts encodes back to something it accepts as the same order.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1000,"reserved_at":-1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"pending_payment","pay_by":1735689720123}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"paid","pay_by":0}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"expired","pay_by":-1}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"cancelled","pay_by":null}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"Confirmed"}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":5,"idempotency_key":"k \"1\""}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"seq":-5,"idempotency_key":"\u0000"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := Unmarshal(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		b, err := o.Marshal()
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", body, err)
		}
		o2, err := Unmarshal(b)
		if err != nil || o2 != o {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", body, o2, err, o)
		}
	})
}

// The id rule, the same for bytes and strings.
func TestValidID(t *testing.T) {
	tests := []struct {
		name, id string
		ok       bool
	}{
		{"letters", "alice", true},
		{"every allowed sign", "a_b.c:d@e-f", true},
		{"starts with a digit", "1abc", true},
		{"64 characters", strings.Repeat("a", 64), true},
		{"65 characters", strings.Repeat("a", 65), false},
		{"empty", "", false},
		{"starts with a dash", "-a", false},
		{"starts with an underscore", "_a", false},
		{"space", "a b", false},
		{"slash", "a/b", false},
		{"NUL", "a\x00b", false},
		{"non-ASCII", "ünï", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidID(tc.id); got != tc.ok {
				t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.ok)
			}
			if got := ValidID([]byte(tc.id)); got != tc.ok {
				t.Errorf("ValidID([]byte(%q)) = %v, want %v", tc.id, got, tc.ok)
			}
		})
	}
}
