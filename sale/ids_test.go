package sale

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
)

func mustOrderIDs(t *testing.T) *orderIDs {
	t.Helper()
	g, err := newOrderIDs()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Ids of two generators (two gateways, or one before and after a restart)
// never meet, and each is a valid id.
func TestOrderIDsUnique(t *testing.T) {
	const n = 200_000
	seen := make(map[string]int, 2*n)
	for gen, g := range []*orderIDs{mustOrderIDs(t), mustOrderIDs(t)} {
		for i := 0; i < n; i++ {
			id := g.next()
			if !order.ValidID(id) {
				t.Fatalf("invalid id %q", id)
			}
			if prev, dup := seen[id]; dup {
				t.Fatalf("id %s made twice (generators %d and %d)", id, prev, gen)
			}
			seen[id] = gen
		}
	}
}

// A buyer who knows their own order id must learn nothing of the next
// buyer's: past the time prefix, consecutive ids look like independent
// random strings. Each bound below is many standard deviations from what
// random ids give, and a counter in any part after the prefix breaks it.
func TestOrderIDsCannotBeStepped(t *testing.T) {
	const n = 20_000
	g := mustOrderIDs(t)
	ids := make([]string, n)
	set := make(map[string]bool, n)
	for i := range ids {
		ids[i] = g.next()
		set[ids[i]] = true
	}
	raw, err := hex.DecodeString(ids[0])
	if err != nil {
		t.Fatalf("id %q is not hex: %v", ids[0], err)
	}
	if bits := (len(raw) - timeBytes) * 8; bits < 80 {
		t.Fatalf("id %q carries %d unpredictable bits, want at least 80", ids[0], bits)
	}
	// What follows looks at the unpredictable part alone.
	secret := make([]string, n)
	for i, id := range ids {
		secret[i] = id[2*timeBytes:]
	}

	// Adding or subtracting one, as an attacker would, never gives an id
	// that was handed out.
	hits, example := 0, ""
	for _, id := range ids {
		for _, step := range []string{hexStep(id, +1), hexStep(id, -1)} {
			if set[step] {
				hits, example = hits+1, id+" ± 1 = "+step
			}
		}
	}
	if hits > 0 {
		t.Errorf("%d of %d ids stepped by one give another order's id, e.g. %s", hits, 2*n, example)
	}

	// Between consecutive ids about half of the bits differ (a counter
	// flips a couple), and they share no more leading characters than
	// chance: 1/15 on average for hex.
	var flipped, prefix, longest int
	nbits := 0
	for i := 1; i < n; i++ {
		a, errA := hex.DecodeString(secret[i-1])
		b, errB := hex.DecodeString(secret[i])
		if errA != nil || errB != nil || len(a) != len(b) {
			t.Fatalf("ids %q and %q are not hex of one length", ids[i-1], ids[i])
		}
		for j := range a {
			flipped += bits.OnesCount8(a[j] ^ b[j])
		}
		nbits += 8 * len(a)
		p := commonPrefix(secret[i-1], secret[i])
		prefix += p
		longest = max(longest, p)
	}
	if frac := float64(flipped) / float64(nbits); frac < 0.48 || frac > 0.52 {
		t.Errorf("consecutive ids differ in %.3f of their bits, want about 0.5", frac)
	}
	if mean := float64(prefix) / float64(n-1); mean > 0.2 {
		t.Errorf("consecutive ids share %.2f leading characters on average, want about 0.07", mean)
	}
	if longest > 8 {
		t.Errorf("two consecutive ids share %d leading characters", longest)
	}

	// No position after the prefix is fixed: each takes every hex digit.
	for pos := 0; pos < len(secret[0]); pos++ {
		digits := map[byte]bool{}
		for _, id := range secret {
			digits[id[pos]] = true
		}
		if len(digits) < 16 {
			t.Errorf("position %d of the id takes only %d values over %d ids", pos, len(digits), n)
		}
	}
}

// Ids sort as the times they were made, to the millisecond, whatever their
// random part: MySQL's primary key takes each new row at its right edge.
// The prefix is the Unix millisecond in hex.
func TestOrderIDsSortByTime(t *testing.T) {
	g := mustOrderIDs(t)
	at := time.UnixMilli(1_800_000_000_123)
	g.now = func() time.Time { return at }
	var prev string
	for i := range 2000 {
		if i%10 == 0 {
			at = at.Add(time.Millisecond)
		}
		id := g.next()
		if want := fmt.Sprintf("%012x", at.UnixMilli()); id[:2*timeBytes] != want {
			t.Fatalf("id %s at %d ms: prefix %s, want %s", id, at.UnixMilli(), id[:2*timeBytes], want)
		}
		if i%10 == 0 && prev >= id {
			t.Fatalf("id %s of a later millisecond sorts before %s", id, prev)
		}
		prev = id
	}
}

// A buyer who adds one to their own order id does not read the order
// placed right after theirs (the status endpoint reads Store.Order).
func TestOrderIDNextIsNotAnotherOrder(t *testing.T) {
	e := newEnv(t, Options{})
	e.mustSale("step", `{"stock":10,"per_user_limit":1}`)
	a, errA := e.buy("step", "alice", 1, "")
	b, errB := e.buy("step", "bob", 1, "")
	if errA != nil || errB != nil {
		t.Fatalf("setup buys: %v, %v", errA, errB)
	}
	ctx := context.Background()
	own, err := e.store.Order(ctx, "step", a.OrderID)
	if err != nil || own.UserID != "alice" {
		t.Fatalf("alice's own order: %+v %v", own, err)
	}
	for _, guess := range []string{hexStep(a.OrderID, +1), hexStep(b.OrderID, -1)} {
		if r, err := e.store.Order(ctx, "step", guess); !errors.Is(err, ErrNotFound) {
			t.Errorf("stepped id %s: %+v %v, want ErrNotFound", guess, r, err)
		}
	}
}

// hexStep adds d (±1) to the hexadecimal number id, keeping its length and
// its letters' case.
func hexStep(id string, d int) string {
	const digits = "0123456789abcdef"
	b := []byte(id)
	for i := len(b) - 1; i >= 0; i-- {
		v := hexVal(b[i]) + d
		carry := v < 0 || v > 15
		b[i] = digits[(v+16)%16]
		if !carry {
			break
		}
	}
	return string(b)
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return 0
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// The id is made on every accepted buy: it costs its string and nothing more.
func TestOrderIDAllocs(t *testing.T) {
	g := mustOrderIDs(t)
	if allocs := testing.AllocsPerRun(1000, func() { _ = g.next() }); allocs > 1 {
		t.Errorf("next allocates %.1f times, want only its string", allocs)
	}
}

func BenchmarkOrderIDs(b *testing.B) {
	g, err := newOrderIDs()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = g.next()
		}
	})
}
