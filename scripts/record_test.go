package scripts

import (
	"errors"
	"testing"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Record
		bad  bool
	}{
		{name: "queued", in: "q:2:alice", want: Record{Quantity: 2, UserID: "alice"}},
		{name: "created", in: "c:1:u-1", want: Record{Created: true, Quantity: 1, UserID: "u-1"}},
		{name: "user with colons", in: "q:3:a:b:c", want: Record{Quantity: 3, UserID: "a:b:c"}},
		{name: "unknown state", in: "x:1:alice", bad: true},
		{name: "no user", in: "q:1:", bad: true},
		{name: "no quantity", in: "q::alice", bad: true},
		{name: "zero quantity", in: "q:0:alice", bad: true},
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
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}
