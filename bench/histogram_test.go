package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketCoversItsValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []int64{0, 1, 255, 256, 257, 511, 512, 1 << 20, 1<<40 + 12345, math.MaxInt64}
	for range 100000 {
		vals = append(vals, rng.Int64N(1<<uint(rng.IntN(62)+1)))
	}
	for _, v := range vals {
		i := bucket(v)
		if i < 0 || i >= maxBuckets {
			t.Fatalf("bucket(%d) = %d, outside [0, %d)", v, i, maxBuckets)
		}
		lo, w := bucketRange(i)
		if v < lo || v-lo >= w {
			t.Fatalf("bucket(%d) = %d covers [%d, %d+%d)", v, i, lo, lo, w)
		}
		if lo >= 1<<(subBits+1) && float64(w)/float64(lo) > 1.0/(1<<subBits)+1e-12 {
			t.Fatalf("bucket %d [%d, +%d) wider than 1/%d", i, lo, w, 1<<subBits)
		}
		if bucket(lo) != i || bucket(lo+w-1) != i {
			t.Fatalf("bucket %d: ends map elsewhere", i)
		}
	}
	// Consecutive buckets tile the line with no gap.
	for i := 1; i < maxBuckets; i++ {
		plo, pw := bucketRange(i - 1)
		lo, _ := bucketRange(i)
		if plo+pw != lo {
			t.Fatalf("gap between bucket %d and %d", i-1, i)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name string
		gen  func() time.Duration
		n    int
	}{
		{"small exact values", func() time.Duration { return time.Duration(rng.IntN(200)) }, 10000},
		{"uniform 10µs-10ms", func() time.Duration {
			return 10*time.Microsecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))
		}, 100000},
		{"long tail", func() time.Duration {
			return time.Duration(50000 * math.Exp(rng.ExpFloat64()*2))
		}, 100000},
		{"one sample", func() time.Duration { return 1234567 }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			exact := make([]int64, tt.n)
			for i := range exact {
				d := tt.gen()
				exact[i] = int64(d)
				h.Record(d)
			}
			slices.Sort(exact)
			if h.Count() != uint64(tt.n) || h.Min() != time.Duration(exact[0]) || h.Max() != time.Duration(exact[tt.n-1]) {
				t.Fatalf("count %d min %v max %v; want %d %v %v", h.Count(), h.Min(), h.Max(), tt.n, exact[0], exact[tt.n-1])
			}
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := max(int(math.Ceil(q*float64(tt.n))), 1)
				want := float64(exact[rank-1])
				got := float64(h.Quantile(q))
				if tol := max(want/(1<<subBits), 0.5); math.Abs(got-want) > tol {
					t.Errorf("q%v = %v, exact %v (tolerance %v)", q, got, want, tol)
				}
			}
		})
	}
}

func TestHistogramMergeEqualsOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var one, a, b Histogram
	for i := range 50000 {
		d := time.Duration(rng.Int64N(int64(time.Second)))
		if i%7 == 0 {
			d *= 100 // b grows more buckets than a
		}
		one.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(nil)
	m.Merge(&Histogram{})
	m.Merge(&b)
	for _, q := range []float64{0.1, 0.5, 0.99, 1} {
		if m.Quantile(q) != one.Quantile(q) {
			t.Errorf("q%v: merged %v, single %v", q, m.Quantile(q), one.Quantile(q))
		}
	}
	if m.Count() != one.Count() || m.Min() != one.Min() || m.Max() != one.Max() {
		t.Errorf("merged count/min/max %d %v %v, single %d %v %v", m.Count(), m.Min(), m.Max(), one.Count(), one.Min(), one.Max())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram is not all zero")
	}
	h.Record(-5)
	if h.Max() != 0 || h.Quantile(1) != 0 {
		t.Fatalf("a negative sample should count as 0, max %v", h.Max())
	}
	h.Record(time.Duration(math.MaxInt64))
	if h.Quantile(1) != time.Duration(math.MaxInt64) || len(h.counts) > maxBuckets {
		t.Fatalf("max sample: q1 %v, %d buckets", h.Quantile(1), len(h.counts))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xfffff) * 100)
	}
}
