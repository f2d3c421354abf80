package bench

import (
	"container/heap"
	"sync"
	"time"
)

// roomSched hands the buyers of a waiting-room run to a fixed pool of
// workers at the time each asked to be served next: a poll at the
// poll_after_ms the gateway said, a retry after a 429. A buyer waiting
// for its time is an entry of a min-heap, not a goroutine, so a crowd of
// any size costs the workers and one dispatcher. Joins are handed out in
// buyer order when nothing is due, the late ones (from late on) not
// before lateAt.
type roomSched struct {
	start  time.Time
	ready  chan int32 // unbuffered: the dispatcher waits for a free worker
	wake   chan struct{}
	users  int
	late   int   // buyers from this index join at lateAt or after
	lateAt int64 // ns since start

	mu   sync.Mutex
	h    dueHeap
	seq  uint64
	join int // the next buyer to join
}

// due is one buyer's next turn.
type due struct {
	at    int64 // ns since start
	seq   uint64
	buyer int32
}

// dueHeap orders turns by time, then by when they were asked for.
type dueHeap []due

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newRoomSched(start time.Time, users, late int, lateAt int64) *roomSched {
	return &roomSched{start: start, ready: make(chan int32), wake: make(chan struct{}, 1),
		users: users, late: late, lateAt: lateAt}
}

// at asks for buyer's next turn at t (ns since start). It does not block;
// it is safe for concurrent use.
func (s *roomSched) at(buyer int32, t int64) {
	s.mu.Lock()
	s.seq++
	heap.Push(&s.h, due{at: t, seq: s.seq, buyer: buyer})
	first := s.h[0].seq == s.seq
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// next returns the buyer whose turn it is, or how long until one's is;
// ok false and wait 0: no turn is left at all.
func (s *roomSched) next(now int64) (buyer int32, wait time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.h) > 0 && s.h[0].at <= now {
		return heap.Pop(&s.h).(due).buyer, 0, true
	}
	if s.join < s.users && (s.join < s.late || now >= s.lateAt) {
		s.join++
		return int32(s.join - 1), 0, true
	}
	wait = -1
	if len(s.h) > 0 {
		wait = time.Duration(s.h[0].at - now)
	}
	if s.join < s.users && (wait < 0 || time.Duration(s.lateAt-now) < wait) {
		wait = time.Duration(s.lateAt - now)
	}
	if wait < 0 {
		// Nothing due and nothing to join: a turn can only come from a
		// worker busy with a buyer now, which wakes the dispatcher.
		return 0, time.Hour, false
	}
	return 0, wait, false
}

// run hands out turns on ready until stop closes. It blocks; the owner
// waits for it.
func (s *roomSched) run(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		b, wait, ok := s.next(int64(time.Since(s.start)))
		if ok {
			select {
			case s.ready <- b:
			case <-stop:
				return
			}
			continue
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-s.wake:
		case <-stop:
			return
		}
	}
}
