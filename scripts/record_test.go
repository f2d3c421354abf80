package scripts

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate/order"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Record
		old  bool // the form before payment windows: String writes the current one
		bad  bool
	}{
		{name: "confirmed", in: "q:C:0:1735689600123:2:alice",
			want: Record{State: order.StateConfirmed, ReservedAt: 1735689600123, Quantity: 2, UserID: "alice"}},
		{name: "pending", in: "q:P:1735689660123:1735689600123:1:u-1",
			want: Record{State: order.StatePendingPayment, PayBy: 1735689660123, ReservedAt: 1735689600123, Quantity: 1, UserID: "u-1"}},
		{name: "paid and created", in: "c:D:1735689660123:1735689600123:1:u-1",
			want: Record{Created: true, State: order.StatePaid, PayBy: 1735689660123, ReservedAt: 1735689600123, Quantity: 1, UserID: "u-1"}},
		{name: "cancelled", in: "c:X:0:1:3:bob",
			want: Record{Created: true, State: order.StateCancelled, ReservedAt: 1, Quantity: 3, UserID: "bob"}},
		{name: "expired", in: "q:E:5:1:3:bob",
			want: Record{State: order.StateExpired, PayBy: 5, ReservedAt: 1, Quantity: 3, UserID: "bob"}},
		{name: "user with colons", in: "q:C:0:1:3:a:b:c",
			want: Record{State: order.StateConfirmed, ReservedAt: 1, Quantity: 3, UserID: "a:b:c"}},
		{name: "user like a state", in: "q:C:0:1:3:P:1:2",
			want: Record{State: order.StateConfirmed, ReservedAt: 1, Quantity: 3, UserID: "P:1:2"}},
		{name: "old queued", in: "q:2:alice", old: true,
			want: Record{State: order.StateConfirmed, Quantity: 2, UserID: "alice"}},
		{name: "old created", in: "c:1:u-1", old: true,
			want: Record{Created: true, State: order.StateConfirmed, Quantity: 1, UserID: "u-1"}},
		{name: "old user with colons", in: "q:3:a:b:c", old: true,
			want: Record{State: order.StateConfirmed, Quantity: 3, UserID: "a:b:c"}},
		{name: "old user in capitals", in: "q:3:Z:9", old: true,
			want: Record{State: order.StateConfirmed, Quantity: 3, UserID: "Z:9"}},
		{name: "unknown flag", in: "x:1:alice", bad: true},
		{name: "unknown state", in: "q:Q:0:1:1:alice", bad: true},
		{name: "lower-case state", in: "q:p:0:1:1:alice", bad: true},
		{name: "no user", in: "q:1:", bad: true},
		{name: "new form without user", in: "q:C:0:1:1:", bad: true},
		{name: "new form short", in: "q:C:0:1", bad: true},
		{name: "negative pay_by", in: "q:P:-1:1:1:alice", bad: true},
		{name: "pay_by not a number", in: "q:P:x:1:1:alice", bad: true},
		{name: "no quantity", in: "q::alice", bad: true},
		{name: "zero quantity", in: "q:0:alice", bad: true},
		{name: "new form zero quantity", in: "q:C:0:1:0:alice", bad: true},
		{name: "two fields", in: "q:1", bad: true},
		{name: "empty", in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRecord(tc.in)
			if tc.bad {
				if !errors.Is(err, ErrBadRecord) {
					t.Fatalf("ParseRecord(%q) = %+v, %v; want ErrBadRecord", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRecord(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if tc.old {
				// Written back in the current form, it reads the same.
				again, err := ParseRecord(got.String())
				if err != nil || again != got {
					t.Fatalf("%q written back as %q reads %+v, %v", tc.in, got.String(), again, err)
				}
				return
			}
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

// Invariant 8: a pay at or after pay_by must not succeed, and Due is what
// tells the order view so.
func TestRecordDue(t *testing.T) {
	pending := Record{State: order.StatePendingPayment, PayBy: 1000, Quantity: 1, UserID: "u"}
	for _, tc := range []struct {
		name string
		r    Record
		now  int64
		want bool
	}{
		{"before pay_by", pending, 999, false},
		{"at pay_by", pending, 1000, true},
		{"after pay_by", pending, 1001, true},
		{"paid", Record{State: order.StatePaid, PayBy: 1000}, 2000, false},
		{"confirmed", Record{State: order.StateConfirmed}, 2000, false},
	} {
		if got := tc.r.Due(tc.now); got != tc.want {
			t.Errorf("%s: Due(%d) = %v, want %v", tc.name, tc.now, got, tc.want)
		}
	}
}
