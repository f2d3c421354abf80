package bench

import (
	"context"
	"sync"
	"time"
)

// sampler reads the sale's outbox backlog (admin API) and its rows in
// MySQL (when db is set) every every, from start until stop, for the
// Timeline. A reading that fails is left out. It keeps at most maxSeconds
// readings of each.
type sampler struct {
	adm   *admin
	db    *orderDB // nil: no MySQL
	sale  string
	every time.Duration

	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// Written by the sampling goroutine, read after stop.
	at     []time.Time
	outbox []int64 // -1: not read
	rows   []int64 // -1: not read
}

// startSampler starts sampling; stop ends it.
func startSampler(adm *admin, db *orderDB, sale string, every time.Duration) *sampler {
	s := &sampler{adm: adm, db: db, sale: sale, every: every, quit: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.loop()
	}()
	return s
}

func (s *sampler) loop() {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	s.read() // the start: an empty outbox, no rows
	for {
		select {
		case <-s.quit:
			s.read() // the end
			return
		case <-tick.C:
			s.read()
		}
	}
}

// read takes one reading of each gauge, each bounded, so that a slow
// admin API or MySQL delays the next one at most.
func (s *sampler) read() {
	if len(s.at) >= maxSeconds {
		return
	}
	now := time.Now()
	outbox, rows := int64(-1), int64(-1)
	// A reading may take up to 400 ms (COUNT(*) of a large sale's rows on a
	// busy MariaDB) however often they are taken: a slow one delays the
	// next rather than being lost.
	bound := max(s.every*2/5, 400*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	if v, err := s.adm.view(ctx, s.sale); err == nil {
		outbox = v.OutboxPending
	}
	cancel()
	if s.db != nil {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		if n, _, err := s.db.counts(ctx, s.sale); err == nil {
			rows = n
		}
		cancel()
	}
	s.at = append(s.at, now)
	s.outbox = append(s.outbox, outbox)
	s.rows = append(s.rows, rows)
}

// stop takes a last reading, ends the sampling and puts the readings,
// timed from start, into tl. It is safe to call on a nil sampler and
// more than once (only the first call does anything).
func (s *sampler) stop(start time.Time, tl *Timeline) {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		close(s.quit)
		s.wg.Wait()
		if tl != nil {
			s.fill(start, tl)
		}
	})
}

// fill puts the readings, timed from start, into tl.
func (s *sampler) fill(start time.Time, tl *Timeline) {
	for i, t := range s.at {
		at := max(t.Sub(start), 0)
		if s.outbox[i] >= 0 {
			tl.Outbox = append(tl.Outbox, Sample{At: at, Value: s.outbox[i]})
		}
		if s.rows[i] >= 0 {
			tl.Rows = append(tl.Rows, Sample{At: at, Value: s.rows[i]})
		}
	}
	if len(s.at) >= maxSeconds {
		tl.Truncated = true
	}
}
