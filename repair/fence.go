package repair

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
)

const (
	// witnessFresh is how recently a consumer's witness must have been
	// written to count: a consumer that wrote none for longer has stopped.
	witnessFresh = 5 * time.Second
	// witnessForget is when a witness is removed from the hash.
	witnessForget = time.Minute
)

// fence reports whether every order on its way to MySQL when the held sales
// were held has arrived, that is every message queued before t0, the
// moment the fence began (after the sales were held): every consumer on
// the orders queue has witnessed (Deps.Settled, written to the Witnesses
// hash by the repairer of its process) that what RabbitMQ sent it before
// t0 is settled, with no delivery gone back to the queue since t0 and the
// same number of consumers at the end. RabbitMQ hands out a queue's
// messages in the order they were queued: a busy consumer's witness is the
// publish time of a message it settled, so every message queued before
// that one has been handed out, and those handed to it are settled; an idle
// consumer has credit, so nothing waits in the queue while it waits. With
// no consumer at all the queue must hold no message. It blocks until then,
// or FenceWait (then false).
func (r *Repairer) fence(ctx context.Context) (bool, error) {
	look := func() (broker.Depth, error) {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
		d, err := r.d.Queue(cctx)
		if err != nil {
			return d, fmt.Errorf("repair: orders queue depth: %w", err)
		}
		return d, nil
	}
	t0 := time.Now()
	if err := r.witness(ctx); err != nil {
		return false, err
	}
	first, err := look()
	if err != nil {
		return false, err
	}
	if first.Consumers == 0 {
		if first.Ready > 0 {
			r.wait("sales held after a Redis restart wait for a consumer to drain the orders queue before their repair",
				zap.Int("ready", first.Ready))
			return false, nil
		}
		return true, nil
	}
	deadline := time.NewTimer(r.cfg.FenceWait)
	defer deadline.Stop()
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	for {
		ok, behind, err := r.witnessed(ctx, t0, first.Consumers)
		if err != nil {
			return false, err
		}
		if ok {
			last, err := look()
			if err != nil {
				return false, err
			}
			return last.Consumers == first.Consumers, nil
		}
		if behind < 0 {
			return false, nil // a delivery went back to the queue: begin again
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-deadline.C:
			r.wait("sales held after a Redis restart wait for the orders queue's consumers to settle what was queued before",
				zap.Int("consumers", first.Consumers), zap.Int("behind", behind), zap.Int("ready", first.Ready))
			return false, nil
		case <-tick.C:
		}
		if err := r.witness(ctx); err != nil {
			return false, err
		}
	}
}

func (r *Repairer) wait(msg string, f ...zap.Field) {
	if time.Since(r.waiting) >= 10*time.Second {
		r.waiting = time.Now()
		r.d.Log.Info(msg, f...)
	}
}

// witness writes this process's consumer's witness: "through,failed,at",
// Unix ms.
func (r *Repairer) witness(ctx context.Context) error {
	if r.d.Settled == nil {
		return nil
	}
	now := time.Now()
	through, failed := r.d.Settled(now)
	v := strconv.FormatInt(ms(through), 10) + "," + strconv.FormatInt(ms(failed), 10) + "," + strconv.FormatInt(now.UnixMilli(), 10)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := r.d.Redis.HSet(cctx, r.d.Keys.Witnesses(), r.d.Name, v).Err(); err != nil {
		return fmt.Errorf("repair: write the witness of %s: %w", r.d.Name, err)
	}
	return nil
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// witnessed reads the witnesses: ok when at least consumers of them are
// fresh and each has settled through t0; behind counts the fresh ones not
// there yet, or is -1 when one had deliveries go back to the queue since
// t0. Witnesses long silent are removed.
func (r *Repairer) witnessed(ctx context.Context, t0 time.Time, consumers int) (ok bool, behind int, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	all, err := r.d.Redis.HGetAll(cctx, r.d.Keys.Witnesses()).Result()
	if err != nil {
		return false, 0, fmt.Errorf("repair: read the witnesses: %w", err)
	}
	now := time.Now()
	fresh := 0
	var gone []string
	for name, v := range all {
		through, failed, at, perr := parseWitness(v)
		if perr != nil || now.Sub(at) > witnessForget {
			gone = append(gone, name)
			continue
		}
		if now.Sub(at) > witnessFresh {
			continue
		}
		if !failed.IsZero() && !failed.Before(t0) {
			return false, -1, nil
		}
		if through.IsZero() {
			// Not consuming now (no session): RabbitMQ counts it out
			// too, and what it held went back to the queue (failed).
			continue
		}
		fresh++
		if through.Before(t0) {
			behind++
		}
	}
	if len(gone) > 0 {
		_ = r.d.Redis.HDel(cctx, r.d.Keys.Witnesses(), gone...).Err() // tidying; the next round tries again
	}
	return behind == 0 && fresh >= consumers, behind, nil
}

func parseWitness(v string) (through, failed, at time.Time, err error) {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return through, failed, at, fmt.Errorf("witness %q", v)
	}
	var n [3]int64
	for i := range f {
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return through, failed, at, fmt.Errorf("witness %q", v)
		}
	}
	if n[0] > 0 {
		through = time.UnixMilli(n[0])
	}
	if n[1] > 0 {
		failed = time.UnixMilli(n[1])
	}
	return through, failed, time.UnixMilli(n[2]), nil
}
