package plot

import (
	"math"
	"strconv"
)

// maxTicks bounds the ticks of an axis, whatever its range.
const maxTicks = 8

// axis maps a data range onto a pixel range and knows its ticks.
type axis struct {
	lo, hi     float64 // data, lo < hi
	from, to   float64 // pixels: lo maps to from, hi to to
	step       float64 // between ticks
	firstTick  float64
	tickDigits int // decimals a tick label needs
}

// newAxis returns an axis covering [lo, hi], widened to whole ticks.
// An empty or degenerate range (lo ≥ hi, NaN, ±Inf) becomes [lo, lo+1] or
// [0, 1].
func newAxis(lo, hi, from, to float64) axis {
	if math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	if hi <= lo {
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = min(lo, 0), max(lo, 0)+math.Abs(lo)*0.1
			if hi <= lo {
				hi = lo + 1
			}
		}
	}
	step := niceStep((hi - lo) / (maxTicks - 2))
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	digits := 0
	if step < 1 {
		digits = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return axis{lo: lo, hi: hi, from: from, to: to, step: step, firstTick: lo, tickDigits: digits}
}

// niceStep returns the smallest of 1, 2, 5 × 10^k that is ≥ raw.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// pos returns the pixel of data value v.
func (a axis) pos(v float64) float64 {
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// ticks returns the tick values, lo to hi.
func (a axis) ticks() []float64 {
	var ts []float64
	for i := 0; i <= 2*maxTicks; i++ {
		v := a.firstTick + float64(i)*a.step
		if v > a.hi+a.step*1e-9 {
			break
		}
		ts = append(ts, v)
	}
	return ts
}

// format writes a tick value: thousands as k, millions as M, and as many
// decimals as the step needs otherwise.
func (a axis) format(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e6 && a.step >= 1e5:
		return trim(strconv.FormatFloat(v/1e6, 'f', max(0, 6-digitsOf(a.step)), 64)) + "M"
	case av >= 1e3 && a.step >= 100:
		return trim(strconv.FormatFloat(v/1e3, 'f', max(0, 3-digitsOf(a.step)), 64)) + "k"
	}
	s := trim(strconv.FormatFloat(v, 'f', a.tickDigits, 64))
	if s == "-0" {
		s = "0"
	}
	return s
}

// digitsOf is the power of ten of a step: 3 for 1000, 2 for 200 or 500.
func digitsOf(step float64) int { return int(math.Floor(math.Log10(step) + 1e-9)) }

// trim drops trailing zeros after a decimal point.
func trim(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			for len(s) > i && (s[len(s)-1] == '0' || s[len(s)-1] == '.') {
				s = s[:len(s)-1]
			}
			return s
		}
	}
	return s
}
