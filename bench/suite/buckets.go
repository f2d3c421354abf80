package main

// One hot sale in buckets (issue 10, API.md "buckets"): the same sale, the
// same load, once with "buckets":1 and once with "buckets":3, on a Redis
// Cluster of three primaries, in the same run. A sale of one bucket is one
// hash slot, so one primary does all its Redis work; three buckets spread
// its buyers over three slots on three primaries. What is measured is what
// that does to Redis: the busiest primary's CPU per order (the figure that
// decides when one sale outgrows one Redis core) and all the primaries'
// together (what the spreading costs: a script call's fixed cost shared by
// the buyers of one bucket, the moves of stock from the pool).
//
// Two loads: a hot sale's (-buckets-conns, 256 connections: more buyers
// waiting at once than one script call carries, batch.max_size 64, which
// is what a sale that needs buckets sees), on which issue 10's targets are
// judged, and the other parts' (-conns, 64), where a sale of one bucket is
// no crowd for its primary and the buckets' cost shows most.
//
// The cluster is the suite's own, as zero-loss mode's Redis is
// (zeroloss.go): three redis-server processes from the same package, set
// up as deploy/local/cluster.sh sets up `make up-cluster`'s (AOF everysec,
// no RDB), but with no automatic AOF rewrite, so that each primary's CPU is
// this sale's alone and no test using the shared cluster at the same time
// is counted. Each round starts from an empty cluster and a fresh gateway.
//
// CPU is utime + stime of each redis-server process, every thread, from
// /proc/PID/stat before and after the load, divided by the orders sold
// in that round. The relay and the consumers do not run: the gateway's
// relay finds no broker and waits, as in measureGateway, so Redis's work is
// the reservations (and, with buckets, the moves) alone.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

var (
	bucketRuns  = flag.Int("buckets-runs", 3, "rounds of the buckets measurement (each one sale of K = 1 and one of K = 3, in alternating order); the report gives medians")
	bucketConns = flag.Int("buckets-conns", 256, "connections of the hot sale's load in the buckets measurement (its targets are judged on it); the -conns load is measured besides")
	bucketStock = flag.Int64("buckets-stock", 1_000_000, "stock of each sale of the buckets measurement: more than one round of -duration sells")
	skipBuckets = flag.Bool("skip-buckets", false, "skip the buckets measurement (one hot sale, K = 1 vs K = 3, on a Redis Cluster of the suite's own)")
)

const (
	// The bucket counts compared, and the cluster's primaries.
	bucketsOne       = 1
	bucketsMany      = 3
	clusterPrimaries = 3
	// Issue 10's targets for K = 3 ÷ K = 1: the busiest primary does at
	// most 0.4× the work per order, all of them together at most 1.25×.
	targetBusiest = 0.4
	targetAll     = 1.25
)

// bucketRun is one sale of one round.
type bucketRun struct {
	k           int
	conns       int       // the load's connections
	orders      int64     // sold: the 202s, and the 503s whose script call ran after all
	unavailable int64     // 503 answers
	rate        float64   // accepted orders/s
	primary     []float64 // Redis CPU µs per order, by node
	calls       []float64 // EVALSHA per order, by node
	gateway     float64   // the gateway's CPU µs per order
	idle        []float64 // CPU ms per second of each node with the gateway up and no load
	p50, p99    time.Duration
	lanes       []int // the node of each bucket
	home        int   // the node of the sale's own slot
}

// busiest is the largest CPU per order of one primary.
func (r bucketRun) busiest() float64 { b, _ := busiestAll(r.primary); return b }

// all is the primaries' CPU per order together.
func (r bucketRun) all() float64 { _, a := busiestAll(r.primary); return a }

// scriptCalls is EVALSHA per order on every primary together.
func (r bucketRun) scriptCalls() float64 {
	var sum float64
	for _, v := range r.calls {
		sum += v
	}
	return sum
}

// measureBuckets is the buckets part: a cluster of its own, then
// -buckets-runs rounds of one K = 1 sale and one K = 3 sale (the order
// alternating, so that a change in the machine's load falls on both), then
// the section of the report.
func (s *suite) measureBuckets(ctx context.Context) error {
	if *skipBuckets {
		s.notes = append(s.notes, "buckets skipped (-skip-buckets)")
		return nil
	}
	if *bucketRuns < 1 || *bucketStock < 1 || *bucketConns < 1 {
		return errors.New("-buckets-runs, -buckets-conns and -buckets-stock must be at least 1")
	}
	loads := []int{*bucketConns}
	if s.conns != *bucketConns {
		loads = append(loads, s.conns)
	}
	started := time.Now()
	cl, err := s.startCluster(ctx)
	if err != nil {
		return err
	}
	defer cl.close(s)
	var (
		runs    []bucketRun
		floors  []floorRun
		retried []string
	)
	for round := range *bucketRuns {
		order := []int{bucketsOne, bucketsMany}
		if round%2 == 1 {
			order = []int{bucketsMany, bucketsOne}
		}
		for _, conns := range loads {
			for _, k := range order {
				r, err := s.bucketRound(ctx, cl, k, conns)
				if err != nil && ctx.Err() == nil {
					// This machine is shared: a stall of another user's work
					// can fail one run. Once more, then give up.
					fmt.Fprintf(os.Stderr, "buckets %d, %d connections, round %d failed, once more: %v\n", k, conns, round+1, err)
					retried = append(retried, fmt.Sprintf("K=%d, %d connections, round %d: %v", k, conns, round+1, err))
					r, err = s.bucketRound(ctx, cl, k, conns)
				}
				if err != nil {
					return fmt.Errorf("buckets %d, %d connections, round %d: %w", k, conns, round+1, err)
				}
				fmt.Fprintf(os.Stderr, "buckets: K=%d, %d conns: %8.0f orders/s, busiest primary %.2f µs/order, all primaries %.2f µs/order (%s), %.3f script calls/order\n",
					k, conns, r.rate, r.busiest(), r.all(), joinFloats(r.primary, "%.2f"), r.scriptCalls())
				runs = append(runs, r)
			}
		}
		fr, err := s.rotationFloor(ctx, cl)
		if err != nil {
			return fmt.Errorf("buckets, round %d: %w", round+1, err)
		}
		ob, oa := busiestAll(fr.one)
		tb, ta := busiestAll(fr.turns)
		fmt.Fprintf(os.Stderr, "buckets: floor, the same script calls on 1 primary: busiest %.2f, all %.2f µs/order; in turn on %d: busiest %.2f, all %.2f µs/order (%s)\n",
			ob, oa, len(fr.turns), tb, ta, joinFloats(fr.turns, "%.2f"))
		floors = append(floors, fr)
	}
	s.buckets = bucketsSection(runs, floors, retried, cl.addrList(), *bucketStock, loads, s.dur, time.Since(started))
	fmt.Fprint(os.Stderr, "\n"+s.buckets)
	return nil
}

// clusterNode is one primary of the suite's cluster.
type clusterNode struct {
	addr, bus string // client and cluster-bus addresses
	srv       *localstack.RedisServer
	rdb       *redis.Client
}

// localCluster is the suite's own Redis Cluster.
type localCluster struct {
	dir   string
	nodes []*clusterNode
}

func (c *localCluster) addrList() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// close stops the nodes and removes their data.
func (c *localCluster) close(s *suite) {
	for _, n := range c.nodes {
		if n.rdb != nil {
			n.rdb.Close()
		}
		n.srv.Stop()
	}
	os.RemoveAll(c.dir)
}

// startCluster starts the suite's cluster (localstack.StartRedisCluster,
// the one launcher of a private cluster): clusterPrimaries nodes on free
// ports, on every CPU as the suite's other servers, set up as
// deploy/local/cluster.sh sets up the nodes of `make up-cluster`, with no
// automatic AOF rewrite (its fork would weigh on one round alone; each
// round's start rewrites it instead).
func (s *suite) startCluster(ctx context.Context) (*localCluster, error) {
	dir, err := os.MkdirTemp(".run/bench", "buckets-")
	if err != nil {
		return nil, err
	}
	rc, err := localstack.StartRedisCluster(ctx, localstack.ClusterOptions{Dir: dir, Primaries: clusterPrimaries,
		Command: func(name string, args ...string) *exec.Cmd { return pinned(everyCPU(), name, args...) },
		Args: []string{"--cluster-node-timeout", "5000",
			"--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0", "--save", ""}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.servers = append(s.servers, rc.Nodes...)
	c := &localCluster{dir: dir}
	for _, srv := range rc.Nodes {
		c.nodes = append(c.nodes, &clusterNode{addr: srv.Addr, bus: srv.Bus, srv: srv, rdb: redis.NewClient(&redis.Options{Addr: srv.Addr})})
	}
	return c, nil
}

// empty deletes every key and rewrites each node's AOF (outside what is
// measured), so that each round starts from the same empty cluster and no
// AOF grows over the rounds.
func (c *localCluster) empty(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := n.rdb.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("%s: FLUSHALL: %w", n.addr, err)
		}
		if err := n.rdb.BgRewriteAOF(ctx).Err(); err != nil && !strings.Contains(err.Error(), "in progress") {
			return fmt.Errorf("%s: BGREWRITEAOF: %w", n.addr, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for {
			info, err := n.rdb.Info(ctx, "persistence").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO persistence: %w", n.addr, err)
			}
			if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: the AOF rewrite did not finish in 30 s", n.addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// cpu reads every node's CPU and the gateway's (pid; 0 for none), the
// gateway last.
func (c *localCluster) cpu(gateway int) ([]time.Duration, error) {
	var out []time.Duration
	for _, n := range c.nodes {
		d, err := procCPU(n.srv.Pid())
		if err != nil {
			return nil, fmt.Errorf("redis-server %s: %w", n.addr, err)
		}
		out = append(out, d)
	}
	if gateway > 0 {
		d, err := procCPU(gateway)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// node is the index of the node whose address is addr, -1 for none.
func (c *localCluster) node(addr string) int {
	for i, n := range c.nodes {
		if n.addr == addr {
			return i
		}
	}
	return -1
}

// bucketRound starts a gateway on an empty cluster, creates one sale of k
// buckets, and measures one run of buys on it.
func (s *suite) bucketRound(ctx context.Context, cl *localCluster, k, conns int) (bucketRun, error) {
	r := bucketRun{k: k, conns: conns}
	if err := cl.empty(ctx); err != nil {
		return r, err
	}
	public, admin := freePair()
	const prefix = "bk"
	gw := pinned("0", s.bin, "gateway")
	gw.Env = gatewayEnv(public, admin, prefix, []string{"FLASHGATE_REDIS_ADDRS=" + strings.Join(cl.addrList(), ","),
		// The buy path alone, as measureGateway: the relay finds no broker.
		"FLASHGATE_AMQP_URL=amqp://guest:guest@127.0.0.1:1/"})
	if err := s.start(gw, fmt.Sprintf("buckets-gateway-k%d", k)); err != nil {
		return r, err
	}
	defer s.stop(gw)
	if err := waitHTTP(ctx, "http://"+public+"/readyz"); err != nil {
		return r, err
	}
	var b [6]byte
	rand.Read(b[:])
	sale := fmt.Sprintf("hot-k%d-%s", k, hex.EncodeToString(b[:]))
	if err := createBucketSale(ctx, "http://"+admin, sale, *bucketStock, k); err != nil {
		return r, err
	}
	if err := r.place(ctx, cl, prefix, sale); err != nil {
		return r, err
	}

	// Half a second for the gateway to settle, then one idle second: what
	// the nodes do with the gateway up and no buyer (the cluster bus, the
	// gateway's sweeper).
	time.Sleep(500 * time.Millisecond)
	idle0, err := cl.cpu(0)
	if err != nil {
		return r, err
	}
	time.Sleep(time.Second)
	idle1, err := cl.cpu(0)
	if err != nil {
		return r, err
	}
	for i := range cl.nodes {
		r.idle = append(r.idle, float64(idle1[i]-idle0[i])/float64(time.Millisecond))
	}

	for _, n := range cl.nodes {
		if err := n.rdb.ConfigResetStat(ctx).Err(); err != nil {
			return r, fmt.Errorf("%s: CONFIG RESETSTAT: %w", n.addr, err)
		}
	}
	before, err := cl.cpu(gw.Process.Pid)
	if err != nil {
		return r, err
	}
	// A raw load (the sale is this round's own, created above with its
	// buckets, which bench.Run's own create cannot give): the same buyers
	// in the same order for both K, one unit each, every one new.
	rep, err := bench.Run(ctx, bench.Options{URL: "http://" + public, Raw: true, Sale: sale, Stock: *bucketStock,
		Users: 1_000_000_000, NoKeys: true, Conns: conns, Duration: s.dur})
	if err != nil {
		return r, err
	}
	after, err := cl.cpu(gw.Process.Pid)
	if err != nil {
		return r, err
	}
	// Every answer must be a 202 but for a few 503s (a reservation that
	// waited past redis.timeout on this shared machine): sold_out near the
	// end of the stock (where a sale of several buckets takes stock back
	// from the others) or many 503s would make this a measurement of
	// something else.
	var accepted, unavailable int64
	for _, oc := range rep.Outcomes {
		switch {
		case oc.Status == "accepted":
			accepted = oc.Count
		case oc.Status == "unavailable":
			unavailable = oc.Count
		case oc.Count > 0:
			return r, fmt.Errorf("%d answers %s (want only accepted; a sold_out wants a larger -buckets-stock than %d)", oc.Count, oc.Status, *bucketStock)
		}
	}
	if accepted == 0 {
		return r, errors.New("no order accepted")
	}
	if unavailable*100 > rep.Requests {
		return r, fmt.Errorf("%d of %d answers unavailable (over 1%%)", unavailable, rep.Requests)
	}
	// Redis's work is per order it reserved: the 202s, and those of the
	// 503s whose script call ran after all.
	sold, err := checkBucketSale(ctx, "http://"+admin, sale, *bucketStock, accepted, unavailable)
	if err != nil {
		return r, err
	}
	r.orders, r.unavailable, r.rate = sold, unavailable, float64(accepted)/rep.Elapsed.Seconds()
	r.p50, r.p99 = rep.All.P50, rep.All.P99
	for i, n := range cl.nodes {
		r.primary = append(r.primary, float64(after[i]-before[i])/float64(time.Microsecond)/float64(sold))
		info, err := n.rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			return r, fmt.Errorf("%s: INFO commandstats: %w", n.addr, err)
		}
		r.calls = append(r.calls, parseCommandStats(info, sold)["EVALSHA"].calls)
	}
	g := len(cl.nodes)
	r.gateway = float64(after[g]-before[g]) / float64(time.Microsecond) / float64(sold)
	return r, nil
}

// place finds the node of the sale's own slot and of each of its buckets
// (the names its home holds), and refuses buckets that share a primary: K
// = 3 on fewer than 3 primaries would measure nothing of what buckets are
// for.
func (r *bucketRun) place(ctx context.Context, cl *localCluster, prefix, sale string) error {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrList()})
	defer cc.Close()
	keys := scripts.Keys{Prefix: prefix}
	lanes := []string{sale}
	names, err := cc.HGet(ctx, keys.Meta(sale), "names").Result()
	switch {
	case err == nil:
		lanes = strings.Split(names, ",")
	case !errors.Is(err, redis.Nil):
		return fmt.Errorf("names of %s: %w", sale, err)
	}
	if len(lanes) != r.k {
		return fmt.Errorf("sale %s has %d buckets (%q), want %d", sale, len(lanes), names, r.k)
	}
	at := func(key string) (int, error) {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("primary of %s: %w", key, err)
		}
		i := cl.node(n.Options().Addr)
		if i < 0 {
			return 0, fmt.Errorf("primary of %s: %s is not a node of the cluster", key, n.Options().Addr)
		}
		return i, nil
	}
	if r.home, err = at(keys.Meta(sale)); err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, lane := range lanes {
		i, err := at(keys.Meta(lane))
		if err != nil {
			return err
		}
		seen[i] = true
		r.lanes = append(r.lanes, i)
	}
	if len(seen) != min(r.k, len(cl.nodes)) {
		return fmt.Errorf("the %d buckets of %s are on %d primaries (nodes %v)", r.k, sale, len(seen), r.lanes)
	}
	return nil
}

// createBucketSale creates sale with stock units, one per buyer, in k
// buckets, through the admin API (a PUT of its own: the admin client has
// no buckets field), and checks the answer.
func createBucketSale(ctx context.Context, adminURL, sale string, stock int64, k int) error {
	body, err := json.Marshal(map[string]any{"stock": stock, "per_user_limit": 1, "buckets": k})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, adminURL+"/admin/v1/sales/"+sale, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("create sale %s: %w", sale, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var v struct {
		Stock   int64 `json:"stock"`
		Buckets int   `json:"buckets"`
	}
	if res.StatusCode != http.StatusCreated || json.Unmarshal(raw, &v) != nil || v.Stock != stock || v.Buckets != k {
		return fmt.Errorf("create sale %s with %d buckets: %d %s", sale, k, res.StatusCode, raw)
	}
	return nil
}

// checkBucketSale checks the sale's admin view (which sums the buckets)
// against the load's answers, as bench.Run's checks would on a sale it
// made, and returns the units sold: every 202 is sold, and at most the
// 503s besides (a call that timed out may have run); one unit per buyer;
// nothing else is gone from the stock.
func checkBucketSale(ctx context.Context, adminURL, sale string, stock, accepted, unavailable int64) (int64, error) {
	c, err := adminapi.New(adminURL, "")
	if err != nil {
		return 0, err
	}
	v, err := c.Sale(ctx, sale)
	if err != nil {
		return 0, fmt.Errorf("view of %s: %w", sale, err)
	}
	if v.Stock != stock || v.Sold < accepted || v.Sold > accepted+unavailable || v.Buyers != v.Sold || v.Remaining != stock-v.Sold {
		return 0, fmt.Errorf("sale %s after %d accepted orders and %d unavailable: stock %d, sold %d, buyers %d, remaining %d",
			sale, accepted, unavailable, v.Stock, v.Sold, v.Buyers, v.Remaining)
	}
	return v.Sold, nil
}

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
	stat := func(get func(bucketRun) float64) (mid, lo, hi float64) {
		v := make([]float64, len(mine))
		for i, r := range mine {
			v[i] = get(r)
		}
		mid, lo, hi = medianOf(v), v[0], v[0]
		for _, x := range v {
			lo, hi = min(lo, x), max(hi, x)
		}
		return mid, lo, hi
	}
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

func joinFloats(v []float64, format string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, " + ")
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
	spread := func(mid, lo, hi float64, format string) string {
		if lo == hi {
			return fmt.Sprintf(format, mid)
		}
		return fmt.Sprintf(format+" ("+format+"–"+format+")", mid, lo, hi)
	}
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

// The machine's floor under K = 3 ÷ K = 1: the same reserve script calls,
// with nothing of buckets (no pool, no moves, no turns), sent one at a time
// from this suite either all to one primary or in turn to the three. What
// the second costs beyond the first is what running the same work as three
// processes costs on this machine (two cores shared by three primaries, a
// gateway and a load: each primary wakes for one call in three, on
// whichever core is free), which buckets cannot take away but by carrying
// more buyers per call; on a cluster with a core per primary it is not
// there.
const (
	floorBatch  = 48      // reservations per call: about what a bucket's call carries under the hot load
	floorOrders = 144_000 // per variant
)

// floorRun is one measurement of the floor: Redis CPU µs per order of each
// node, with all calls on one node and with the calls in turn on all.
type floorRun struct{ one, turns []float64 }

// rotationFloor measures one floorRun on an empty cluster.
func (s *suite) rotationFloor(ctx context.Context, cl *localCluster) (floorRun, error) {
	var fr floorRun
	if err := cl.empty(ctx); err != nil {
		return fr, err
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrList()})
	defer cc.Close()
	keys := scripts.Keys{Prefix: "floor"}
	loader := scripts.New(cc, "", keys)
	if _, err := loader.Load(ctx); err != nil {
		return fr, fmt.Errorf("floor: load the scripts: %w", err)
	}
	// A sale on each node, as the meta hash the admin script writes holds
	// it (stock, limit; no buckets, no hold), found by its tag's slot.
	var tag [6]byte
	rand.Read(tag[:])
	sales := make([]string, len(cl.nodes))
	for i, found := 0, 0; found < len(sales); i++ {
		if i == 10_000 {
			return fr, errors.New("floor: no sale id found for every node")
		}
		sale := fmt.Sprintf("floor-%s-%d", hex.EncodeToString(tag[:]), i)
		n, err := cc.MasterForKey(ctx, keys.Meta(sale))
		if err != nil {
			return fr, fmt.Errorf("floor: primary of %s: %w", sale, err)
		}
		if j := cl.node(n.Options().Addr); j >= 0 && sales[j] == "" {
			sales[j] = sale
			found++
		}
	}
	for _, sale := range sales {
		if err := cc.HSet(ctx, keys.Meta(sale), "stock", 2*floorOrders, "sold", 0, "limit", 1).Err(); err != nil {
			return fr, fmt.Errorf("floor: sale %s: %w", sale, err)
		}
	}
	next := 0
	measure := func(nodes int) ([]float64, error) {
		before, err := cl.cpu(0)
		if err != nil {
			return nil, err
		}
		args := make([]any, 0, 2+4*floorBatch)
		for call := 0; call*floorBatch < floorOrders; call++ {
			sale := sales[call%nodes]
			args = append(args[:0], sale, int64(scripts.IdemTTL/time.Second))
			for range floorBatch {
				next++
				args = append(args, "o"+strconv.Itoa(next), "u"+strconv.Itoa(next), 1, 0)
			}
			if _, err := loader.Run(ctx, scripts.Reserve, []string{keys.Meta(sale), keys.Users(sale), keys.Outbox(sale),
				keys.Orders(sale), keys.Due(sale)}, args...); err != nil {
				return nil, fmt.Errorf("floor: reserve on %s: %w", sale, err)
			}
		}
		after, err := cl.cpu(0)
		if err != nil {
			return nil, err
		}
		per := make([]float64, len(cl.nodes))
		for i := range per {
			per[i] = float64(after[i]-before[i]) / float64(time.Microsecond) / floorOrders
		}
		return per, nil
	}
	var err error
	if fr.one, err = measure(1); err != nil {
		return fr, err
	}
	if fr.turns, err = measure(len(cl.nodes)); err != nil {
		return fr, err
	}
	return fr, nil
}

// floorRatios are the medians over runs of turns ÷ one: the busiest node,
// and all nodes together.
func floorRatios(runs []floorRun) (busiest, all float64) {
	var bs, as []float64
	for _, r := range runs {
		ob, oa := busiestAll(r.one)
		tb, ta := busiestAll(r.turns)
		if ob > 0 && oa > 0 {
			bs, as = append(bs, tb/ob), append(as, ta/oa)
		}
	}
	if len(bs) == 0 {
		return 0, 0
	}
	return medianOf(bs), medianOf(as)
}

// busiestAll is the largest of v and their sum.
func busiestAll(v []float64) (busiest, all float64) {
	for _, x := range v {
		busiest, all = max(busiest, x), all+x
	}
	return busiest, all
}
