package bench

import (
	"cmp"
	"math"
	"slices"
)

// The arithmetic of the waiting room's fairness checks (API.md, "Order of
// admission"; DESIGN.md invariant 11), as pure functions of what the
// buyers saw, so that each can be tested on made-up joins.

// Join is one buyer's join as the bench saw it: when the request left and
// when its answer came (any clock, the same for every join), and the
// place the gateway gave (0: none known).
type Join struct {
	Sent, Answered int64
	Position       int64
}

// Inversions counts the pairs of joins that did not overlap (a's answer
// came before b was sent) yet got their places the other way round (a's
// position above b's). In fifo mode there must be none. Joins without a
// position are left out. It takes O(n log n).
func Inversions(js []Join) int64 {
	var known []Join
	for _, j := range js {
		if j.Position > 0 {
			known = append(known, j)
		}
	}
	if len(known) < 2 {
		return 0
	}
	// Positions as ranks 1..m, for the Fenwick tree.
	pos := make([]int64, len(known))
	for i, j := range known {
		pos[i] = j.Position
	}
	slices.Sort(pos)
	pos = slices.Compact(pos)
	rank := func(p int64) int { i, _ := slices.BinarySearch(pos, p); return i + 1 }

	bySent := slices.Clone(known)
	slices.SortFunc(bySent, func(a, b Join) int { return cmp.Compare(a.Sent, b.Sent) })
	byAnswer := slices.Clone(known)
	slices.SortFunc(byAnswer, func(a, b Join) int { return cmp.Compare(a.Answered, b.Answered) })

	// Latest answer first: every join sent after it is in the tree, and
	// those of them with a smaller position are its inversions.
	tree := make([]int64, len(pos)+1)
	add := func(i int) {
		for ; i < len(tree); i += i & -i {
			tree[i]++
		}
	}
	below := func(i int) (n int64) { // entries of rank < i
		for i--; i > 0; i -= i & -i {
			n += tree[i]
		}
		return n
	}
	var n int64
	next := len(bySent) - 1
	for k := len(byAnswer) - 1; k >= 0; k-- {
		a := byAnswer[k]
		for next >= 0 && bySent[next].Sent > a.Answered {
			add(rank(bySent[next].Position))
			next--
		}
		n += below(rank(a.Position))
	}
	return n
}

// Spearman returns Spearman's rank correlation of xs and ys (the same
// length): the Pearson correlation of their ranks, ties given the mean of
// their ranks. It is NaN for fewer than two pairs or when either side is
// constant. 1: the same order; −1: the reverse; near 0: unrelated.
func Spearman(xs, ys []float64) float64 {
	if len(xs) != len(ys) || len(xs) < 2 {
		return math.NaN()
	}
	rx, ry := ranks(xs), ranks(ys)
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx /= float64(len(rx))
	my /= float64(len(ry))
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mx, ry[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ranks returns the rank of each value, from 1, ties sharing their mean.
func ranks(vs []float64) []float64 {
	idx := make([]int, len(vs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case vs[a] < vs[b]:
			return -1
		case vs[a] > vs[b]:
			return 1
		}
		return 0
	})
	out := make([]float64, len(vs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && vs[idx[j+1]] == vs[idx[i]] {
			j++
		}
		mean := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			out[idx[k]] = mean
		}
		i = j + 1
	}
	return out
}

// Sighting is what one buyer saw of admission: its position, the latest
// time a poll of it was sent and answered "waiting" (0: never), and the
// time the first answer "admitted" came (0: never).
type Sighting struct {
	Position      int64
	LastWaiting   int64
	AdmittedAfter int64
}

// AdmittedOutOfTurn counts the buyers seen waiting after a buyer behind
// them (a larger position) had been seen admitted: the waiting poll was
// sent after the other's admitted answer came, so admission went out of
// position order in between. Buyers without a position are left out. It
// takes O(n log n).
func AdmittedOutOfTurn(ss []Sighting) int64 {
	var known []Sighting
	for _, s := range ss {
		if s.Position > 0 {
			known = append(known, s)
		}
	}
	slices.SortFunc(known, func(a, b Sighting) int { return cmp.Compare(a.Position, b.Position) })
	// From the back: the earliest admission among the positions behind.
	var n int64
	earliest := int64(math.MaxInt64)
	for i := len(known) - 1; i >= 0; {
		j := i
		for j > 0 && known[j-1].Position == known[i].Position {
			j--
		}
		for k := j; k <= i; k++ {
			if s := known[k]; s.LastWaiting > 0 && earliest < s.LastWaiting {
				n++
			}
		}
		for k := j; k <= i; k++ {
			if a := known[k].AdmittedAfter; a > 0 && a < earliest {
				earliest = a
			}
		}
		i = j - 1
	}
	return n
}
