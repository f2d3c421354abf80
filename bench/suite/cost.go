package main

// Cost per order (DESIGN.md "Cost per order"): one flash sale through the
// whole stack with every stage live, and the CPU each process spent on it,
// per accepted order, beside what the same kind of work costs each server
// when nothing else is in the way (the baselines, measured in the same run).
//
// CPU is utime + stime of each process, all threads, from /proc/PID/stat
// before and after. "After" is when the last order is in MySQL and the
// consumers have marked every order created in Redis, so that the figure
// holds an order's whole life. The shared servers (Redis, RabbitMQ,
// MariaDB) count everything they do in that window, other users' work
// included: the section says how much they did while idle just before.

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench"
)

// The processes of the table.
const (
	procGateway  = "gateway + relay"
	procRedis    = "Redis"
	procRabbit   = "RabbitMQ (beam.smp)"
	procConsumer = "consumer"
	procMariaDB  = "MariaDB (mariadbd)"
	procClient   = "load client"
)

// serverProcs are the processes "all servers" adds up.
var serverProcs = []string{procGateway, procRedis, procRabbit, procConsumer, procMariaDB}

// Sizes of the baselines: each a few seconds at most, and large enough that
// the clock tick (10 ms) is under 1% of the CPU measured.
const (
	brokerMessages = 50_000
	brokerWindow   = 1024 // unconfirmed publishes at once, as the relay's default max_in_flight
	mariaRows      = 100_000
	mariaBatch     = 256 // rows per INSERT: consumer.batch_size's default
	mariaConns     = 4
	leanPerCall    = 16 // reservations per script call
	leanCalls      = 16_000
	leanConns      = 16
)

// cpuProc is one process whose CPU is read.
type cpuProc struct {
	name string
	pid  int
}

// cpuOf returns the CPU time used so far by procs, summed by name.
func cpuOf(procs []cpuProc) (map[string]time.Duration, error) {
	m := make(map[string]time.Duration, len(procs))
	for _, p := range procs {
		d, err := procCPU(p.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		m[p.name] += d
	}
	return m, nil
}

// stackProcs are the local stack's servers (their pid files, see
// deploy/local/service.sh) and this process, the load client.
func (s *suite) stackProcs() ([]cpuProc, error) {
	procs := []cpuProc{{procClient, os.Getpid()}}
	for _, sv := range s.svc.servers {
		pid, err := servicePID(sv.file, sv.comm)
		if err != nil {
			return nil, err
		}
		procs = append(procs, cpuProc{sv.name, pid})
	}
	return procs, nil
}

// named returns the process of procs called name, alone.
func named(procs []cpuProc, name string) []cpuProc {
	for _, p := range procs {
		if p.name == name {
			return []cpuProc{p}
		}
	}
	return nil
}

// perUnit is µs of CPU per unit between two readings of name.
func perUnit(before, after map[string]time.Duration, name string, units int64) float64 {
	return float64(after[name]-before[name]) / float64(time.Microsecond) / float64(max(units, 1))
}

// costRun is one run: the sale, in one placement, and its baselines.
type costRun struct {
	place      placement
	bin        string             // the flashgate binary of the sale ("": the suite's)
	perOrder   map[string]float64 // process → CPU µs per accepted order
	servers    float64            // sum of serverProcs
	idle       map[string]float64 // process → µs per order its idle CPU rate just before would make over the sale
	rate       float64            // orders/s, first 202 → last MySQL row
	span       time.Duration      // first 202 → last MySQL row
	requests   int64              // buy requests sent
	loadRate   float64            // their rate, requests/s over the load
	elsewhere  float64            // µs per order the machine's CPUs were busy outside the processes measured
	unmarked   int64              // orders not marked created in Redis when CPU was read
	profile    bool               // take the Go processes' profiles (the first run)
	profiles   []profileTop       // the Go processes' profiles (the first run only)
	profNotes  []string           // why a profile is missing
	commands   map[string]cmdCost // Redis command → per order
	picture    bool               // a run for the picture: see costPicture
	report     *bench.Report      // the load's report (its timeline with picture)
	bare       float64            // bare handler µs per request, closed loop, placed as the sale's gateway
	bareClient float64            // load client µs per request against it
	bareAtRate float64            // bare handler µs per request at the sale's request rate (open loop)
	shared     *sharedBase        // the round's baselines of the shared servers
}

// sharedBase are the baselines of the shared servers, measured once a
// round after its sales: where the suite's own processes sit does not
// change what Redis, RabbitMQ or MariaDB do for a client.
type sharedBase struct {
	broker    float64 // RabbitMQ µs per message, publish with confirms + consume with acks
	brokerPub float64 // its publish-with-confirms messages/s
	mariadb   float64 // MariaDB µs per row of 256-row INSERTs
	lean      float64 // Redis µs per reservation of the lean script
}

// measureCost is the cost-per-order part: -cost-runs rounds, each a sale
// of -cost-orders orders in every placement of -cost-placements (the
// placements' order turning each round, so that a drift of the machine
// weighs on each alike) with the bare handler placed as each sale, then
// the shared servers' baselines; then one more sale for the report's
// picture. With -cost-before it is the paired mode instead (costpair.go).
func (s *suite) measureCost(ctx context.Context) error {
	if s.o.costOrders < 1 || s.o.costRuns < 1 || s.o.costConsumers < 1 {
		return fmt.Errorf("-cost-orders, -cost-runs and -cost-consumers must be at least 1")
	}
	places, notes, err := s.costPlaces()
	if err != nil {
		return err
	}
	if s.o.costBefore != "" {
		return s.measureCostPair(ctx, places, notes)
	}
	started := time.Now()
	var (
		runs    []*costRun
		retried []string
	)
	for i := range s.o.costRuns {
		shared := &sharedBase{}
		for j := range places {
			r := &costRun{place: places[(i+j)%len(places)], profile: i == 0 && j == 0, shared: shared}
			if err := s.costRetried(ctx, r, fmt.Sprintf("round %d, %s", i+1, r.place.name), &retried, s.costRun); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "cost round %d, %s: all servers %.1f µs/order (%.1f× the bare handler at the sale's rate), %.0f orders/s\n",
				i+1, r.place.name, r.servers, r.servers/max(r.bareAtRate, 1e-9), r.rate)
			runs = append(runs, r)
		}
		if err := s.costShared(ctx, shared); err != nil {
			return err
		}
	}
	// The picture: one more sale, unpinned as in production, its crowd
	// kept on past the sell-out; its CPU is not in the figures.
	pic := &costRun{place: unpinnedPlace, picture: true}
	if err := s.costRetried(ctx, pic, "the picture's sale", &retried, s.costRun); err != nil {
		return err
	}
	s.picture = pic.report
	for _, g := range pictureGaps(pic.report) {
		retried = append(retried, "the picture's sale: "+g)
	}
	s.sections.cost = costSection(runs, costSetup{orders: s.o.costOrders, consumers: s.o.costConsumers, conns: s.o.conns,
		bareDur: costBareDur(s.o.dur), notes: append(notes, retried...), took: time.Since(started), picture: pic})
	for _, r := range runs {
		for _, t := range r.profiles {
			if t.svg != "" {
				s.beside = append(s.beside, besideFile{src: t.svg, name: profilePicture(t.proc)})
			}
		}
	}
	fmt.Fprint(os.Stderr, "\n"+s.sections.cost)
	return nil
}

// costPlaces are the placements of -cost-placements that this machine
// can make, and a note for each it cannot.
func (s *suite) costPlaces() ([]placement, []string, error) {
	places, err := parsePlacements(s.o.costPlacements)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if !canPin() {
		places = slices.DeleteFunc(places, func(p placement) bool { return p == pinnedPlace })
		notes = append(notes, "not pinned: this machine has no taskset or a single CPU")
	}
	if len(places) == 0 {
		return nil, nil, fmt.Errorf("-cost-placements %q: none of them can run here (%s)", s.o.costPlacements, strings.Join(notes, "; "))
	}
	return places, notes, nil
}

// costRetried runs measure on r, once more when it fails: the servers are
// shared, and another user's test may restart one in the middle of a run.
// A failure is noted in retried, as what.
func (s *suite) costRetried(ctx context.Context, r *costRun, what string, retried *[]string, measure func(context.Context, *costRun) error) error {
	fresh := *r
	err := measure(ctx, r)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "cost, %s failed, once more: %v\n", what, err)
		*retried = append(*retried, fmt.Sprintf("failed once and was run again: %s: %v", what, err))
		*r = fresh
		err = measure(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("cost, %s: %w", what, err)
	}
	return nil
}

// costRun is one run: the load placed as r.place says, a sale, then the
// bare handler placed the same way (but for the picture's sale).
func (s *suite) costRun(ctx context.Context, r *costRun) error {
	back, err := placeLoad(r.place.load)
	if err != nil {
		return err
	}
	defer back()
	if err := s.costSale(ctx, r); err != nil {
		return fmt.Errorf("sale: %w", err)
	}
	if r.picture {
		return nil
	}
	return s.costBaselines(ctx, r)
}

// costSale runs one flash sale of -cost-orders units (one per buyer) through a
// gateway with its relay, RabbitMQ, -cost-consumers consumers and MySQL, placed as r.place
// says, from r.bin, and fills r's sale figures. The load stops at the
// first sold_out answer, unless r.picture: then the crowd goes on for
// pictureTail and the load's report keeps a timeline.
func (s *suite) costSale(ctx context.Context, r *costRun) error {
	orders, consumers := s.o.costOrders, s.o.costConsumers
	dsn, drop, err := s.scratchDB(ctx)
	if err != nil {
		return err
	}
	defer drop()
	prefix := newPrefix("cost")
	defer s.dropPrefix(prefix)
	defer s.dropQueue(prefix)
	extra := []string{"FLASHGATE_MYSQL_DSN=" + dsn, "FLASHGATE_AMQP_EXCHANGE=" + prefix, "FLASHGATE_AMQP_QUEUE=" + prefix}

	procs, err := s.stackProcs()
	if err != nil {
		return err
	}
	var metrics []string
	for i := range consumers {
		addr := freeAddrs(1)[0]
		c, err := s.launch(ctx, proc{log: fmt.Sprintf("cost-consumer-%d", i), args: []string{"consumer"}, bin: r.bin, cpu: r.place.server, prefix: prefix,
			env: append(slices.Clone(extra), "FLASHGATE_CONSUMER_METRICS_ADDR="+addr), ready: "http://" + addr + "/healthz"})
		if err != nil {
			return err
		}
		defer c.Stop()
		metrics = append(metrics, "http://"+addr+"/metrics")
		procs = append(procs, cpuProc{procConsumer, c.Pid()})
	}
	gp, err := s.launch(ctx, proc{log: "cost-gateway", args: []string{"gateway"}, bin: r.bin, cpu: r.place.server, prefix: prefix, env: extra})
	if err != nil {
		return err
	}
	defer gp.Stop()
	procs = append(procs, cpuProc{procGateway, gp.Pid()})
	public, admin := gp.Public, gp.Admin

	rdb := redis.NewClient(&redis.Options{Addr: s.svc.redis})
	defer rdb.Close()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return err
	}

	// A second for the processes to finish starting (connections, the
	// relay's and consumers' topology), then one idle second: what the
	// servers do with no sale at all.
	time.Sleep(time.Second)
	idle0, err := cpuOf(procs)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	idle1, err := cpuOf(procs)
	if err != nil {
		return err
	}

	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	before, err := cpuOf(procs)
	if err != nil {
		return err
	}
	busy0, err := machineBusy()
	if err != nil {
		return err
	}
	start := time.Now()
	var b [6]byte
	rand.Read(b[:])
	sale := "cost-" + hex.EncodeToString(b[:])

	// The last row is seen by a watcher beside the load: the pipeline
	// runs on after the last 202.
	pctx, stopPoll := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		lastRow time.Time
		pollErr error
	)
	wg.Go(func() { lastRow, pollErr = waitLedger(pctx, db, sale, int64(orders)) })
	defer func() { stopPoll(); wg.Wait() }()

	// The Go processes' profiles, in the middle of the first run's sale.
	var profs sync.WaitGroup
	if r.profile {
		gwFile, consFile := filepath.Join(".run/bench", "cost-gateway.pprof"), filepath.Join(".run/bench", "cost-consumer.pprof")
		profs.Go(func() {
			if sleepCtx(ctx, time.Second) != nil {
				return
			}
			var errs [2]error
			var pw sync.WaitGroup
			pw.Go(func() { errs[0] = takeProfile(ctx, "http://"+admin+"/admin/debug/pprof/profile", gwFile) })
			pw.Go(func() {
				errs[1] = takeProfile(ctx, strings.TrimSuffix(metrics[0], "/metrics")+"/debug/pprof/profile", consFile)
			})
			pw.Wait()
			for i, t := range []profileTop{{proc: procGateway, file: gwFile}, {proc: procConsumer, file: consFile}} {
				if errs[i] == nil {
					t.rows, errs[i] = readTop(ctx, s.bin, t.file, 12)
				}
				if errs[i] == nil {
					svg := strings.TrimSuffix(t.file, ".pprof") + ".svg"
					if t.svgErr = drawProfile(ctx, s.bin, t.file, svg); t.svgErr == nil {
						t.svg = svg
					}
				}
				if errs[i] != nil {
					r.profNotes = append(r.profNotes, fmt.Sprintf("no %s profile: %v", t.proc, errs[i]))
					continue
				}
				r.profiles = append(r.profiles, t)
			}
		})
	}
	defer profs.Wait()
	o := bench.Options{URL: "http://" + public, AdminURL: "http://" + admin, NoMySQL: true, NoKeys: true,
		Sale: sale, Stock: int64(orders), Users: orders * 2, Conns: s.o.conns, UntilSoldOut: true, MaxDuration: 2 * time.Minute}
	if r.picture {
		o.NoMySQL, o.MySQLDSN, o.DrainTimeout = false, dsn, 2*time.Minute
		o.Timeline, o.SampleEvery, o.AfterSoldOut = true, pictureSampling, pictureTail
		// Buyers enough that none comes back in the tail: a buyer who
		// already holds a unit is told limit_reached, not sold_out.
		o.Users = orders * pictureUsers
	}
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	r.report = rep
	if rep.Err() != nil {
		return fmt.Errorf("invariant check failed: %w", rep.Err())
	}
	if rep.Figures.AcceptedOrders != int64(orders) {
		return fmt.Errorf("%d orders accepted of %d", rep.Figures.AcceptedOrders, orders)
	}
	wg.Wait()
	if pollErr != nil {
		return pollErr
	}
	marked := waitMarked(ctx, metrics, int64(orders), 5*time.Second)
	after, err := cpuOf(procs)
	if err != nil {
		return err
	}
	busy1, err := machineBusy()
	if err != nil {
		return err
	}
	settled := time.Now()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return fmt.Errorf("INFO commandstats: %w", err)
	}

	var rows, units int64
	var first sql.NullTime
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(quantity), 0), MIN(reserved_at) FROM orders WHERE sale_id = ?", sale).
		Scan(&rows, &units, &first); err != nil {
		return err
	}
	if rows != int64(orders) || units != int64(orders) {
		return fmt.Errorf("MySQL holds %d rows, %d units of %d orders", rows, units, orders)
	}
	// The first 202 is the earliest reservation's time (Redis TIME, in
	// ms, the clock of this machine), as the consumer wrote it: its reply
	// follows within the request's latency.
	first202 := start
	if first.Valid && first.Time.After(start) && first.Time.Before(lastRow) {
		first202 = first.Time
	}

	r.perOrder = map[string]float64{}
	r.idle = map[string]float64{}
	idleScale := float64(settled.Sub(start)) / float64(time.Second)
	for name := range after {
		r.perOrder[name] = perUnit(before, after, name, int64(orders))
		r.idle[name] = perUnit(idle0, idle1, name, int64(orders)) * idleScale
	}
	for _, name := range serverProcs {
		r.servers += r.perOrder[name]
	}
	r.elsewhere = float64(busy1-busy0) / float64(time.Microsecond) / float64(orders)
	for _, v := range r.perOrder {
		r.elsewhere -= v
	}
	r.span = lastRow.Sub(first202)
	r.rate = float64(orders) / r.span.Seconds()
	r.requests = rep.Requests
	r.loadRate = rep.Throughput
	r.unmarked = int64(orders) - marked
	r.commands = parseCommandStats(info, int64(orders))
	profs.Wait()
	return nil
}

// waitLedger polls the sale's ledger (which the consumer updates in the
// transaction that inserts the rows) until it counts orders, and returns
// when it saw that. A primary-key read every 20 ms: a small cost for
// MariaDB, unlike counting the rows, and 20 ms at most late.
func waitLedger(ctx context.Context, db *sql.DB, sale string, orders int64) (time.Time, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int64
		err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(orders), 0) FROM sale_ledger WHERE sale_id = ?", sale).Scan(&n)
		if err != nil {
			return time.Time{}, err
		}
		if n >= orders {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("only %d of %d orders in MySQL after 3 minutes", n, orders)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitMarked waits, at most wait, until the consumers behind metrics have
// marked orders orders created in Redis (off their acknowledgement path,
// so after the last row), and returns how many they had.
func waitMarked(ctx context.Context, metrics []string, orders int64, wait time.Duration) int64 {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(wait)
	for {
		var marked int64
		for _, u := range metrics {
			marked += metricValue(ctx, c, u, "flashgate_consumer_marked_total")
		}
		if marked >= orders || time.Now().After(deadline) || ctx.Err() != nil {
			return marked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricValue reads one counter from a Prometheus text page; 0 when absent.
func metricValue(ctx context.Context, c *http.Client, url, name string) int64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	res, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(n)
		}
	}
	return 0
}
