package sale

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/scripts"
)

// durabilityEvery is how often zero-loss mode asks every primary again.
const durabilityEvery = time.Second

// durability is zero-loss mode (redis.zero_loss): a 202 only after the
// reservation is on disk. Redis 7.0 has no WAITAOF; with appendonly yes and
// appendfsync always it writes and fsyncs the AOF before it sends the
// replies of one event-loop turn, so a batched script call shares one fsync
// among its buyers. Whether that holds is a setting of each primary, which
// an operator (or a failover to a differently configured replica) can
// change at any time: durability asks every primary with CONFIG GET at
// start and once a second, and the gateway sells only while the last
// answer of every one was yes and always. A primary that cannot be asked,
// or that refuses CONFIG (managed Redis, an ACL without +config|get),
// counts as not durable: the mode never sells on a guess.
//
// Created only when the mode is on; the Store holds nil otherwise, so the
// default costs one nil check per buy. ok is safe for concurrent use; run
// is the one goroutine that writes.
type durability struct {
	rdb     redis.UniversalClient
	log     *zap.Logger
	timeout time.Duration
	state   atomic.Pointer[durableState]
}

// durableState is the verdict of one round of CONFIG GETs.
type durableState struct {
	ok bool
	// reason says why not, without addresses or Redis's words (it is
	// /readyz's public answer, and a change of it is what gets logged).
	reason string
	// detail names the primary and what it said, for the log.
	detail string
	// refused: a primary refuses CONFIG GET; said once, at error level.
	refused bool
}

var notYetChecked = &durableState{reason: "zero-loss mode: Redis persistence not verified yet"}

func newDurability(rdb redis.UniversalClient, log *zap.Logger, timeout time.Duration, set *metrics.Set) *durability {
	d := &durability{rdb: rdb, log: log.Named("durability"), timeout: timeout}
	d.state.Store(notYetChecked)
	set.NewGauge("flashgate_redis_durable", func() float64 {
		if d.ok() {
			return 1
		}
		return 0
	})
	return d
}

// ok reports whether the last round found every primary durable.
func (d *durability) ok() bool { return d.state.Load().ok }

// notReady is why the last round did not find every primary durable, or
// ok false when it did.
func (d *durability) notReady() (reason string, ok bool) {
	st := d.state.Load()
	return st.reason, !st.ok
}

// run checks at once, then every durabilityEvery, until ctx is done. It
// blocks; each round is bounded by the Redis timeout.
func (d *durability) run(ctx context.Context) {
	t := time.NewTicker(durabilityEvery)
	defer t.Stop()
	for {
		d.update(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// update runs one round and logs a change of verdict (of its reason, not of
// its detail: a Redis that stays down is said once, not every second).
func (d *durability) update(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	st := d.check(cctx)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the round was cut short, not answered
	}
	prev := d.state.Swap(st)
	if prev.reason == st.reason {
		return
	}
	switch {
	case st.ok:
		d.log.Info("zero-loss mode: every Redis primary has appendonly yes and appendfsync always; buys are accepted")
	case st.refused:
		d.log.Error("zero-loss mode: Redis refuses CONFIG GET, so the gateway cannot verify that it fsyncs before it replies, "+
			"and refuses every buy (503) and /readyz. A managed Redis that hides CONFIG cannot run zero-loss mode: "+
			"grant +config|get to flashgate's user, or set redis.zero_loss false (FLASHGATE_REDIS_ZERO_LOSS) and accept "+
			"the loss window of its persistence (docs/operations.md, Durability)",
			zap.String("detail", st.detail))
	default:
		d.log.Warn("zero-loss mode: buys refused (503) until every Redis primary has appendonly yes and appendfsync always",
			zap.String("reason", st.reason), zap.String("detail", st.detail))
	}
}

// check asks every primary for its AOF settings. "append*" rather than
// two names: CONFIG GET takes one pattern before Redis 7.
func (d *durability) check(ctx context.Context) *durableState {
	var (
		mu  sync.Mutex
		bad []nodeVerdict
	)
	err := scripts.ForEachPrimary(ctx, d.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		v := nodeDurable(addr, node.ConfigGet(ctx, "append*"))
		if !v.ok {
			mu.Lock()
			bad = append(bad, v)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return &durableState{reason: "zero-loss mode: cannot list the Redis primaries", detail: err.Error()}
	}
	if len(bad) == 0 {
		return &durableState{ok: true}
	}
	// The same primary first every round, so that the reason only
	// changes when the facts do.
	slices.SortFunc(bad, func(a, b nodeVerdict) int { return strings.Compare(a.addr, b.addr) })
	details := make([]string, len(bad))
	for i, v := range bad {
		details[i] = v.addr + ": " + v.detail
	}
	return &durableState{reason: bad[0].reason, detail: strings.Join(details, "; "), refused: bad[0].refused}
}

// nodeVerdict is what one primary's answer means.
type nodeVerdict struct {
	addr, reason, detail string
	ok, refused          bool
}

func nodeDurable(addr string, cmd *redis.MapStringStringCmd) nodeVerdict {
	v := nodeVerdict{addr: addr}
	m, err := cmd.Result()
	switch {
	case err != nil && (redis.IsPermissionError(err) || redis.HasErrorPrefix(err, "unknown command")):
		v.reason, v.detail, v.refused = "zero-loss mode: a Redis primary refuses CONFIG GET, so its fsync policy cannot be verified", err.Error(), true
	case err != nil:
		v.reason, v.detail = "zero-loss mode: a Redis primary cannot be asked for its fsync policy", err.Error()
	case m["appendonly"] == "" || m["appendfsync"] == "":
		// Some managed services answer CONFIG GET with a filtered list.
		v.reason, v.detail, v.refused = "zero-loss mode: a Redis primary does not show appendonly and appendfsync, so its fsync policy cannot be verified",
			"CONFIG GET append* answered without them", true
	case m["appendonly"] != "yes":
		v.reason, v.detail = "zero-loss mode: a Redis primary has appendonly "+m["appendonly"]+"; it needs yes", "appendonly "+m["appendonly"]
	case m["appendfsync"] != "always":
		v.reason, v.detail = "zero-loss mode: a Redis primary has appendfsync "+m["appendfsync"]+"; it needs always", "appendfsync "+m["appendfsync"]
	default:
		v.ok = true
	}
	return v
}
