// Command suite is `make bench`: it measures flashgate side by side with its
// baselines in one run on this machine and writes docs/benchmarks.md.
//
// Every comparison is a ratio of two figures taken minutes apart on the same
// machine with the same client, never an absolute threshold: these machines
// are shared and noisy. Servers run pinned to CPU 0 and the load (this
// process) to CPU 1 when taskset is available.
//
// The suite is a table of parts (parts): each measures one thing against its
// baselines, adds rows to the main table (each row held to its baseline row
// by reference) or writes a section of its own. A full run runs them all in
// the table's order; -only PART runs one.
//
//	go build -o .run/bench/suite ./bench/suite && .run/bench/suite -out docs/benchmarks.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// options are the suite's flags, parsed once (parseOptions).
type options struct {
	out         string
	dur         time.Duration
	conns       int
	orders      int // of each pipeline measurement
	only        string
	drainRuns   int
	skipGo      bool
	skipPipe    bool
	skipCost    bool
	skipZL      bool
	skipBucket  bool
	skipScale   bool
	skipTrickle bool
	skipRoom    bool
	skipRepl    bool
	skipFO      bool

	costOrders, costRuns, costConsumers    int
	costPlacements                         string // comma-separated: pinned, unpinned
	costBefore, costAfter                  string // flashgate binaries of the paired mode (costpair.go)
	bucketRuns, bucketConns                int
	bucketStock                            int64
	zeroLossRuns                           int
	scaleSales, scaleFiller                int
	scaleIdle                              time.Duration
	trickleSales, trickleRate, trickleRuns int
	roomRuns, roomUsers                    int
	replicatedRuns                         int
	failoverRuns                           int
}

// parseOptions reads the flags of args (os.Args[1:]).
func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "docs/benchmarks.md", "where to write the report")
	fs.DurationVar(&o.dur, "duration", 5*time.Second, "length of each HTTP measurement")
	fs.IntVar(&o.conns, "conns", 64, "client connections")
	fs.IntVar(&o.orders, "orders", 20000, "orders of each pipeline measurement")
	fs.BoolVar(&o.skipGo, "skip-go-bench", false, "skip the go test benchmarks")
	fs.BoolVar(&o.skipPipe, "skip-pipeline", false, "skip the pipeline measurements")
	fs.StringVar(&o.only, "only", "", "run one part alone: "+partList())
	fs.IntVar(&o.drainRuns, "drain-runs", 3, "runs of each consumer-drain measurement (1, 2 and 4 consumers, outbox and pre-filled queue); the report gives medians")
	fs.IntVar(&o.costOrders, "cost-orders", 150_000, "orders of each cost-per-order flash sale")
	fs.IntVar(&o.costRuns, "cost-runs", 3, "cost-per-order runs of each placement (a sale and its baselines each; with -cost-before, pairs of runs); the report gives medians and min–max")
	fs.IntVar(&o.costConsumers, "cost-consumers", 2, "consumers of the cost-per-order flash sale")
	fs.StringVar(&o.costPlacements, "cost-placements", "pinned,unpinned", "placements of the cost-per-order runs, comma-separated: pinned (gateway, consumers and the bare handler on CPU 0, the load on CPU 1), unpinned (every process on every CPU)")
	fs.StringVar(&o.costBefore, "cost-before", "", "paired before/after mode of the cost part: the flashgate binary before a change; its runs alternate with -cost-after's and the report gives each stage's after ÷ before")
	fs.StringVar(&o.costAfter, "cost-after", "", "with -cost-before: the flashgate binary after the change (default: this tree's, as the suite builds it)")
	fs.BoolVar(&o.skipCost, "skip-cost", false, "skip the cost-per-order measurement")
	fs.IntVar(&o.bucketRuns, "buckets-runs", 3, "rounds of the buckets measurement (each one sale of K = 1 and one of K = 3, in alternating order); the report gives medians")
	fs.IntVar(&o.bucketConns, "buckets-conns", 256, "connections of the hot sale's load in the buckets measurement (its targets are judged on it); the -conns load is measured besides")
	fs.Int64Var(&o.bucketStock, "buckets-stock", 1_000_000, "stock of each sale of the buckets measurement: more than one round of -duration sells")
	fs.BoolVar(&o.skipBucket, "skip-buckets", false, "skip the buckets measurement (one hot sale, K = 1 vs K = 3, on a Redis Cluster of the suite's own)")
	fs.IntVar(&o.zeroLossRuns, "zeroloss-runs", 2, "rounds of the zero-loss measurement (each appendfsync everysec, then always); the report gives medians")
	fs.BoolVar(&o.skipZL, "skip-zeroloss", false, "skip the zero-loss (appendfsync always) measurement")
	fs.BoolVar(&o.skipScale, "skip-scale", false, "skip the shop-scale measurement (10,000 sales through Redis restarts)")
	fs.IntVar(&o.scaleSales, "scale-sales", 10000, "sales of the shop-scale measurement")
	fs.IntVar(&o.scaleFiller, "scale-filler", 1_000_000, "rows of other sales put in orders before the shop-scale measurement")
	fs.DurationVar(&o.scaleIdle, "scale-idle", 30*time.Second, "idle window of the shop-scale measurement")
	fs.BoolVar(&o.skipTrickle, "skip-trickle", false, "skip the trickle measurement (many sales each selling now and then vs one hot sale, Redis commands per order)")
	fs.IntVar(&o.trickleSales, "trickle-sales", 10000, "sales of the trickle measurement, bought from round-robin")
	fs.IntVar(&o.trickleRate, "trickle-rate", 2000, "buys a second of the trickle measurement, in all (each window lasts -duration)")
	fs.IntVar(&o.trickleRuns, "trickle-runs", 3, "rounds of the trickle measurement (each the trickle and the hot sale, in alternating order); the report gives medians")
	fs.IntVar(&o.roomRuns, "room-runs", 3, "rounds of the waiting-room measurement (bare polls, reserve path, joins and polls, with and without buyer authentication); the report gives medians")
	fs.IntVar(&o.roomUsers, "room-users", 5000, "buyers of each fairness run of the waiting-room measurement (fifo and random)")
	fs.BoolVar(&o.skipRoom, "skip-room", false, "skip the waiting-room measurement")
	fs.IntVar(&o.replicatedRuns, "replicated-runs", 3, "rounds of the replicated-mode measurement (each min_replicas 0 and 1, in alternating order); the report gives medians")
	fs.BoolVar(&o.skipRepl, "skip-replicated", false, "skip the replicated-mode measurement (min_replicas 1 vs 0 on a primary and replica of the suite's own)")
	fs.IntVar(&o.failoverRuns, "failover-runs", 2, "rounds of the failover measurement (each a kill -9 of the primary of one sale under load); the report gives each round and the medians")
	fs.BoolVar(&o.skipFO, "skip-failover", false, "skip the failover measurement (kill -9 of a primary of a Redis Cluster with replicas, of the suite's own)")
	return o, fs.Parse(args)
}

// part is one measurement of the suite: a row of parts.
type part struct {
	name string // -only NAME
	what string // what it measures, for -only's help
	// skip, when set and true, skips the part with the note skipped.
	skip    func(*options) bool
	skipped string
	// failed prefixes the note of a failed part, which the run then goes
	// on from; "" for a part whose failure ends the run.
	failed  string
	measure func(*suite, context.Context) error
}

// parts are the suite's parts in the order of a full run; the report's
// rows come in that order.
var parts = []part{
	{name: "buy", what: "the buy and sold-out paths against the bare handler, batching on and off", measure: (*suite).measureBuyPath},
	{name: "auth", what: "buyer authentication on vs off", measure: (*suite).measureAuth},
	{name: "tail", what: "tail latency at half the peak rate", measure: (*suite).measureTail},
	{name: "pipeline", what: "202 → MySQL row, consumer drains, the broker's own rates",
		skip: func(o *options) bool { return o.skipPipe }, skipped: "pipeline skipped (-skip-pipeline)",
		failed: "pipeline not measured: ", measure: (*suite).measurePipeline},
	{name: "cost", what: "cost per order",
		skip: func(o *options) bool { return o.skipCost }, skipped: "cost per order skipped (-skip-cost)",
		failed: "cost per order not measured: ", measure: (*suite).measureCost},
	{name: "zeroloss", what: "appendfsync always vs everysec",
		skip: func(o *options) bool { return o.skipZL }, skipped: "zero-loss mode skipped (-skip-zeroloss)",
		failed: "zero-loss mode not measured: ", measure: (*suite).measureZeroLoss},
	{name: "buckets", what: "one hot sale, K = 1 vs K = 3, on a Redis Cluster",
		skip: func(o *options) bool { return o.skipBucket }, skipped: "buckets skipped (-skip-buckets)",
		failed: "buckets not measured: ", measure: (*suite).measureBuckets},
	{name: "scale", what: "10,000 sales through Redis restarts",
		skip: func(o *options) bool { return o.skipScale }, skipped: "shop scale skipped (-skip-scale)",
		failed: "shop scale not measured: ", measure: (*suite).measureScale},
	{name: "trickle", what: "10,000 sales each selling now and then vs one hot sale: Redis commands per order",
		skip: func(o *options) bool { return o.skipTrickle }, skipped: "trickle skipped (-skip-trickle)",
		failed: "trickle not measured: ", measure: (*suite).measureTrickle},
	{name: "room", what: "the waiting room's joins, polls and fairness",
		skip: func(o *options) bool { return o.skipRoom }, skipped: "waiting room skipped (-skip-room)",
		failed: "waiting room not measured: ", measure: (*suite).measureRoom},
	{name: "page", what: "the sale page GET /s/{sale} against the bare handler",
		skip: func(o *options) bool { return o.skipRoom }, skipped: "sale page skipped (-skip-room)",
		failed: "sale page not measured: ", measure: (*suite).measurePage},
	{name: "replicated", what: "min_replicas 1 vs 0 on a primary and replica",
		skip: func(o *options) bool { return o.skipRepl }, skipped: "replicated mode skipped (-skip-replicated)",
		failed: "replicated mode not measured: ", measure: (*suite).measureReplicated},
	{name: "failover", what: "kill -9 of a cluster primary: promotion and first 202",
		skip: func(o *options) bool { return o.skipFO }, skipped: "failover skipped (-skip-failover)",
		failed: "failover not measured: ", measure: (*suite).measureFailover},
	{name: "gobench", what: "the go test benchmarks: strategies and the handler",
		skip:   func(o *options) bool { return o.skipGo },
		failed: "go benchmarks failed: ", measure: (*suite).goBenchmarks},
}

// partList is -only's help: every part and what it measures.
func partList() string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q (%s)", p.name, p.what)
	}
	return b.String()
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2) // the flag set has said why
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	err = run(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench suite:", err)
		os.Exit(1)
	}
}

// run builds the binaries and runs every part, or -only's alone (its
// section written to -out: a partial report, not to be written over
// docs/benchmarks.md), then writes the report.
func run(ctx context.Context, o options) error {
	todo := parts
	if o.only != "" {
		todo = nil
		for _, p := range parts {
			if p.name == o.only {
				todo = []part{p}
			}
		}
		if todo == nil {
			names := make([]string, len(parts))
			for i, p := range parts {
				names[i] = p.name
			}
			return fmt.Errorf("-only %q: want one of %s", o.only, strings.Join(names, ", "))
		}
	}
	s := newSuite(o)
	defer s.stopAll()
	if err := s.build(ctx); err != nil {
		return err
	}
	started := time.Now()
	for _, p := range todo {
		if p.skip != nil && p.skip(&s.o) {
			if p.skipped != "" {
				s.notes = append(s.notes, p.skipped)
			}
			continue
		}
		err := p.measure(s, ctx)
		switch {
		case err == nil:
		case p.failed == "" || o.only != "":
			return err
		default:
			s.notes = append(s.notes, p.failed+err.Error())
		}
	}
	return s.write(o.out, time.Since(started))
}
