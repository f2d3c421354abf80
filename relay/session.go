package relay

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/retry"
)

// job is one timed job of the session loop: when it is next due, and the
// backoff that spaces it out while it fails. The loop sleeps until the
// earliest job (or a confirm) instead of polling.
type job struct {
	at time.Time
	bo retry.Backoff
}

func (j *job) due(now time.Time) bool { return !now.Before(j.at) }

// done schedules the next run d after now (0: at once) and starts the
// backoff over.
func (j *job) done(now time.Time, d time.Duration) {
	j.at = now.Add(d)
	j.bo.Reset()
}

// failed schedules the next run after a backoff delay.
func (j *job) failed(now time.Time) { j.at = now.Add(j.bo.Next()) }

// serve relays on one RabbitMQ session until it breaks or ctx ends; it is
// the serve function of the relay's broker.Loop. When ctx ends it drains:
// it waits (at most r.drain) for the confirms of what is in flight and
// removes the confirmed entries.
func (r *Relay) serve(ctx context.Context, s *broker.Session) error {
	if err := r.pub.attach(s); err != nil {
		return err
	}
	defer r.pub.detach()
	// A publish blocked in a write (RabbitMQ blocks publishers under a
	// memory or disk alarm) cannot see ctx: close the connection under it
	// once the drain deadline has passed.
	defer broker.CloseAfter(ctx, r.drain+closeGrace, s)()

	for {
		if err := r.pub.settleReady(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return r.drainSession(ctx)
		}
		now := time.Now()
		r.chores(ctx, now, true)
		n, err := r.pub.sendDue(now)
		if err != nil {
			return err
		}
		worked := n > 0
		if r.ob.free() > 0 && r.read.due(now) && r.readDue(now) {
			batch, err := r.ob.read(ctx, now)
			switch {
			case err != nil:
				r.read.failed(now)
				r.log.Warn("cannot read the outbox", zap.Error(err))
			case len(batch) == 0:
				r.read.done(now, 0) // the outbox schedules the next (nextRead)
			default:
				// The next read lingers, unless this one left entries
				// behind: at a sale's pace, orders gather meanwhile, and
				// one read and one message carry them all (RabbitMQ's
				// cost is mostly per message).
				wait := r.linger
				if r.ob.full {
					wait = 0
				}
				r.read.done(now, wait)
				if err := r.pub.sendAll(batch); err != nil {
					return err
				}
				worked = true
			}
		}
		if worked {
			continue
		}
		if err := r.wait(ctx, s); err != nil {
			return err
		}
	}
}

// readDue reports whether the outbox has sales to read at now.
func (r *Relay) readDue(now time.Time) bool {
	at, ok := r.ob.nextRead()
	return ok && !now.Before(at)
}

// chores runs the timed jobs of the outbox that are due, connected or not:
// taking the notices of writes (Wrote), the look at the active outboxes
// and the next step of the scan of the registry (which also keep Stats
// and the metrics current while RabbitMQ is away, when it matters), the
// removal of confirmed entries and, while a session is open to publish
// them, the claim of entries other relays left pending.
func (r *Relay) chores(ctx context.Context, now time.Time, connected bool) {
	r.noted = r.notes.take(r.noted[:0])
	for _, sale := range r.noted {
		r.ss.noticed(sale, now)
	}
	known := false // r.last is to be made anew
	if r.look.due(now) {
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		err := r.lk.look(cctx, r.ss, now)
		cancel()
		if r.lookOK = err == nil; r.lookOK {
			r.ss.forget(now)
		} else if ctx.Err() == nil {
			r.log.Warn("cannot look at the outboxes", zap.Error(err))
		}
		r.look.done(now, refreshEvery)
		known = true
	}
	if r.scan.due(now) {
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		err := r.sc.step(cctx, r.ss, now)
		cancel()
		if r.scanOK = err == nil; r.scanOK {
			r.scan.done(now, r.sc.stepEvery())
		} else {
			r.scan.failed(now)
			if ctx.Err() == nil {
				r.log.Warn("cannot scan the sales", zap.Error(err))
			}
		}
		known = true
	}
	if known {
		r.last.Store(r.ss.view(r.sc.walks.Load() > 0 && r.lookOK && r.scanOK))
	}
	if r.ob.unremoved() > 0 && r.remove.due(now) {
		r.removeConfirmed(ctx, false)
	}
	if connected && r.claim.due(now) {
		r.pub.enqueue(r.ob.claim(ctx))
		r.claim.done(now, r.claimEvery)
	}
}

// nextChore returns when the earliest timed job is due: those of chores
// and, while connected, the next read and the next retry.
func (r *Relay) nextChore(connected bool) time.Time {
	next := earlier(r.look.at, r.scan.at)
	if r.ob.unremoved() > 0 {
		next = earlier(next, r.remove.at)
	}
	if !connected {
		return next
	}
	next = earlier(next, r.claim.at)
	if at, ok := r.ob.nextRead(); ok && r.ob.free() > 0 {
		next = earlier(next, later(at, r.read.at))
	}
	if at, ok := r.pub.nextRetry(); ok {
		next = earlier(next, at)
	}
	return next
}

// removeConfirmed removes the confirmed entries from the outbox and, when it
// fails, schedules the next try after a backoff; final says this is the
// last try before the relay stops.
func (r *Relay) removeConfirmed(ctx context.Context, final bool) {
	if final {
		// Run's ctx has ended: give the removal a Redis call of its own.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCall)
		defer cancel()
		ctx = fctx
	}
	now := time.Now()
	if err := r.ob.remove(ctx); err != nil {
		r.remove.failed(now)
		if final {
			r.log.Warn("cannot remove confirmed entries from the outbox; they will be published again (duplicates are harmless)", zap.Error(err))
		} else {
			r.log.Warn("cannot remove confirmed entries from the outbox; retrying", zap.Error(err))
		}
		return
	}
	r.remove.done(now, 0)
}

// wait blocks until a confirm arrives, a notice of a write (Wrote), the
// session ends, ctx ends or the next timed job is due.
func (r *Relay) wait(ctx context.Context, s *broker.Session) error {
	d := time.Until(r.nextChore(true))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case c, ok := <-r.pub.confirms:
		return r.pub.settle(c, ok)
	case <-s.Done():
		return r.pub.sessionErr()
	case <-r.notes.wake:
	case <-ctx.Done():
	case <-t.C:
	}
	return nil
}

// drainSession waits for the confirms of what is in flight, bounded by
// r.drain, then removes the confirmed entries from the outbox.
func (r *Relay) drainSession(ctx context.Context) error {
	deadline := time.NewTimer(r.drain)
	defer deadline.Stop()
	left, err := r.pub.drain(deadline.C)
	if err == nil && left > 0 {
		r.log.Warn("shutdown: confirms still outstanding at the drain deadline; their entries stay pending for another relay",
			zap.Int("in_flight", left), zap.Duration("drain", r.drain))
	}
	r.removeConfirmed(ctx, true)
	return err
}

// pause is the relay's broker.Loop Pause: it waits d between connection
// attempts, or until ctx ends, and meanwhile removes the entries confirmed
// before the connection was lost and keeps what it knows of the outboxes
// current. Notices wait for the next chores: nothing can be published.
func (r *Relay) pause(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for {
		now := time.Now()
		r.chores(ctx, now, false)
		if !now.Before(end) {
			return
		}
		wake := earlier(end, r.nextChore(false))
		if !retry.Sleep(ctx, max(time.Until(wake), time.Millisecond)) {
			return
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
