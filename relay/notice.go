package relay

import "sync"

// notices are the sales whose outboxes this process wrote since the
// session loop last looked: a set, so that a thousand writes to one sale
// are one notice, and a wake-up of capacity one, so that a writer never
// blocks and the loop wakes once however many notices came meanwhile.
type notices struct {
	mu   sync.Mutex
	set  map[string]struct{}
	wake chan struct{}
}

func newNotices() *notices {
	return &notices{set: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

func (n *notices) add(sale string) {
	n.mu.Lock()
	n.set[sale] = struct{}{}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// take appends the sales noticed since the last take to into, and forgets
// them.
func (n *notices) take(into []string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.set {
		into = append(into, s)
	}
	clear(n.set) // keeps its buckets: no allocation in the steady state
	return into
}

// Wrote tells the relay that this process has just written to the outbox
// of sale (a sale id, or a bucket's "SALE#i.n", as in the registry and
// scripts.Keys.Outbox): the gateway calls it after each script call that
// added an entry (an accepted reservation, a pay or cancel, an expiry
// sweep). The relay reads that outbox at once (and again while its reads
// come back full), and reads it again only on the next notice: the notices
// are what the relay waits on, not a poll. Without notices (a lost one, a
// write of another process) the relay still finds entries through its scan
// of the registry, but only within Deps.ScanEvery.
//
// It never blocks and does no I/O: it records the sale and wakes Run's
// loop. It is safe for concurrent use, before Run, while Run is not
// running (the notices wait for it) and on a nil Relay (a process without
// a relay), where it does nothing. An empty id is ignored.
func (r *Relay) Wrote(sale string) {
	if r == nil || sale == "" {
		return
	}
	r.notes.add(sale)
}
