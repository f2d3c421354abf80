package main

// Zero-loss mode's cost (issue 13): the buy path, batched as in production
// (a gateway binary, its per-sale batcher, one script call for many buyers),
// against a Redis of the suite's own, first with appendfsync everysec (the
// default) and then with appendfsync always and redis.zero_loss on, the same
// server, client and sale sizes, in the same run. Redis 7.0 fsyncs the AOF
// before it sends the replies of one event-loop turn, so what always costs
// is one fsync per turn, shared by the buyers of the script calls of that
// turn. Rounds alternate the two (everysec, always, everysec, …), so that a
// change in the machine's load falls on both.
//
// The Redis is the suite's own so that CONFIG SET touches no one else and
// its CPU (utime + stime of the redis-server process, every thread, so the
// fsyncs of everysec's background thread too) is the reserve path's alone.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// Rows of the zero-loss group; the always rows are compared with the
// everysec ones.
const (
	groupZeroLoss   = "zero-loss mode, reserve path on a Redis of its own"
	rowZLRate       = "appendfsync everysec (default): orders/s"
	rowZLRateAlways = "appendfsync always, redis.zero_loss on: orders/s"
	rowZLCPU        = "appendfsync everysec (default): Redis CPU µs per order"
	rowZLCPUAlways  = "appendfsync always, redis.zero_loss on: Redis CPU µs per order"
)

// zlRun is one measurement of one fsync policy.
type zlRun struct {
	rate     float64 // accepted orders/s
	cpu      float64 // Redis µs per accepted order
	perCall  float64 // accepted orders per EVALSHA
	p50, p99 time.Duration
}

// measureZeroLoss is the zero-loss part: a redis-server of its own, then
// -zeroloss-runs rounds of both policies, then the rows and a note.
func (s *suite) measureZeroLoss(ctx context.Context) error {
	dir, err := os.MkdirTemp(".run/bench", "zeroloss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// As deploy/local/service.sh configures the local Redis (AOF, no RDB),
	// with no automatic AOF rewrite: a rewrite's fork in the middle of one
	// of the runs would weigh on that run alone.
	srv, err := s.startRedis(ctx, localstack.RedisOptions{Dir: dir, Args: aofEverysec})
	if err != nil {
		return fmt.Errorf("the suite's redis-server: %w", err)
	}
	defer srv.Stop()
	addr := srv.Addr
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	policies := []string{"everysec", "always"}
	runs := map[string][]zlRun{}
	for range max(s.o.zeroLossRuns, 1) {
		for _, fsync := range policies {
			r, err := s.zeroLossRun(ctx, rdb, srv.Pid(), addr, fsync)
			if err != nil {
				return fmt.Errorf("appendfsync %s: %w", fsync, err)
			}
			fmt.Fprintf(os.Stderr, "zero-loss: appendfsync %-8s %8.0f orders/s, Redis %.2f µs/order, %.1f orders per script call\n",
				fsync, r.rate, r.cpu, r.perCall)
			runs[fsync] = append(runs[fsync], r)
		}
	}
	med := func(fsync string, f func(zlRun) float64) float64 {
		v := make([]float64, len(runs[fsync]))
		for i, r := range runs[fsync] {
			v[i] = f(r)
		}
		return medianOf(v)
	}
	lat := func(fsync string, f func(zlRun) time.Duration) time.Duration {
		return time.Duration(med(fsync, func(r zlRun) float64 { return float64(f(r)) }))
	}
	rate := func(r zlRun) float64 { return r.rate }
	cpu := func(r zlRun) float64 { return r.cpu }
	p50 := func(r zlRun) time.Duration { return r.p50 }
	p99 := func(r zlRun) time.Duration { return r.p99 }
	everysec := s.add(row{group: groupZeroLoss, name: rowZLRate, value: med("everysec", rate), unit: "orders/s",
		p50: lat("everysec", p50), p99: lat("everysec", p99)})
	s.add(row{group: groupZeroLoss, name: rowZLRateAlways, value: med("always", rate), unit: "orders/s",
		p50: lat("always", p50), p99: lat("always", p99), baseline: everysec})
	everysec = s.add(row{group: groupZeroLoss, name: rowZLCPU, value: med("everysec", cpu), unit: "µs/order", prec: 2})
	s.add(row{group: groupZeroLoss, name: rowZLCPUAlways, value: med("always", cpu), unit: "µs/order", prec: 2, baseline: everysec})

	var each []string
	for _, fsync := range policies {
		var b strings.Builder
		for i, r := range runs[fsync] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%.0f orders/s at %.2f µs", r.rate, r.cpu)
		}
		each = append(each, fsync+": "+b.String())
	}
	s.notes = append(s.notes, fmt.Sprintf("Zero-loss mode: a gateway (batching on, as in production; its relay idle) in front of a redis-server "+
		"of this suite's own (AOF on, no automatic rewrite, data in .run/bench on %s), %v of closed-loop buys per run, once with "+
		"appendfsync everysec and once with appendfsync always and FLASHGATE_REDIS_ZERO_LOSS=true, %d round(s), medians given; "+
		"the ratios are always ÷ everysec: %.2f× the orders/s, %.2f× Redis's CPU per order. Script calls carried %.1f (everysec) and "+
		"%.1f (always) orders each: always shares one fsync per event-loop turn among them. Each run (%s). "+
		"Redis CPU is utime + stime of the redis-server process, every thread, per accepted order.",
		fsType(dir), s.o.dur, max(s.o.zeroLossRuns, 1),
		med("always", rate)/max(med("everysec", rate), 1), med("always", cpu)/max(med("everysec", cpu), 1e-9),
		med("everysec", func(r zlRun) float64 { return r.perCall }), med("always", func(r zlRun) float64 { return r.perCall }),
		strings.Join(each, "; ")))
	return nil
}

// zeroLossRun sets the server's fsync policy, starts a gateway on it (in
// zero-loss mode for always: its /readyz is then 200 only once it has seen
// the policy) and measures one run of buys.
func (s *suite) zeroLossRun(ctx context.Context, rdb *redis.Client, pid int, addr, fsync string) (zlRun, error) {
	if err := rdb.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
		return zlRun{}, fmt.Errorf("CONFIG SET appendfsync: %w", err)
	}
	// In zero-loss mode /readyz is 503 until the gateway has found the
	// primary fsyncing every write.
	g, stop, err := s.ownRedisGateway(ctx, "zeroloss-gateway-"+fsync, "zl", addr,
		fmt.Sprintf("FLASHGATE_REDIS_ZERO_LOSS=%t", fsync == "always"))
	if err != nil {
		return zlRun{}, err
	}
	defer stop()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return zlRun{}, fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	before, err := procCPU(pid)
	if err != nil {
		return zlRun{}, err
	}
	rep, err := bench.Run(ctx, bench.Options{URL: g.public, AdminURL: g.admin, NoMySQL: true, NoKeys: true,
		Stock: 1_000_000_000, Users: 1_000_000_000, Conns: s.o.conns, Duration: s.o.dur})
	if err != nil {
		return zlRun{}, err
	}
	after, err := procCPU(pid)
	if err != nil {
		return zlRun{}, err
	}
	if rep.Err() != nil {
		return zlRun{}, fmt.Errorf("invariant check failed: %w", rep.Err())
	}
	// Every answer must be a 202: a 503 of the mode would make this a
	// measurement of refusals.
	if err := only(rep, "accepted"); err != nil {
		return zlRun{}, err
	}
	orders := rep.Figures.AcceptedOrders
	if orders == 0 {
		return zlRun{}, errors.New("no order accepted")
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return zlRun{}, fmt.Errorf("INFO commandstats: %w", err)
	}
	calls := parseCommandStats(info, orders)["EVALSHA"].calls // per order
	r := zlRun{
		rate: float64(orders) / rep.Elapsed.Seconds(),
		cpu:  float64(after-before) / float64(time.Microsecond) / float64(orders),
		p50:  rep.All.P50, p99: rep.All.P99,
	}
	if calls > 0 {
		r.perCall = 1 / calls
	}
	return r, nil
}

// fsType names the file system dir is on, for the note: on tmpfs an fsync
// costs nothing, and the ratio would say nothing about a disk.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "an unknown file system"
	}
	switch uint32(st.Type) {
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	case 0x01021994:
		return "tmpfs (an fsync costs nothing there: the ratio says nothing about a disk)"
	}
	return fmt.Sprintf("file system 0x%x", uint32(st.Type))
}

// ownRedisGateway starts a gateway on the servers' CPU in front of a Redis
// of the suite's own (addr), its relay finding no broker (the buy path
// alone, as measureGateway's), with env besides, and returns its base URLs
// and what stops it.
func (s *suite) ownRedisGateway(ctx context.Context, log, tag, addr string, env ...string) (*gateway, func(), error) {
	p, err := s.launch(ctx, proc{log: log, args: []string{"gateway"}, cpu: cpuServer, prefix: newPrefix(tag),
		env: append([]string{"FLASHGATE_REDIS_ADDRS=" + addr, "FLASHGATE_AMQP_URL=" + s.svc.noBroker}, env...)})
	if err != nil {
		return nil, nil, err
	}
	return newGateway(p), func() { p.Stop() }, nil
}
