package order

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func valid() Order {
	return Order{OrderID: "0123456789abcdef-1", SaleID: "sale-1", UserID: "u@x.com", Quantity: 2,
		ReservedAt: time.UnixMilli(1735689600123).UTC()}
}

// Invariant 3 (every 202 becomes exactly one MySQL row) rests on this: what
// the relay encodes, the consumer decodes to the same order.
func TestRoundTrip(t *testing.T) {
	o := valid()
	b, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"order_id":"0123456789abcdef-1","sale_id":"sale-1","user_id":"u@x.com","quantity":2,"reserved_at":1735689600123}`
	if string(b) != want {
		t.Fatalf("Marshal = %s\nwant      %s", b, want)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != o {
		t.Fatalf("Unmarshal = %+v, want %+v", got, o)
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

// Invariant 3: the relay reads an outbox entry, as the reserve script wrote
// it, into the order the consumer will store; a malformed one is refused.
func TestFromStream(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{"order_id": "o1", "sale_id": "s1", "user_id": "u1", "quantity": "3", "reserved_at": "1735689600123"}
	}
	tests := []struct {
		name   string
		change func(m map[string]any)
		ok     bool
	}{
		{"valid", func(map[string]any) {}, true},
		{"missing order_id", func(m map[string]any) { delete(m, "order_id") }, false},
		{"missing sale_id", func(m map[string]any) { delete(m, "sale_id") }, false},
		{"missing user_id", func(m map[string]any) { delete(m, "user_id") }, false},
		{"missing quantity", func(m map[string]any) { delete(m, "quantity") }, false},
		{"missing reserved_at", func(m map[string]any) { delete(m, "reserved_at") }, false},
		{"quantity not a number", func(m map[string]any) { m["quantity"] = "x" }, false},
		{"quantity zero", func(m map[string]any) { m["quantity"] = "0" }, false},
		{"reserved_at not a number", func(m map[string]any) { m["reserved_at"] = "now" }, false},
		{"field not a string", func(m map[string]any) { m["user_id"] = int64(5) }, false},
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
			want := Order{OrderID: "o1", SaleID: "s1", UserID: "u1", Quantity: 3, ReservedAt: time.UnixMilli(1735689600123).UTC()}
			if o != want {
				t.Fatalf("FromStream = %+v, want %+v", o, want)
			}
		})
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	o := valid()
	o.Quantity = 0
	if _, err := o.Marshal(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Marshal error = %v, want ErrMalformed", err)
	}
}

// FuzzUnmarshal checks that decoding never panics and that whatever it
// accepts encodes back to something it accepts as the same order.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1}`))
	f.Add([]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1000,"reserved_at":-1}`))
	f.Add([]byte(`{}`))
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
