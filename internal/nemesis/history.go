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

// Probe is a read of a sale's event number (meta seq) in Redis, made by
// the test between Call and Return: every change numbered up to Seq had
// happened by Return. It bounds the changes whose answer was lost, and
// the expiries, which nobody is answered.
type Probe struct {
	Sale         string
	Seq          int64
	Call, Return int64
}

// History is every request of a run, safe for concurrent use. Its clock
// starts at NewHistory.
type History struct {
	start  time.Time
	mu     sync.Mutex
	recs   []Record
	probes map[string][]Probe
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now(), probes: map[string][]Probe{}} }

// AddProbe records p.
func (h *History) AddProbe(p Probe) {
	h.mu.Lock()
	h.probes[p.Sale] = append(h.probes[p.Sale], p)
	h.mu.Unlock()
}

// Probes returns the probes of sale.
func (h *History) Probes(sale string) []Probe {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Probe(nil), h.probes[sale]...)
}

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
