package sale

import (
	"errors"
	"strings"
	"testing"
)

// An admission lasts pass_seconds from the instant the clock admitted the
// place; a ticket a newer clock admitted before its anchor keeps the
// admission its own clock gave it. The estimate counts whole seconds up,
// and the next poll is half the wait, within its bounds. (Was the
// gateway's TestPlaceOf, when the arithmetic was the edge's.)
func TestStanding(t *testing.T) {
	k, err := NewTicketKey(strings.Repeat("5a", 32))
	if err != nil {
		t.Fatal(err)
	}
	c := Clock{Version: 1, At: 100_000, Head: 0, Rate: 10}
	rm := &Room{Sale: "s", Mode: RoomFIFO, Pass: 10, Prequeue: -1, Joined: 50, Clock: c, Key: k}
	tk := Ticket{User: "u", Join: 20, Prequeue: -1, Clock: c}
	// Position 20 at 10/s from 100 s: admitted at 102 s, pass to 112 s.
	for _, tc := range []struct {
		name           string
		now            int64
		admitted       bool
		ahead          int64
		eta, pollAfter int64
	}{
		{"long before", 0, false, 19, 102, MaxPollAfter}, // half the wait is past the bound
		{"before the anchor", 99_000, false, 19, 3, 1500},
		{"waiting", 101_000, false, 9, 1, 500},
		{"a ms before", 101_999, false, 0, 1, MinPollAfter},
		{"admitted", 102_000, true, 0, 0, 5000},
		{"last ms of the pass", 111_999, true, 0, 0, MinPollAfter},
		{"pass ended", 112_000, true, 0, 0, MinPollAfter},
	} {
		st := rm.standing(tk, tc.now)
		if !st.Known || st.Position != 20 || st.Admitted != tc.admitted || st.Ahead != tc.ahead || st.AdmitAt != 102_000 {
			t.Errorf("%s: %+v", tc.name, st)
		}
		if tc.admitted && st.PassUntil != 112_000 || !tc.admitted && st.PassUntil != 0 {
			t.Errorf("%s: pass until %d", tc.name, st.PassUntil)
		}
		if st.ETA != tc.eta || st.PollAfter != tc.pollAfter {
			t.Errorf("%s: eta %d s, poll after %d ms; want %d, %d", tc.name, st.ETA, st.PollAfter, tc.eta, tc.pollAfter)
		}
		want := tc.admitted && tc.now < 112_000
		if got := st.Admits([]byte("u")); got != want {
			t.Errorf("%s: admitted to buy %v, want %v", tc.name, got, want)
		}
		if st.Admits([]byte("v")) {
			t.Errorf("%s: another buyer passes with u's ticket", tc.name)
		}
	}
	// The rate went to 1/s at 104 s (head 40 there): the ticket's clock
	// admitted 20 at 102 s, which stands; 45 waits at the new rate.
	rm.Clock = Clock{Version: 2, At: 104_000, Head: 40, Rate: 1}
	if st := rm.standing(tk, 105_000); !st.Admitted || st.PassUntil != 112_000 || !st.Admits([]byte("u")) {
		t.Errorf("after the rate change: %+v", st)
	}
	late := Ticket{User: "w", Join: 45, Prequeue: -1, Clock: c}
	if st := rm.standing(late, 105_000); st.Admitted || st.AdmitAt != 109_000 || st.Ahead != 3 || st.ETA != 4 || st.PollAfter != 2000 {
		t.Errorf("45 after the rate change: %+v", st)
	}
	// A random room's pre-queue: no place before it is sealed, and the
	// start and half the crowd as the estimate; then the drawn place; the
	// ticket's sealed count stands for a memory that has not seen the
	// seal yet.
	rm.Mode, rm.Clock, rm.Start = RoomRandom, c, 110_000
	// 5 s to the start, and 25 of the 50 joined at 10/s: 7.5 s.
	if st := rm.standing(tk, 105_000); st.Known || st.Admitted || st.Position != 0 || st.ETA != 8 || st.PollAfter != 3750 || st.Admits([]byte("u")) {
		t.Errorf("a place in an unsealed pre-queue: %+v", st)
	}
	sealed := tk
	sealed.Prequeue = 30
	want, _ := k.Position(RoomRandom, 30, 20)
	if st := rm.standing(sealed, 105_000); !st.Known || st.Position != want {
		t.Errorf("a sealed pre-queue's place: %+v, want %d", st, want)
	}
}

// Where reads the ticket as a request sends it: a genuine one of the
// sale, of the authenticated buyer when there is one; a join's standing
// is its ticket's.
func TestWhere(t *testing.T) {
	k, err := NewTicketKey(strings.Repeat("5a", 32))
	if err != nil {
		t.Fatal(err)
	}
	c := Clock{Version: 1, At: 100_000, Head: 0, Rate: 10}
	rm := &Room{Sale: "s", Mode: RoomFIFO, Pass: 10, Prequeue: -1, Joined: 50, Clock: c, Key: k}
	pl := Place{Join: 20, Room: rm}
	joined := pl.Standing("u", 101_000)
	if joined.Ticket != (Ticket{User: "u", Join: 20, Prequeue: -1, Clock: c}) || joined != rm.standing(joined.Ticket, 101_000) {
		t.Fatalf("the join's standing: %+v", joined)
	}
	raw := k.Sign(nil, "s", joined.Ticket)
	other, err := NewTicketKey(strings.Repeat("a5", 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		raw   []byte
		buyer string
		ok    bool
	}{
		{"no buyer named", raw, "", true},
		{"its buyer", raw, "u", true},
		{"another buyer", raw, "v", false},
		{"another sale's", k.Sign(nil, "t", joined.Ticket), "", false},
		{"another key's", other.Sign(nil, "s", joined.Ticket), "", false},
		{"cut", raw[:len(raw)-1], "", false},
		{"empty", nil, "", false},
	} {
		st, err := rm.Where(tc.raw, tc.buyer, 101_000)
		switch {
		case tc.ok && (err != nil || st != joined):
			t.Errorf("%s: %+v, %v; want %+v", tc.name, st, err, joined)
		case !tc.ok && !errors.Is(err, ErrBadTicket):
			t.Errorf("%s: %v, want ErrBadTicket", tc.name, err)
		}
	}
}
