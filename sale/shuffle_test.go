package sale

import (
	"math"
	"testing"
)

// The pre-queue's order is a permutation of 1..n for every n, fixed by the
// key, another under another key; past the pre-queue, and in a fifo room,
// a place is its join number.
func TestShuffleIsAPermutation(t *testing.T) {
	k := testKey(t, key1)
	for _, n := range []int64{1, 2, 3, 4, 5, 7, 15, 16, 17, 100, 255, 256, 257, 1000, 4097} {
		seen := make([]bool, n+1)
		for j := int64(1); j <= n; j++ {
			p, ok := k.Position(RoomRandom, n, j)
			if !ok || p < 1 || p > n || seen[p] {
				t.Fatalf("n %d: join %d placed at %d (ok %v), taken or out of 1..n", n, j, p, ok)
			}
			seen[p] = true
			if q, _ := k.Position(RoomRandom, n, j); q != p {
				t.Fatalf("n %d: join %d placed at %d, then at %d", n, j, p, q)
			}
		}
		if p, ok := k.Position(RoomRandom, n, n+1); !ok || p != n+1 {
			t.Fatalf("n %d: the first late joiner placed at %d", n, p)
		}
	}
	if _, ok := k.Position(RoomRandom, -1, 1); ok {
		t.Fatal("a place known before the pre-queue is sealed")
	}
	if p, ok := k.Position(RoomFIFO, 10, 3); !ok || p != 3 {
		t.Fatalf("fifo: join 3 placed at %d", p)
	}
	other := testKey(t, "ff"+key1[2:])
	same := 0
	for j := int64(1); j <= 1000; j++ {
		a, _ := k.Position(RoomRandom, 1000, j)
		b, _ := other.Position(RoomRandom, 1000, j)
		if a == b {
			same++
		}
	}
	// Two independent draws agree on about one place of n.
	if same > 10 {
		t.Fatalf("two keys agree on %d of 1000 places", same)
	}
}

// Over many keys, each join number lands in each quarter of the places
// about equally often (a chi-square test, 3 degrees of freedom per join
// number summed into one statistic), and the order's rank correlation with
// the joins averages 0: a fixed, key-independent bias would show in both.
func TestShuffleIsUniform(t *testing.T) {
	const n, keys = 64, 2000
	var counts [n + 1][4]float64
	var rhoSum float64
	for i := range keys {
		var raw [32]byte
		raw[0], raw[1], raw[2] = byte(i), byte(i>>8), 7
		k := testKey(t, hexOf(raw[:]))
		var d2 float64
		for j := int64(1); j <= n; j++ {
			p, _ := k.Position(RoomRandom, n, j)
			counts[j][(p-1)*4/n]++
			d := float64(p - j)
			d2 += d * d
		}
		rhoSum += 1 - 6*d2/(n*(n*n-1))
	}
	var chi float64
	for j := 1; j <= n; j++ {
		for q := range 4 {
			e := float64(keys) / 4
			chi += (counts[j][q] - e) * (counts[j][q] - e) / e
		}
	}
	// chi is about chi-square with 3n = 192 degrees of freedom: mean 192,
	// sd 19.6; above 192 + 6 sd happens with probability well under 1e-6.
	if df := 3.0 * n; chi > df+6*math.Sqrt(2*df) {
		t.Fatalf("places by join number are not uniform: chi-square %.0f on %.0f degrees of freedom", chi, df)
	}
	// The mean of keys draws of rho has sd 1/sqrt((n-1)·keys) ≈ 0.0028.
	if mean := rhoSum / keys; math.Abs(mean) > 5/math.Sqrt((n-1)*keys) {
		t.Fatalf("mean rank correlation %.4f over %d keys", mean, keys)
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// Placing a join number, done at every poll of a random room, allocates
// nothing.
func TestShuffleAllocs(t *testing.T) {
	k := testKey(t, key1)
	if n := testing.AllocsPerRun(100, func() { k.Position(RoomRandom, 100_000, 777) }); n != 0 {
		t.Errorf("Position allocates %.0f times", n)
	}
}

func BenchmarkShuffle(b *testing.B) {
	k := testKey(b, key1)
	var j int64
	for b.Loop() {
		j = j%100_000 + 1
		k.Position(RoomRandom, 100_000, j)
	}
}
