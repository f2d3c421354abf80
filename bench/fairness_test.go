package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestInversions(t *testing.T) {
	for _, tc := range []struct {
		name string
		js   []Join
		want int64
	}{
		{"none", nil, 0},
		{"in order, one after the other", []Join{{0, 1, 1}, {2, 3, 2}, {4, 5, 3}}, 0},
		{"two swapped", []Join{{0, 1, 2}, {2, 3, 1}}, 1},
		{"reversed", []Join{{0, 1, 3}, {2, 3, 2}, {4, 5, 1}}, 3},
		{"overlapping joins may go either way", []Join{{0, 5, 2}, {1, 6, 1}}, 0},
		{"answered at the very instant the other left: overlapping", []Join{{0, 2, 2}, {2, 3, 1}}, 0},
		{"a join without a position is left out", []Join{{0, 1, 2}, {2, 3, 0}, {4, 5, 1}}, 1},
		{"one long join overlaps both others", []Join{{0, 10, 3}, {1, 2, 2}, {3, 4, 1}}, 1},
	} {
		if got := Inversions(tc.js); got != tc.want {
			t.Errorf("%s: %d inversions, want %d", tc.name, got, tc.want)
		}
	}
}

// TestInversionsAgainstPairs holds the O(n log n) count to the count of
// every pair, on joins of random lengths and places.
func TestInversionsAgainstPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		n := 1 + rng.IntN(2000)
		js := make([]Join, n)
		perm := rng.Perm(n)
		for i := range js {
			sent := rng.Int64N(100_000)
			js[i] = Join{Sent: sent, Answered: sent + 1 + rng.Int64N(5_000), Position: int64(perm[i]) + 1}
			if rng.IntN(10) == 0 {
				js[i].Position = 0
			}
			if rng.IntN(20) == 0 && i > 0 {
				js[i].Position = js[i-1].Position // a duplicate place is counted as equal
			}
		}
		var want int64
		for _, a := range js {
			for _, b := range js {
				if a.Position > 0 && b.Position > 0 && a.Answered < b.Sent && a.Position > b.Position {
					want++
				}
			}
		}
		if got := Inversions(js); got != want {
			t.Fatalf("round %d, %d joins: %d inversions, pairs say %d", round, n, got, want)
		}
	}
}

func TestSpearman(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   float64 // NaN: undefined
	}{
		{"same order", []float64{1, 2, 3, 4, 5}, []float64{10, 20, 30, 40, 50}, 1},
		{"same order, not linear", []float64{1, 2, 3, 4, 5}, []float64{1, 8, 27, 64, 1000}, 1},
		{"reversed", []float64{1, 2, 3, 4, 5}, []float64{5, 4, 3, 2, 1}, -1},
		// d = (0, −2, 1, 1, 0), Σd² = 6: 1 − 6·6/(5·24) = 0.7.
		{"one moved two places", []float64{1, 2, 3, 4, 5}, []float64{1, 4, 2, 3, 5}, 0.7},
		// Σd² = 4: 1 − 6·4/(4·15) = 0.6.
		{"adjacent pairs swapped", []float64{1, 2, 3, 4}, []float64{2, 1, 4, 3}, 0.6},
		// Ties take their mean rank: x ranks (1.5, 1.5, 3), y ranks (1, 2, 3): r = 0.866….
		{"ties", []float64{7, 7, 9}, []float64{1, 2, 3}, math.Sqrt(3) / 2},
		{"one pair", []float64{1}, []float64{1}, math.NaN()},
		{"constant side", []float64{1, 2, 3}, []float64{4, 4, 4}, math.NaN()},
		{"lengths differ", []float64{1, 2, 3}, []float64{1, 2}, math.NaN()},
	} {
		got := Spearman(tc.xs, tc.ys)
		if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && !near(got, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAdmittedOutOfTurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		ss   []Sighting
		want int64
	}{
		{"none", nil, 0},
		{"in turn", []Sighting{{1, 5, 10}, {2, 12, 20}, {3, 15, 30}}, 0},
		{"2 admitted at 10, 1 still waiting at 11", []Sighting{{1, 11, 0}, {2, 0, 10}}, 1},
		{"waiting sent before the other's admission: no proof", []Sighting{{1, 9, 0}, {2, 0, 10}}, 0},
		{"the one behind admitted first, both behind", []Sighting{{1, 50, 60}, {2, 0, 40}, {3, 0, 30}}, 1},
		{"one buyer ahead waiting late, two behind admitted", []Sighting{{1, 100, 0}, {2, 90, 95}, {3, 0, 20}}, 2},
		{"no position: left out", []Sighting{{0, 100, 0}, {2, 0, 10}}, 0},
		{"the same position is not behind", []Sighting{{2, 100, 0}, {2, 0, 10}}, 0},
	} {
		if got := AdmittedOutOfTurn(tc.ss); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestVerifyRoom holds each waiting-room verdict to made-up figures.
func TestVerifyRoom(t *testing.T) {
	rho, z, bigZ := 0.01, 0.3, 7.5
	fair := RoomFigures{Mode: "random", Stock: 10, AcceptedUnits: 10, Joined: 100, JoinTried: 100, ViewJoined: 100,
		Admitted: 20, ViewAdmitted: 25, PreStart: 90, Late: 10, Spearman: &rho, SpearmanZ: &z}
	for _, tc := range []struct {
		name  string
		set   func(*RoomFigures)
		check string // the check that must fail; "": none
	}{
		{"fair", func(*RoomFigures) {}, ""},
		{"oversold", func(f *RoomFigures) { f.AcceptedUnits = 11 }, "202s ≤ stock (waiting room)"},
		{"a pass refused", func(f *RoomFigures) { f.NotAdmitted, f.NotAdmittedInPass = 2, 1 }, "no not_admitted within an admitted buyer's pass"},
		{"refused after the pass is no failure", func(f *RoomFigures) { f.NotAdmitted = 3 }, ""},
		{"a ticket refused", func(f *RoomFigures) { f.PollRefused = 1 }, "every poll's ticket accepted"},
		{"admitted out of turn", func(f *RoomFigures) { f.OutOfTurn = 1 }, "admission in position order"},
		{"a place moved", func(f *RoomFigures) { f.Moved = 1 }, "a position never changes once given"},
		{"a place shared", func(f *RoomFigures) { f.Shared = 2 }, "no position given twice"},
		{"a late joiner ahead", func(f *RoomFigures) { f.LateAhead = 1 }, "random: late joiners behind the pre-queue"},
		{"late joiners out of order", func(f *RoomFigures) { f.LateInversions = 1 }, "random: late joiners in join order"},
		{"pre-queue in join order", func(f *RoomFigures) { f.SpearmanZ = &bigZ }, "random: pre-queue places unrelated to join order"},
		{"fifo inversions", func(f *RoomFigures) { f.Mode, f.Inversions = "fifo", 1 }, "fifo: joins that did not overlap placed in join order"},
		{"view joined more than tried", func(f *RoomFigures) { f.ViewJoined = 101 }, "admin view: joined and admitted"},
		{"view admitted fewer than seen", func(f *RoomFigures) { f.ViewAdmitted = 19 }, "admin view: joined and admitted"},
		{"no view", func(f *RoomFigures) { f.ViewErr = "timeout" }, "admin view: joined and admitted"},
	} {
		f := fair
		tc.set(&f)
		var failed []string
		for _, c := range VerifyRoom(f) {
			if c.Result == Fail {
				failed = append(failed, c.Name)
			}
		}
		if tc.check == "" && len(failed) > 0 || tc.check != "" && (len(failed) != 1 || failed[0] != tc.check) {
			t.Errorf("%s: failed %q, want %q", tc.name, failed, tc.check)
		}
	}
}
