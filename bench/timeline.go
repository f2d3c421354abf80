package bench

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// maxSeconds bounds a timeline: seconds of load (and samples) past it are
// not kept, so that a long run costs the same memory as an hour's.
const maxSeconds = 3600

// Timeline is a run second by second: what the buyers were told and how
// fast (Seconds, from the load), and the outbox backlog and rows in MySQL
// read every Options.SampleEvery (a second by default) from the load's
// start to the end of the MySQL wait (Outbox, Rows; empty when not read).
// It is in the Report only when Options.Timeline is set.
type Timeline struct {
	Seconds   []Second `json:"seconds"`
	Outbox    []Sample `json:"outbox,omitempty"`
	Rows      []Sample `json:"mysql_rows,omitempty"`
	Truncated bool     `json:"truncated,omitempty"` // longer than an hour: the rest was not kept
}

// Second is one second of the load, by the time each answer came:
// accepted (202), refused (any other answer; SoldOut of them were
// sold_out) and failed (no answer), and the latency of all of them, within
// 1/16 of the true value.
type Second struct {
	At       int           `json:"at_s"` // whole seconds since the load's start
	Accepted int64         `json:"accepted"`
	Refused  int64         `json:"refused"`
	SoldOut  int64         `json:"sold_out"` // of Refused
	Failed   int64         `json:"failed"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
}

// Sample is one reading of a gauge, At after the load's start.
type Sample struct {
	At    time.Duration `json:"at_ns"`
	Value int64         `json:"value"`
}

// secBits sets the precision of a second's latency histogram: coarser
// than Histogram's (a picture needs no more), so that one second is 2 KiB
// whatever the number of its samples.
const secBits = 3

// secBuckets covers every int64 at secBits.
const secBuckets = (64 - secBits) << secBits

// second is the load's counts in one second, of one worker or merged.
type second struct {
	accepted, refused, soldOut, failed int64
	lat                                [secBuckets]uint32
}

func secBucket(v int64) int {
	u := uint64(v)
	n := bits.Len64(u)
	if n <= secBits+1 {
		return int(u)
	}
	shift := n - (secBits + 1)
	return (shift+1)<<secBits + int(u>>shift) - 1<<secBits
}

func secBucketMid(i int) int64 {
	if i < 2<<secBits {
		return int64(i)
	}
	shift := i>>secBits - 1
	lo := int64(1<<secBits+i&(1<<secBits-1)) << shift
	return lo + (int64(1)<<shift-1)/2
}

func (s *second) record(o int, d time.Duration) {
	switch o {
	case oAccepted:
		s.accepted++
	case oError:
		s.failed++
	case oSoldOut:
		s.refused++
		s.soldOut++
	default:
		s.refused++
	}
	s.lat[secBucket(max(int64(d), 0))]++
}

func (s *second) add(o *second) {
	s.accepted += o.accepted
	s.refused += o.refused
	s.soldOut += o.soldOut
	s.failed += o.failed
	for i, c := range o.lat {
		s.lat[i] += c
	}
}

func (s *second) quantile(q float64) time.Duration {
	n := s.accepted + s.refused + s.failed
	if n == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for i, c := range s.lat {
		seen += int64(c)
		if seen >= rank {
			return time.Duration(secBucketMid(i))
		}
	}
	return 0
}

// timeline gathers the workers' seconds. A worker counts its current
// second alone and hands it over when the next one begins (see tally), so
// the lock is taken once a second per worker, never per request.
type timeline struct {
	mu        sync.Mutex
	secs      []*second // by second since the start; nil: nothing in it
	truncated bool
}

func (t *timeline) merge(at int, s *second) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at >= maxSeconds {
		t.truncated = true
		return
	}
	for len(t.secs) <= at {
		t.secs = append(t.secs, nil)
	}
	if t.secs[at] == nil {
		t.secs[at] = &second{}
	}
	t.secs[at].add(s)
}

// seconds returns the series, one entry per second from 0 to the last
// with an answer (seconds without one are zeros).
func (t *timeline) seconds() []Second {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Second, len(t.secs))
	for i, s := range t.secs {
		out[i].At = i
		if s != nil {
			out[i].Accepted, out[i].Refused, out[i].SoldOut, out[i].Failed = s.accepted, s.refused, s.soldOut, s.failed
			out[i].P50, out[i].P99 = s.quantile(0.50), s.quantile(0.99)
		}
	}
	return out
}

// tally is one worker's current second.
type tally struct {
	t    *timeline
	at   int
	cur  second
	used bool
}

// record counts an answer of outcome o that came since after the start
// and took d.
func (w *tally) record(since time.Duration, o int, d time.Duration) {
	at := int(since / time.Second)
	if w.used && at != w.at {
		w.flush()
	}
	w.at, w.used = at, true
	w.cur.record(o, d)
}

// flush hands the current second to the timeline.
func (w *tally) flush() {
	if !w.used {
		return
	}
	w.t.merge(w.at, &w.cur)
	w.cur, w.used = second{}, false
}
