package bench

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into
// 2^subBits buckets, so a bucket is at most 1/128 of its values wide and a
// reported percentile is within 0.4 % of the true one.
const subBits = 7

// maxBuckets is the number of buckets that covers every int64.
const maxBuckets = (64 - subBits) << subBits

// Histogram counts durations in logarithmic buckets, as HdrHistogram does:
// memory is bounded (at most 59 KiB, whatever the number of samples) and the
// relative error of a percentile is below 0.4 %. Min and max are exact.
// The zero value is an empty histogram. It is not safe for concurrent use:
// give each goroutine its own and Merge them.
type Histogram struct {
	counts   []uint64
	n        uint64
	min, max int64
}

// bucket returns the index of the bucket holding v (v ≥ 0). Values below
// 2^(subBits+1) have a bucket each; above, each power of two has 2^subBits.
func bucket(v int64) int {
	u := uint64(v)
	n := bits.Len64(u)
	if n <= subBits+1 {
		return int(u)
	}
	shift := n - (subBits + 1)
	return (shift+1)<<subBits + int(u>>shift) - 1<<subBits
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (lo, width int64) {
	if i < 2<<subBits {
		return int64(i), 1
	}
	shift := i>>subBits - 1
	return int64(1<<subBits+i&(1<<subBits-1)) << shift, 1 << shift
}

// Record adds one duration; a negative one counts as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	i := bucket(v)
	if i >= len(h.counts) {
		h.grow(i)
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
}

func (h *Histogram) grow(i int) {
	// Grow by whole powers of two, so that a run whose latencies creep up
	// copies the slice a few times at most.
	n := min(((i>>subBits)+2)<<subBits, maxBuckets)
	c := make([]uint64, n)
	copy(c, h.counts)
	h.counts = c
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.grow(len(o.counts) - 1)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// Count is the number of samples recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest sample, exactly; zero when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest sample, exactly; zero when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the q-quantile (0 ≤ q ≤ 1; 0.99 is p99): the smallest
// value v such that at least a fraction q of the samples is ≤ v, within the
// bucket precision, and never outside [Min, Max]. It is zero when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + (w-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
