package main

// The buckets part's figures and its section of the report (buckets.go).

import (
	"fmt"
	"strings"
	"time"
)

// bucketFigures are the medians of the runs of one K.
type bucketFigures struct {
	runs                                  int
	rate, busiest, all, calls, gateway    float64
	rateLo, rateHi, busiestLo, busiestHi  float64
	allLo, allHi, callsLo, callsHi        float64
	gatewayLo, gatewayHi, idleMsPerSecond float64
}

// figuresOf sums up the runs of k under the load of conns: the median of
// each figure, and its range. The busiest primary is taken in each run (it
// is the one that holds the sale's slot with one bucket; any of them with
// three).
func figuresOf(runs []bucketRun, k, conns int) bucketFigures {
	var mine []bucketRun
	for _, r := range runs {
		if r.k == k && r.conns == conns {
			mine = append(mine, r)
		}
	}
	f := bucketFigures{runs: len(mine)}
	if len(mine) == 0 {
		return f
	}
	stat := func(get func(bucketRun) float64) (mid, lo, hi float64) { return medianOfRuns(mine, get) }
	f.rate, f.rateLo, f.rateHi = stat(func(r bucketRun) float64 { return r.rate })
	f.busiest, f.busiestLo, f.busiestHi = stat(bucketRun.busiest)
	f.all, f.allLo, f.allHi = stat(bucketRun.all)
	f.calls, f.callsLo, f.callsHi = stat(bucketRun.scriptCalls)
	f.gateway, f.gatewayLo, f.gatewayHi = stat(func(r bucketRun) float64 { return r.gateway })
	f.idleMsPerSecond, _, _ = stat(func(r bucketRun) float64 {
		var m float64
		for _, v := range r.idle {
			m = max(m, v)
		}
		return m
	})
	return f
}

// passMiss is a target's verdict in the buckets table.
func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// bucketRatios are K = 3 ÷ K = 1 of the medians, and whether the targets
// are met.
func bucketRatios(one, many bucketFigures) (busiest, all, rate float64, busiestOK, allOK bool) {
	if one.busiest > 0 {
		busiest = many.busiest / one.busiest
	}
	if one.all > 0 {
		all = many.all / one.all
	}
	if one.rate > 0 {
		rate = many.rate / one.rate
	}
	return busiest, all, rate, one.busiest > 0 && busiest <= targetBusiest, one.all > 0 && all <= targetAll
}

// bucketsSection is the report's section: for each load, the figures of
// both K and the ratios against the targets; then each run, and how it was
// measured. loads[0] is the hot sale's, on which the targets are judged.
func bucketsSection(runs []bucketRun, floors []floorRun, retried, addrs []string, stock int64, loads []int, dur, took time.Duration) string {
	var b strings.Builder
	rounds := 0
	for _, r := range runs {
		if r.k == bucketsOne && r.conns == loads[0] {
			rounds++
		}
	}
	fmt.Fprintf(&b, "\n## One hot sale in buckets, on a Redis Cluster of %d primaries\n\n"+
		"The same sale (%d units, per_user_limit 1, every buyer new) created with `\"buckets\":%d` and with `\"buckets\":%d`, "+
		"the same load on each (keep-alive connections, one request in flight on each, %v closed loop), %d round(s) of both in alternating order, medians given "+
		"with the range in brackets. Redis CPU is utime + stime of each redis-server process from `/proc/PID/stat` around the load, "+
		"divided by the orders sold in the run; the busiest primary is taken in each run.\n\n",
		len(addrs), stock, bucketsOne, bucketsMany, dur, rounds)
	b.WriteString("| load | K (buckets) | orders/s | busiest primary, Redis CPU µs per order | all primaries, Redis CPU µs per order | script calls per order | gateway CPU µs per order |\n" +
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, conns := range loads {
		for _, k := range []int{bucketsOne, bucketsMany} {
			f := figuresOf(runs, k, conns)
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", loadName(i, conns), k, spread(f.rate, f.rateLo, f.rateHi, "%.0f"),
				spread(f.busiest, f.busiestLo, f.busiestHi, "%.2f"), spread(f.all, f.allLo, f.allHi, "%.2f"),
				spread(f.calls, f.callsLo, f.callsHi, "%.3f"), spread(f.gateway, f.gatewayLo, f.gatewayHi, "%.1f"))
		}
	}
	fmt.Fprintf(&b, "\n| K = %d ÷ K = %d | load | ratio | target | |\n| --- | --- | ---: | --- | --- |\n", bucketsMany, bucketsOne)
	for i, conns := range loads {
		one, many := figuresOf(runs, bucketsOne, conns), figuresOf(runs, bucketsMany, conns)
		busiest, all, rate, busiestOK, allOK := bucketRatios(one, many)
		verdict := func(ok bool) string {
			if i > 0 {
				return "(reported)"
			}
			return passMiss(ok)
		}
		fmt.Fprintf(&b, "| busiest primary, Redis CPU per order | %s | %.2f× | ≤ %.2f× | %s |\n", loadName(i, conns), busiest, targetBusiest, verdict(busiestOK))
		fmt.Fprintf(&b, "| all primaries, Redis CPU per order | %s | %.2f× | ≤ %.2f× | %s |\n", loadName(i, conns), all, targetAll, verdict(allOK))
		fmt.Fprintf(&b, "| orders/s | %s | %.2f× | | (reported) |\n", loadName(i, conns), rate)
	}
	if fb, fa := floorRatios(floors); fb > 0 {
		fmt.Fprintf(&b, "| busiest primary, Redis CPU per order | floor: no buckets, the same script calls in turn on %d primaries ÷ all on one | %.2f× | | (this machine) |\n", len(addrs), fb)
		fmt.Fprintf(&b, "| all primaries, Redis CPU per order | floor: no buckets, the same script calls in turn on %d primaries ÷ all on one | %.2f× | | (this machine) |\n", len(addrs), fa)
	}

	b.WriteString("\n- Each run, Redis CPU µs per order of each primary (node 0 + 1 + 2), where the sale's slot (home) and its buckets were:")
	for _, r := range runs {
		fmt.Fprintf(&b, " K=%d, %d connections: %s, home node %d, buckets on nodes %v, %.0f orders/s", r.k, r.conns, joinFloats(r.primary, "%.2f"), r.home, r.lanes, r.rate)
		if r.unavailable > 0 {
			fmt.Fprintf(&b, " (%d answers 503: waited past redis.timeout)", r.unavailable)
		}
		b.WriteString(";")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "- What ran: the cluster is this suite's own (%s; AOF everysec, no RDB and no automatic AOF rewrite, as `make up-cluster`'s "+
		"nodes otherwise; emptied and its AOF rewritten before each run), so no other user of the shared cluster is counted. "+
		"One gateway per run (`flashgate gateway`, FLASHGATE_REDIS_ADDRS the three nodes, batching on with its defaults, pinned to CPU 0 like the other "+
		"gateway measurements), its relay idle (no broker), no consumer: Redis's work is the reservations and, with buckets, the moves "+
		"of stock from the pool (a chunk is an eighth of a bucket's share). The load is `flashgate bench`'s generator in raw mode on the "+
		"round's own sale; every answer had to be a 202 (or, for at most 1%% of them, a 503), and the admin view's sold and buyers the 202s "+
		"(and at most the 503s besides); CPU is per unit sold.\n", strings.Join(addrs, ", "))
	b.WriteString("- The loads: the hot sale's has more buyers waiting at once than one script call carries (batch.max_size, 64), as a sale " +
		"that needs buckets has, and the targets are judged on it; the other has as many connections as the rest of this suite, where " +
		"one primary serves the sale of one bucket with CPU to spare and batches never fill.\n")
	one, many := figuresOf(runs, bucketsOne, loads[0]), figuresOf(runs, bucketsMany, loads[0])
	fmt.Fprintf(&b, "- Script calls per order are EVALSHA calls (`CONFIG RESETSTAT` before, `INFO commandstats` after, every primary). "+
		"A script call serves one bucket, and most of a small batch's cost is the call's own; so a gateway's buckets share the sale's "+
		"calls in flight (batch.calls), taking turns, the bucket waiting longest first, and their batches grow as large as a sale of one "+
		"bucket's; a bucket with a full batch sends it at once besides, which is how all K primaries work at once for one gateway. "+
		"With the gateway up and no load, the busiest node used %.0f ms (K=%d) and %.0f ms (K=%d) of CPU per second "+
		"(the cluster bus, the sweeper; to the 10 ms clock tick), which the figures above include.\n",
		one.idleMsPerSecond, bucketsOne, many.idleMsPerSecond, bucketsMany)
	if len(floors) > 0 {
		fmt.Fprintf(&b, "- The floor, in each round: %d reserve script calls of %d new buyers each, sent one at a time by this suite (no gateway, "+
			"no buckets), first all to one primary, then in turn to the %d; the median of turns ÷ one over the rounds. It is what doing the same "+
			"calls as %d processes instead of one costs on this machine, whose cores the primaries share with the gateway and the load, so that each "+
			"primary wakes for one call in %d; on a cluster with a core per primary it is not there. Where the buckets' ratios "+
			"come below it, their calls carried more buyers each than the sale of one bucket's (script calls per order above). "+
			"Each round (µs per order, one primary's busiest and all, then in turn):",
			floorOrders/floorBatch, floorBatch, len(addrs), len(addrs), len(addrs))
		for _, fr := range floors {
			ob, oa := busiestAll(fr.one)
			tb, ta := busiestAll(fr.turns)
			fmt.Fprintf(&b, " %.2f, %.2f; %.2f, %.2f (%s);", ob, oa, tb, ta, joinFloats(fr.turns, "%.2f"))
		}
		b.WriteString("\n")
	}
	for _, e := range retried {
		fmt.Fprintf(&b, "- Failed once and was run again: %s.\n", e)
	}
	fmt.Fprintf(&b, "- This part took %s.\n", took.Round(time.Second))
	return b.String()
}

// loadName names the i-th load of the buckets section.
func loadName(i, conns int) string {
	if i == 0 {
		return fmt.Sprintf("hot sale, %d connections", conns)
	}
	return fmt.Sprintf("%d connections", conns)
}
