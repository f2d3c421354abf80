package nemesis

import (
	"sync"
	"time"
)

// Record is one request of a run as its client saw it: what it asked, when
// (Input.Call and Input.Return), and what came back. A request without a
// definite answer (a timeout, a connection error, a 5xx) is Ambiguous: it
// may or may not have happened, and the checker decides with what the
// run's end found.
type Record struct {
	Sale      string
	Client    int
	In        Input
	Out       Output
	Ambiguous bool
	// Err is the transport's error of an ambiguous request, for the
	// report.
	Err string
}

// History is every request of a run, safe for concurrent use. Its clock
// starts at NewHistory.
type History struct {
	start time.Time
	mu    sync.Mutex
	recs  []Record
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock: nanoseconds since it started.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// At is the history's time of t.
func (h *History) At(t time.Time) int64 { return int64(t.Sub(h.start)) }

// Add records r.
func (h *History) Add(r Record) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
}

// BySale returns the records of each sale, in the order they were added.
func (h *History) BySale() map[string][]Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]Record{}
	for _, r := range h.recs {
		out[r.Sale] = append(out[r.Sale], r)
	}
	return out
}

// Len is the number of records so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}
