package scripts

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Watch's pace and bounds.
const (
	// WatchEvery is how often Watch reads the primaries' replication ids.
	WatchEvery = 500 * time.Millisecond
	// passTimeout bounds one hold pass of Watch: about one round trip per
	// holdChunk sales, so minutes would be millions of sales.
	passTimeout = 2 * time.Minute
)

// Stale asks Watch for a hold pass soon: a call met NOSCRIPT or a held
// sale. It never blocks; asks that come while one is pending are one.
func (l *Loader) Stale() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *Loader) setPassed(ids []string) {
	l.passMu.Lock()
	l.passed = ids
	l.passMu.Unlock()
}

func (l *Loader) passedUnder(ids []string) bool {
	l.passMu.Lock()
	defer l.passMu.Unlock()
	return slices.Equal(l.passed, ids)
}

// Watch runs the hold pass in the background whenever a primary's history
// changed since the last pass (a restart, or a replica promoted by a
// failover: a new replication id), and when Stale asked for one, so that
// package repair learns of every sale such a Redis may hold without its
// last writes, also of sales nobody buys. The scripts hold a sale they
// touch by themselves (the hold script), so a buy never waits for a pass
// (DESIGN.md, invariant 14): the pass only lists the held sales, and holds
// the untouched ones. Watch reads the replication ids every `every`
// (WatchEvery when 0) and does nothing before the first Load. A failed pass
// is logged and tried again at the next tick. It blocks until ctx is done
// and returns nil then.
func (l *Loader) Watch(ctx context.Context, every time.Duration, log *zap.Logger) error {
	if every <= 0 {
		every = WatchEvery
	}
	if log == nil {
		log = zap.NewNop()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	asked := false
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-l.kick:
			asked = true
		}
		if l.cur.Load() == nil {
			continue // Load runs the first pass
		}
		ids, err := l.histories(ctx)
		if err != nil {
			continue // a primary down: its replica's promotion is a new id, seen at a later tick
		}
		if !asked && l.passedUnder(ids) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, passTimeout)
		n, err := l.HoldPass(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !failing {
				log.Warn("hold pass after a change of Redis primary failed; trying again", zap.Error(err))
			}
			failing = true
			continue
		}
		if failing || n > 0 || !l.passedUnder(ids) {
			log.Info("hold pass ran", zap.Int("held", n), zap.Strings("histories", ids))
		}
		failing, asked = false, false
		l.setPassed(ids)
	}
}
