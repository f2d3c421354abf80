package main

// Replicated mode's cost (docs/cluster.md "Replicated mode",
// redis.min_replicas): the buy path, batched as in production (a gateway
// binary, its per-sale batcher, one script call for many buyers), against a
// primary and one replica of the suite's own, once with
// FLASHGATE_REDIS_MIN_REPLICAS=0 (the default: the 202 is sent once the
// primary has the order) and once with 1 (the 202 waits until the replica
// holds it: each script call is followed by WAIT 1 on its connection, one
// wait for the call's whole batch). Same server, client and sale sizes, in
// the same run; rounds alternate the order of the two modes, so that a
// change in the machine's load falls on both.
//
// The servers are the suite's own, as zero-loss mode's is (zeroloss.go):
// the replica's link is what is measured, and no one else's writes travel
// on it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// Rows of the replicated group; the replicated row is compared with the
// default one.
const (
	groupReplicated = "replicated mode, reserve path on a primary and replica of its own"
	rowReplDefault  = "min_replicas 0 (default): orders/s"
	rowReplOn       = "min_replicas 1 (replicated, WAIT 1 after each script call): orders/s"
	// targetReplicated is the orders/s replicated mode keeps: the wait is
	// shared by a script call's batch, so it may cost latency, not much
	// throughput.
	targetReplicated = 0.8
)

// replicaWait bounds the replica's first synchronisation and each catch-up
// between runs.
const replicaWait = 60 * time.Second

// replRun is one measurement of one mode.
type replRun struct {
	replicas     int     // FLASHGATE_REDIS_MIN_REPLICAS
	rate         float64 // accepted orders/s
	perCall      float64 // accepted orders per EVALSHA
	waitsPerCall float64 // WAIT calls per EVALSHA
	unconfirmed  int64   // 503 unconfirmed answers
	p50, p99     time.Duration
}

// replFigures are the medians of one mode's runs.
type replFigures struct {
	runs          []replRun
	rate, perCall float64
	p50, p99      time.Duration
}

// replFiguresOf sums up the runs of one mode: the median of each figure.
func replFiguresOf(runs []replRun, replicas int) replFigures {
	f := replFigures{}
	var rate, perCall, p50, p99 []float64
	for _, r := range runs {
		if r.replicas != replicas {
			continue
		}
		f.runs = append(f.runs, r)
		rate, perCall = append(rate, r.rate), append(perCall, r.perCall)
		p50, p99 = append(p50, float64(r.p50)), append(p99, float64(r.p99))
	}
	f.rate, f.perCall = medianOf(rate), medianOf(perCall)
	f.p50, f.p99 = time.Duration(medianOf(p50)), time.Duration(medianOf(p99))
	return f
}

// measureReplicated is the replicated-mode part: a primary and a replica of
// its own, then -replicated-runs rounds of both modes, then two rows of
// the main table and the section.
func (s *suite) measureReplicated(ctx context.Context) error {
	if s.o.replicatedRuns < 1 {
		return errors.New("-replicated-runs must be at least 1")
	}
	started := time.Now()
	dir, err := os.MkdirTemp(".run/bench", "replicated-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// As zero-loss mode's Redis (AOF everysec, no RDB, no automatic AOF
	// rewrite), and a full synchronisation sent at once, from memory.
	common := slices.Concat(aofEverysec, disklessSync)
	primary, err := s.startRedis(ctx, localstack.RedisOptions{Dir: filepath.Join(dir, "primary"), Args: common})
	if err != nil {
		return fmt.Errorf("the suite's primary: %w", err)
	}
	defer primary.Stop()
	replica, err := s.startRedis(ctx, localstack.RedisOptions{Dir: filepath.Join(dir, "replica"),
		Args: append(common, "--replicaof", "127.0.0.1", portOf(primary.Addr))})
	if err != nil {
		return fmt.Errorf("the suite's replica: %w", err)
	}
	defer replica.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr})
	defer rdb.Close()
	if err := waitReplicaOnline(ctx, rdb, replica.Addr); err != nil {
		return err
	}

	var runs []replRun
	for round := range s.o.replicatedRuns {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, n := range order {
			r, err := s.replicatedRun(ctx, rdb, primary.Addr, replica.Addr, n)
			if err != nil {
				return fmt.Errorf("replicated mode, min_replicas %d, round %d: %w", n, round+1, err)
			}
			fmt.Fprintf(os.Stderr, "replicated: min_replicas %d: %8.0f orders/s, p50 %v p99 %v, %.1f orders per script call, %.2f WAIT per call\n",
				n, r.rate, r.p50, r.p99, r.perCall, r.waitsPerCall)
			runs = append(runs, r)
		}
	}
	def, on := replFiguresOf(runs, 0), replFiguresOf(runs, 1)
	base := s.add(row{group: groupReplicated, name: rowReplDefault, value: def.rate, unit: "orders/s", p50: def.p50, p99: def.p99})
	s.add(row{group: groupReplicated, name: rowReplOn, value: on.rate, unit: "orders/s", p50: on.p50, p99: on.p99,
		baseline: base, target: targetReplicated})
	s.sections.replicated = replicatedSection(def, on, fsType(dir), s.o.conns, s.o.dur, time.Since(started))
	fmt.Fprint(os.Stderr, "\n"+s.sections.replicated)
	return nil
}

// replicatedRun empties the primary, waits until the replica has caught up
// and is online, starts a gateway with min_replicas n (its /readyz is 200
// only once the primary has the replicas it needs) and measures one run of
// buys.
func (s *suite) replicatedRun(ctx context.Context, rdb *redis.Client, primary, replica string, n int) (replRun, error) {
	r := replRun{replicas: n}
	// The last run's orders (the relay is idle: its outbox only grew)
	// would otherwise stay on both servers and weigh on the next run.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return r, fmt.Errorf("FLUSHALL: %w", err)
	}
	if err := waitReplicaOnline(ctx, rdb, replica); err != nil {
		return r, err
	}
	g, stop, err := s.ownRedisGateway(ctx, "replicated-gateway-"+strconv.Itoa(n), "repl", primary,
		"FLASHGATE_REDIS_MIN_REPLICAS="+strconv.Itoa(n))
	if err != nil {
		return r, err
	}
	defer stop()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return r, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	rep, err := bench.Run(ctx, bench.Options{URL: g.public, AdminURL: g.admin, NoMySQL: true, NoKeys: true,
		Stock: 1_000_000_000, Users: 1_000_000_000, Conns: s.o.conns, Duration: s.o.dur})
	if err != nil {
		return r, err
	}
	// Every answer must be a 202: in replicated mode a few 503s
	// unconfirmed (the replica later than redis.timeout on this shared
	// machine) are counted and allowed, up to 1%; anything else would make
	// this a measurement of something else.
	var accepted int64
	for _, oc := range rep.Outcomes {
		switch {
		case oc.Status == "accepted":
			accepted = oc.Count
		case oc.Status == "unconfirmed" && n > 0:
			r.unconfirmed = oc.Count
		case oc.Count > 0:
			return r, fmt.Errorf("%d answers %s (want only accepted)", oc.Count, oc.Status)
		}
	}
	if accepted == 0 {
		return r, errors.New("no order accepted")
	}
	if r.unconfirmed*100 > rep.Requests {
		return r, fmt.Errorf("%d of %d answers unconfirmed (over 1%%)", r.unconfirmed, rep.Requests)
	}
	if r.unconfirmed == 0 && rep.Err() != nil {
		return r, fmt.Errorf("invariant check failed: %w", rep.Err())
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return r, fmt.Errorf("INFO commandstats: %w", err)
	}
	stats := parseCommandStats(info, accepted) // per order
	r.rate = float64(accepted) / rep.Elapsed.Seconds()
	r.p50, r.p99 = rep.All.P50, rep.All.P99
	if c := stats["EVALSHA"].calls; c > 0 {
		r.perCall = 1 / c
		r.waitsPerCall = stats["WAIT"].calls / c
	}
	if n > 0 && r.waitsPerCall < 0.9 {
		return r, fmt.Errorf("%.2f WAIT per script call in replicated mode: is min_replicas in effect?", r.waitsPerCall)
	}
	return r, nil
}

// waitReplicaOnline waits, within replicaWait, until the primary lists
// replica with state=online and the replica's offset is the primary's: the
// replica holds every write so far.
func waitReplicaOnline(ctx context.Context, rdb *redis.Client, replica string) error {
	deadline := time.Now().Add(replicaWait)
	var last string
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil {
			state, offset := replicaState(info, replica)
			if state == "online" && offset == infoValue(info, "master_repl_offset") {
				return nil
			}
			last = fmt.Sprintf("state %q, offset %s of %s", state, offset, infoValue(info, "master_repl_offset"))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replica %s not online and caught up in %v (last: %s)", replica, replicaWait, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// portOf is the port of a host:port address.
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// replicatedSection is the report's section: both modes' medians, the
// ratio against its target, what a replicated buy adds, and each run.
func replicatedSection(def, on replFigures, fs string, conns int, dur, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Replicated mode: a primary and its replica\n\n"+
		"A gateway (`flashgate gateway`, batching on with its defaults, its relay idle: no broker) in front of a redis-server primary "+
		"with one replica, both this suite's own (loopback, AOF everysec, no RDB, no automatic AOF rewrite, `repl-diskless-sync-delay 0`, "+
		"data in .run/bench on %s), %v of closed-loop buys on %d keep-alive connections per run, every buyer new, once with "+
		"`FLASHGATE_REDIS_MIN_REPLICAS=0` (the default) and once with `=1` (each script call followed by `WAIT 1` on its connection: "+
		"the call's whole batch shares the wait), %d round(s) in alternating order, medians given. Before each run the primary is "+
		"emptied and the replica must be `state=online` at the primary's offset. `.run/bench/suite -only replicated`.\n\n",
		fs, dur, conns, len(def.runs))
	b.WriteString("| mode | orders/s, each run | orders/s | p50 | p99 | orders per script call | WAIT per script call |\n" +
		"| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, m := range []struct {
		name string
		f    replFigures
	}{{"min_replicas 0 (default)", def}, {"min_replicas 1 (replicated)", on}} {
		rates := make([]float64, len(m.f.runs))
		var waits []float64
		for i, r := range m.f.runs {
			rates[i] = r.rate
			waits = append(waits, r.waitsPerCall)
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %.1f | %.2f |\n", m.name, eachRun(rates, "%.0f"), m.f.rate,
			m.f.p50.Round(time.Microsecond), m.f.p99.Round(time.Microsecond), m.f.perCall, medianOf(waits))
	}
	ratio := 0.0
	if def.rate > 0 {
		ratio = on.rate / def.rate
	}
	b.WriteString("\n| figure | value | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&b, "| replicated ÷ default, orders/s | %.2f× | ≥ %.1f× (%s) |\n", ratio, targetReplicated, verdict(def.rate > 0 && ratio >= targetReplicated))
	fmt.Fprintf(&b, "| p50 a replicated buy adds | %s (%s → %s) | (reported) |\n", signed(on.p50-def.p50),
		def.p50.Round(time.Microsecond), on.p50.Round(time.Microsecond))
	fmt.Fprintf(&b, "| p99 a replicated buy adds | %s (%s → %s) | (reported) |\n", signed(on.p99-def.p99),
		def.p99.Round(time.Microsecond), on.p99.Round(time.Microsecond))
	fmt.Fprintf(&b, "| orders a script call carried, replicated ÷ default | %.2f× (%.1f → %.1f) | (reported) |\n",
		on.perCall/max(def.perCall, 1e-9), def.perCall, on.perCall)
	var unconfirmed int64
	for _, r := range on.runs {
		unconfirmed += r.unconfirmed
	}
	fmt.Fprintf(&b, "\n- Latency is every answer's, as the load generator saw it; the medians of the runs' p50 and p99. Script calls are "+
		"EVALSHA on the primary (`CONFIG RESETSTAT` before the load, `INFO commandstats` after), per accepted order: the reserve calls, "+
		"and the few of the gateway's sweeper and of the sale's creation. A replicated call holds its buyers for the replica's round "+
		"trip, so more buyers wait for the next call and the batches grow: what the wait costs in latency it partly gives back in calls. "+
		"503 `unconfirmed` answers in replicated mode (replica later than redis.timeout): %d in all.\n", unconfirmed)
	fmt.Fprintf(&b, "- This part took %s.\n", took.Round(time.Second))
	return b.String()
}

// signed writes d with its sign, to the microsecond.
func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + d.Round(time.Microsecond).String()
	}
	return "−" + (-d).Round(time.Microsecond).String()
}
