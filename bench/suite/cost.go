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
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench"
)

var (
	costOrders    = flag.Int("cost-orders", 100_000, "orders of each cost-per-order flash sale")
	costRuns      = flag.Int("cost-runs", 3, "cost-per-order runs (a sale and every baseline each); the report gives medians")
	costConsumers = flag.Int("cost-consumers", 1, "consumers of the cost-per-order flash sale")
	skipCost      = flag.Bool("skip-cost", false, "skip the cost-per-order measurement")
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

// The local stack of `make up` (deploy/local/stack.env).
const (
	costRedisAddr = "127.0.0.1:6379"
	costAMQPURL   = "amqp://guest:guest@127.0.0.1:5672/"
	costMySQLRoot = "flashgate:flashgate@tcp(127.0.0.1:3306)/"
)

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

// proc is one process whose CPU is read.
type proc struct {
	name string
	pid  int
}

// cpuOf returns the CPU time used so far by procs, summed by name.
func cpuOf(procs []proc) (map[string]time.Duration, error) {
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
func stackProcs() ([]proc, error) {
	procs := []proc{{procClient, os.Getpid()}}
	for _, s := range []struct{ name, file, comm string }{
		{procRedis, ".run/redis/redis.pid", "redis-server"},
		{procRabbit, ".run/rabbitmq/rabbitmq.pid", "beam.smp"},
		{procMariaDB, ".run/mariadb/mariadbd.pid", "mariadbd"},
	} {
		pid, err := servicePID(s.file, s.comm)
		if err != nil {
			return nil, err
		}
		procs = append(procs, proc{s.name, pid})
	}
	return procs, nil
}

// named returns the process of procs called name, alone.
func named(procs []proc, name string) []proc {
	for _, p := range procs {
		if p.name == name {
			return []proc{p}
		}
	}
	return nil
}

// perUnit is µs of CPU per unit between two readings of name.
func perUnit(before, after map[string]time.Duration, name string, units int64) float64 {
	return float64(after[name]-before[name]) / float64(time.Microsecond) / float64(max(units, 1))
}

// everyCPU is a taskset list of every CPU: the cost sale's gateway and
// consumers run where the scheduler puts them, as `make run` starts them,
// not pinned to CPU 0 (nor to the load's CPU, which they would inherit).
func everyCPU() string { return fmt.Sprintf("0-%d", machineCPUs()-1) }

// cmdCost is one Redis command's share per order.
type cmdCost struct{ calls, usec float64 }

// costRun is one run: the sale and every baseline.
type costRun struct {
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
	bare       float64            // bare handler µs per request
	bareClient float64            // load client µs per request against it
	bareAtRate float64            // bare handler µs per request at the sale's request rate (open loop)
	broker     float64            // RabbitMQ µs per message, publish with confirms + consume with acks
	brokerPub  float64            // its publish-with-confirms messages/s
	mariadb    float64            // MariaDB µs per row of 256-row INSERTs
	lean       float64            // Redis µs per reservation of the lean script
}

// measureCost is the cost-per-order part: -cost-runs runs, each a sale of
// -cost-orders orders and every baseline, and the section of the report.
func (s *suite) measureCost(ctx context.Context) error {
	if *skipCost {
		s.notes = append(s.notes, "cost per order skipped (-skip-cost)")
		return nil
	}
	if *costOrders < 1 || *costRuns < 1 || *costConsumers < 1 {
		return fmt.Errorf("-cost-orders, -cost-runs and -cost-consumers must be at least 1")
	}
	started := time.Now()
	var (
		runs    []*costRun
		retried []string
	)
	for i := range *costRuns {
		r, err := s.costRun(ctx, i == 0)
		if err != nil && ctx.Err() == nil {
			// The servers are shared: another user's test may restart
			// one in the middle of a run. Once more, then give up.
			fmt.Fprintf(os.Stderr, "cost run %d failed, once more: %v\n", i+1, err)
			retried = append(retried, fmt.Sprintf("run %d: %v", i+1, err))
			r, err = s.costRun(ctx, i == 0)
		}
		if err != nil {
			return fmt.Errorf("cost run %d: %w", i+1, err)
		}
		fmt.Fprintf(os.Stderr, "cost run %d: all servers %.1f µs/order, %.0f orders/s\n", i+1, r.servers, r.rate)
		runs = append(runs, r)
	}
	s.cost = costSection(runs, retried, *costOrders, *costConsumers, s.dur, time.Since(started))
	for _, r := range runs {
		for _, t := range r.profiles {
			if t.svg != "" {
				s.beside = append(s.beside, besideFile{src: t.svg, name: profilePicture(t.proc)})
			}
		}
	}
	fmt.Fprint(os.Stderr, "\n"+s.cost)
	return nil
}

// costRun is one run: a sale, then every baseline; profile: with the Go
// processes' profiles.
func (s *suite) costRun(ctx context.Context, profile bool) (*costRun, error) {
	r := &costRun{profile: profile}
	if err := s.costSale(ctx, r, *costOrders, *costConsumers); err != nil {
		return nil, fmt.Errorf("sale: %w", err)
	}
	if err := s.costBaselines(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// scratchDB creates a database of its own with flashgate's schema and
// returns its DSN and the function that drops it.
func (s *suite) scratchDB(ctx context.Context, tag string) (string, func(), error) {
	name := fmt.Sprintf("flashgate_test_%s_%d", tag, time.Now().UnixNano()%1e9)
	root, err := sql.Open("mysql", costMySQLRoot)
	if err != nil {
		return "", nil, err
	}
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		root.Close()
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop := func() {
		if _, err := root.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			fmt.Fprintln(os.Stderr, "drop database:", err)
		}
		root.Close()
	}
	dsn := costMySQLRoot + name + "?parseTime=true"
	migrate := exec.CommandContext(ctx, s.bin, "migrate")
	migrate.Env = append(os.Environ(), "FLASHGATE_MYSQL_DSN="+dsn)
	if b, err := migrate.CombinedOutput(); err != nil {
		drop()
		return "", nil, fmt.Errorf("migrate: %v: %s", err, b)
	}
	return dsn, drop, nil
}

// costSale runs one flash sale of orders units (one per buyer) through a
// gateway with its relay, RabbitMQ, consumers and MySQL, and fills r's
// sale figures.
func (s *suite) costSale(ctx context.Context, r *costRun, orders, consumers int) error {
	dsn, drop, err := s.scratchDB(ctx, "cost")
	if err != nil {
		return err
	}
	defer drop()
	prefix := fmt.Sprintf("cost%d", time.Now().UnixNano()%1e9)
	defer dropPrefix(prefix)
	defer dropQueue(prefix)
	extra := []string{"FLASHGATE_MYSQL_DSN=" + dsn, "FLASHGATE_AMQP_EXCHANGE=" + prefix, "FLASHGATE_AMQP_QUEUE=" + prefix}

	procs, err := stackProcs()
	if err != nil {
		return err
	}
	var metrics []string
	for i := range consumers {
		addr := freeAddr()
		c := pinned(everyCPU(), s.bin, "consumer")
		c.Env = gatewayEnv("127.0.0.1:0", "127.0.0.1:0", prefix, append(extra, "FLASHGATE_CONSUMER_METRICS_ADDR="+addr))
		if err := s.start(c, fmt.Sprintf("cost-consumer-%d", i)); err != nil {
			return err
		}
		defer s.stop(c)
		if err := waitHTTP(ctx, "http://"+addr+"/healthz"); err != nil {
			return err
		}
		metrics = append(metrics, "http://"+addr+"/metrics")
		procs = append(procs, proc{procConsumer, c.Process.Pid})
	}
	public, admin := freePair()
	gw := pinned(everyCPU(), s.bin, "gateway")
	gw.Env = gatewayEnv(public, admin, prefix, extra)
	if err := s.start(gw, "cost-gateway"); err != nil {
		return err
	}
	defer s.stop(gw)
	if err := waitHTTP(ctx, "http://"+public+"/readyz"); err != nil {
		return err
	}
	procs = append(procs, proc{procGateway, gw.Process.Pid})

	rdb := redis.NewClient(&redis.Options{Addr: costRedisAddr})
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
	rep, err := bench.Run(ctx, bench.Options{URL: "http://" + public, AdminURL: "http://" + admin, NoMySQL: true, NoKeys: true,
		Sale: sale, Stock: int64(orders), Users: orders * 2, Conns: s.conns, UntilSoldOut: true, MaxDuration: 2 * time.Minute})
	if err != nil {
		return err
	}
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

// parseCommandStats reads INFO commandstats
// ("cmdstat_evalsha:calls=3,usec=12,usec_per_call=4.00,...") into each
// command's calls and µs per order.
func parseCommandStats(info string, orders int64) map[string]cmdCost {
	m := map[string]cmdCost{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var c cmdCost
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				c.calls = n / float64(orders)
			case "usec":
				c.usec = n / float64(orders)
			}
		}
		m[strings.ToUpper(strings.TrimPrefix(name, "cmdstat_"))] = c
	}
	return m
}

// costBaselines measures every baseline of one run.
func (s *suite) costBaselines(ctx context.Context, r *costRun) error {
	var err error
	if r.bare, r.bareClient, err = s.costBare(ctx, 0); err != nil {
		return fmt.Errorf("bare handler: %w", err)
	}
	if r.bareAtRate, _, err = s.costBare(ctx, r.loadRate); err != nil {
		return fmt.Errorf("bare handler at the sale's rate: %w", err)
	}
	if r.broker, r.brokerPub, err = costBroker(ctx); err != nil {
		return fmt.Errorf("RabbitMQ alone: %w", err)
	}
	if r.mariadb, err = s.costMariaDB(ctx); err != nil {
		return fmt.Errorf("MariaDB alone: %w", err)
	}
	if r.lean, err = costLean(ctx); err != nil {
		return fmt.Errorf("lean reserve script: %w", err)
	}
	return nil
}

// costBare is the bare fasthttp handler's CPU per request, and the load
// client's against it, placed as the sale's gateway was: as fast as it
// answers (rate 0, closed loop), or at rate requests/s on a fixed schedule,
// the sale's own pace. At a sale's pace a server idles between requests
// and pays a wake-up per request (epoll, the scheduler, the reply's
// write waking an idle client), which a server kept busy shares among many:
// the same handler then costs twice or more per request.
func (s *suite) costBare(ctx context.Context, rate float64) (server, client float64, err error) {
	addr := freeAddr()
	cmd := pinned(everyCPU(), s.bare, "-addr", addr, "-reply", "accepted")
	if err := s.start(cmd, "cost-bare"); err != nil {
		return 0, 0, err
	}
	defer s.stop(cmd)
	if err := waitHTTP(ctx, "http://"+addr+"/"); err != nil {
		return 0, 0, err
	}
	procs := []proc{{"bare", cmd.Process.Pid}, {procClient, os.Getpid()}}
	before, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	rep, err := bench.Run(ctx, bench.Options{URL: "http://" + addr, Raw: true, Conns: s.conns, Duration: s.dur,
		Users: 1_000_000_000, Stock: 1, NoKeys: true, Rate: rate})
	if err != nil {
		return 0, 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	return perUnit(before, after, "bare", rep.Requests), perUnit(before, after, procClient, rep.Requests), nil
}

// costBroker is RabbitMQ's CPU per message of bench.BrokerRates (persistent
// messages of an order's size to a fresh quorum queue, as the relay's:
// published with confirms, then consumed with acks), and its publish rate.
func costBroker(ctx context.Context) (perMsg, publish float64, err error) {
	procs, err := stackProcs()
	if err != nil {
		return 0, 0, err
	}
	procs = named(procs, procRabbit)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	publish, _, err = bench.BrokerRates(ctx, costAMQPURL, brokerMessages, brokerWindow)
	if err != nil {
		return 0, 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	return perUnit(before, after, procRabbit, brokerMessages), publish, nil
}

// costMariaDB is MariaDB's CPU per row of multi-row INSERTs of mariaBatch
// orders (each its own transaction) into flashgate's orders table, in a
// scratch database, from mariaConns connections.
func (s *suite) costMariaDB(ctx context.Context) (float64, error) {
	dsn, drop, err := s.scratchDB(ctx, "costrows")
	if err != nil {
		return 0, err
	}
	defer drop()
	// Values in the statement's text: one round trip per INSERT, no
	// prepare and close around it.
	db, err := sql.Open("mysql", dsn+"&interpolateParams=true")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(mariaConns)
	db.SetMaxIdleConns(mariaConns)
	if err := db.PingContext(ctx); err != nil {
		return 0, err
	}
	query := "INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at, state, pay_by) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,?),", mariaBatch), ",")
	procs, err := stackProcs()
	if err != nil {
		return 0, err
	}
	procs = named(procs, procMariaDB)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	batches := (mariaRows + mariaBatch - 1) / mariaBatch
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	at := time.Now().UTC().Truncate(time.Millisecond)
	for range mariaConns {
		wg.Go(func() {
			args := make([]any, 0, 7*mariaBatch)
			for {
				i := int(next.Add(1) - 1)
				if i >= batches {
					return
				}
				args = args[:0]
				for j := range mariaBatch {
					n := i*mariaBatch + j
					args = append(args, fmt.Sprintf("%028x", n), "costrows", fmt.Sprintf("u%010d-%05d", n, n%100000), 1, at, "confirmed", nil)
				}
				if _, err := db.ExecContext(ctx, query, args...); err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	rows := int64(batches * mariaBatch)
	var got int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&got); err != nil {
		return 0, err
	}
	if got != rows {
		return 0, fmt.Errorf("%d rows inserted of %d", got, rows)
	}
	return perUnit(before, after, procMariaDB, rows), nil
}

// keepFirst keeps the first error.
func keepFirst(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// leanScript is the least a reservation must do in Redis, batched: check
// the stock, count the unit against the buyer's limit, record the order,
// and count the units sold once per call. redis.calls per call: 2 + 2 per
// reservation (the real reserve script makes about six per reservation).
//
// KEYS[1] meta hash (stock, sold, limit), KEYS[2] users hash, KEYS[3]
// orders hash; ARGV[1] now (ms), then order id and user id per
// reservation of one unit. Returns a code per reservation: 0 accepted,
// 5 limit reached, 6 sold out (scripts/codes.go's values).
const leanScript = `
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit')
local left = (tonumber(m[1]) or 0) - (tonumber(m[2]) or 0)
local limit = tonumber(m[3]) or 0
local now = ARGV[1]
local n = 0
local out = {}
for i = 2, #ARGV, 2 do
  local oid, user = ARGV[i], ARGV[i + 1]
  if left <= 0 then
    out[#out + 1] = 6
  elseif redis.call('HINCRBY', KEYS[2], user, 1) > limit then
    redis.call('HINCRBY', KEYS[2], user, -1)
    out[#out + 1] = 5
  else
    left = left - 1
    n = n + 1
    redis.call('HSET', KEYS[3], oid, 'q:C:0:' .. now .. ':1:' .. user)
    out[#out + 1] = 0
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'sold', n)
end
return out
`

// costLean is Redis's CPU per reservation of leanScript, leanPerCall
// reservations per call, from leanConns connections, on keys of its own.
func costLean(ctx context.Context) (float64, error) {
	rdb := redis.NewClient(&redis.Options{Addr: costRedisAddr, PoolSize: leanConns})
	defer rdb.Close()
	var b [6]byte
	rand.Read(b[:])
	tag := "{costlean" + hex.EncodeToString(b[:]) + "}"
	keys := []string{tag + ":meta", tag + ":users", tag + ":orders"}
	defer rdb.Unlink(context.WithoutCancel(ctx), keys...)
	total := int64(leanPerCall * leanCalls)
	if err := rdb.HSet(ctx, keys[0], "stock", total, "sold", 0, "limit", 1).Err(); err != nil {
		return 0, err
	}
	sha, err := rdb.ScriptLoad(ctx, leanScript).Result()
	if err != nil {
		return 0, err
	}
	procs, err := stackProcs()
	if err != nil {
		return 0, err
	}
	procs = named(procs, procRedis)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range leanConns {
		wg.Go(func() {
			args := make([]any, 1+2*leanPerCall)
			args[0] = now
			for {
				c := next.Add(1) - 1
				if c >= leanCalls {
					return
				}
				for j := range leanPerCall {
					n := c*leanPerCall + int64(j)
					args[1+2*j], args[2+2*j] = fmt.Sprintf("%028x", n), fmt.Sprintf("u%010d-%05d", n, n%100000)
				}
				codes, err := rdb.EvalSha(ctx, sha, keys, args...).Int64Slice()
				if err == nil && slices.ContainsFunc(codes, func(c int64) bool { return c != 0 }) {
					err = fmt.Errorf("a reservation was refused: %v", codes)
				}
				if err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	sold, err := rdb.HGet(ctx, keys[0], "sold").Int64()
	if err != nil {
		return 0, err
	}
	if sold != total {
		return 0, fmt.Errorf("sold %d of %d", sold, total)
	}
	return perUnit(before, after, procRedis, total), nil
}

// median returns the median of f over runs, and the smallest and largest.
func median(runs []*costRun, f func(*costRun) float64) (mid, lo, hi float64) {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	n := len(v)
	mid = v[n/2]
	if n%2 == 0 {
		mid = (v[n/2-1] + v[n/2]) / 2
	}
	return mid, v[0], v[n-1]
}

// costSection is the report's section: the table, Redis by command, and
// how it was measured.
func costSection(runs []*costRun, retried []string, orders, consumers int, dur, took time.Duration) string {
	var b strings.Builder
	n := len(runs)
	fmt.Fprintf(&b, "\n## Cost per order\n\n"+
		"One flash sale of %d orders (one unit per buyer, %d buyers) through the whole stack with every stage live "+
		"(a gateway with its relay, Redis, RabbitMQ, %d consumer(s), MariaDB), run %d time(s), each run followed by its baselines. "+
		"CPU is utime + stime of each process from `/proc/PID/stat`, read just before the first buy and again once the last order "+
		"is in MySQL and marked created in Redis, divided by the accepted orders. Figures are medians over the runs, the range in brackets; "+
		"ratios are of the medians.\n\n", orders, orders*2, consumers, n)
	spread := func(mid, lo, hi float64, format string) string {
		if n == 1 {
			return fmt.Sprintf(format, mid)
		}
		return fmt.Sprintf(format+" ("+format+"–"+format+")", mid, lo, hi)
	}
	type line struct {
		name, base string
		v, bv      func(*costRun) float64
		target     func(v, ratio float64) (string, bool)
	}
	// The targets are issue 22's: each stage within a small multiple of
	// its own floor, the whole within 3.5× the bare handler.
	ratioAtMost := func(limit float64, of string) func(_, ratio float64) (string, bool) {
		return func(_, ratio float64) (string, bool) { return fmt.Sprintf("≤ %.2g× %s", limit, of), ratio <= limit }
	}
	proc := func(name string) func(*costRun) float64 { return func(r *costRun) float64 { return r.perOrder[name] } }
	bare := func(r *costRun) float64 { return r.bare }
	atRate := func(r *costRun) float64 { return r.bareAtRate }
	lines := []line{
		{name: procGateway, v: proc(procGateway), base: "bare fasthttp handler, per request", bv: bare, target: ratioAtMost(1.5, "its baseline")},
		{name: procGateway, v: proc(procGateway), base: "bare fasthttp handler at the sale's request rate, per request", bv: atRate, target: ratioAtMost(1.5, "its baseline")},
		{name: procRedis, v: proc(procRedis), base: fmt.Sprintf("lean reserve script, %d per call, per reservation", leanPerCall),
			bv: func(r *costRun) float64 { return r.lean }, target: ratioAtMost(1.5, "its baseline")},
		{name: procRabbit, v: proc(procRabbit), base: "RabbitMQ alone, per message (publish with confirms + consume with acks)",
			bv: func(r *costRun) float64 { return r.broker }, target: ratioAtMost(0.25, "its baseline")},
		{name: fmt.Sprintf("%s (%d)", procConsumer, consumers), v: proc(procConsumer), base: "bare fasthttp handler, per request",
			bv: bare, target: ratioAtMost(0.25, "the bare handler")},
		{name: procMariaDB, v: proc(procMariaDB), base: fmt.Sprintf("MariaDB alone, per row of %d-row INSERTs", mariaBatch),
			bv: func(r *costRun) float64 { return r.mariadb }, target: ratioAtMost(1.3, "its baseline")},
		{name: "**all servers**", v: func(r *costRun) float64 { return r.servers }, base: "bare fasthttp handler, per request",
			bv: bare, target: ratioAtMost(3.5, "its baseline")},
		{name: "**all servers**", v: func(r *costRun) float64 { return r.servers }, base: "bare fasthttp handler at the sale's request rate, per request",
			bv: atRate, target: ratioAtMost(3.5, "its baseline")},
		{name: procClient + " (this suite)", v: proc(procClient), base: "the same client against the bare handler, per request",
			bv: func(r *costRun) float64 { return r.bareClient }},
	}
	b.WriteString("| process | CPU µs per order | baseline | baseline µs | ratio | target |\n| --- | ---: | --- | ---: | ---: | --- |\n")
	for _, l := range lines {
		v, lo, hi := median(runs, l.v)
		base, bval, ratio, target := "", "", 0.0, ""
		if l.bv != nil {
			bm, blo, bhi := median(runs, l.bv)
			base, bval = l.base, spread(bm, blo, bhi, "%.1f")
			if bm > 0 {
				ratio = v / bm
			}
		}
		if l.target != nil {
			t, ok := l.target(v, ratio)
			target = fmt.Sprintf("%s (%s)", t, verdict(ok))
		}
		r := ""
		if ratio > 0 {
			r = fmt.Sprintf("%.1f×", ratio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", l.name, spread(v, lo, hi, "%.1f"), base, bval, r, target)
	}
	rate, rlo, rhi := median(runs, func(r *costRun) float64 { return r.rate })
	pub, plo, phi := median(runs, func(r *costRun) float64 { return r.brokerPub })
	fmt.Fprintf(&b, "| **orders/s**, first 202 → last MySQL row | %s | RabbitMQ alone: publish with confirms, msg/s | %s | %.2f× | ≥ 1.0× its baseline (%s) |\n",
		spread(rate, rlo, rhi, "%.0f"), spread(pub, plo, phi, "%.0f"), rate/max(pub, 1), verdict(rate >= pub))

	// Redis by command: the median of each command over the runs.
	names := map[string]bool{}
	for _, r := range runs {
		for c := range r.commands {
			names[c] = true
		}
	}
	type cmdLine struct {
		name        string
		calls, usec float64
	}
	var cmds []cmdLine
	for c := range names {
		calls, _, _ := median(runs, func(r *costRun) float64 { return r.commands[c].calls })
		usec, _, _ := median(runs, func(r *costRun) float64 { return r.commands[c].usec })
		if usec >= 0.01 {
			cmds = append(cmds, cmdLine{c, calls, usec})
		}
	}
	slices.SortFunc(cmds, func(a, b cmdLine) int {
		if a.usec != b.usec {
			if a.usec > b.usec {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	redisCPU, _, _ := median(runs, proc(procRedis))
	fmt.Fprintf(&b, "\nRedis by command (`CONFIG RESETSTAT` before the sale, `INFO commandstats` after), per order; Redis's whole CPU was %.1f µs per order. "+
		"EVALSHA's time includes the `redis.call`s of its scripts, which are listed again under their own names:\n\n"+
		"| command | calls per order | µs per order |\n| --- | ---: | ---: |\n", redisCPU)
	for _, c := range cmds {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f |\n", c.name, c.calls, c.usec)
	}

	idle := func(name string) float64 {
		v, _, _ := median(runs, func(r *costRun) float64 { return r.idle[name] })
		return v
	}
	span, _, _ := median(runs, func(r *costRun) float64 { return r.span.Seconds() })
	reqs, _, _ := median(runs, func(r *costRun) float64 { return float64(r.requests) })
	fmt.Fprintf(&b, "\n- The sale took %.1f s from the first 202 (the earliest order's reserved_at) to the last MySQL row (the sale's ledger, read every 20 ms); "+
		"%.0f buy requests for %d orders (the load stops at the first sold_out). The gateway and consumers run on every CPU, "+
		"the servers as `make up` started them, the load client is this suite (on CPU 1 under `make bench`).\n", span, reqs, orders)
	fmt.Fprintf(&b, "- Idle CPU: over one idle second just before each sale, scaled to the sale's length, the processes used the equivalent of "+
		"Redis %.1f, RabbitMQ %.1f, MariaDB %.1f, gateway %.1f, consumer(s) %.1f µs per order (timers, and other users of the shared servers); "+
		"that much of each figure above is not the sale's.\n",
		idle(procRedis), idle(procRabbit), idle(procMariaDB), idle(procGateway), idle(procConsumer))
	elsewhere, _, _ := median(runs, func(r *costRun) float64 { return r.elsewhere })
	fmt.Fprintf(&b, "- Elsewhere: the machine's CPUs were busy outside the processes above for the equivalent of %.1f µs per order "+
		"during the sale (`/proc/stat`): other work on this machine, which also slows what is measured.\n", max(elsewhere, 0))
	var unmarked int64
	for _, r := range runs {
		unmarked = max(unmarked, r.unmarked)
	}
	if unmarked > 0 {
		fmt.Fprintf(&b, "- In one run %d orders were not yet marked created in Redis 5 s after the last row when CPU was read.\n", unmarked)
	}
	loadRate, _, _ := median(runs, func(r *costRun) float64 { return r.loadRate })
	fmt.Fprintf(&b, "- The bare handler is measured twice: as fast as it answers (closed loop, as issue 22 set its targets), and on a fixed schedule "+
		"at the sale's own request rate (%.0f requests/s, the median of the runs' loads), where it idles between requests as the gateway does and "+
		"pays a wake-up per request (epoll, the scheduler, the reply's write waking an idle client) that a busy server shares among many. "+
		"The second is the floor in the same conditions; both ratios are given.\n", loadRate)
	fmt.Fprintf(&b, "- Baselines: the bare handler (bench/bare) under the same client for %v; RabbitMQ alone is bench.BrokerRates "+
		"(%d persistent messages to a fresh quorum queue, up to %d unconfirmed, then consumed with acks), its CPU per message "+
		"for both halves; MariaDB alone inserts %d rows into flashgate's orders table in a scratch database, %d rows per INSERT "+
		"and transaction, from %d connections; the lean reserve script (cost.go) checks the stock, counts the unit against "+
		"the buyer's limit (HINCRBY), records the order (HSET) and adds the units sold once per call: %d redis.calls per %d reservations.\n",
		dur, brokerMessages, brokerWindow, mariaRows, mariaBatch, mariaConns, 2+2*leanPerCall, leanPerCall)
	for _, e := range retried {
		fmt.Fprintf(&b, "- Failed once and was run again: %s.\n", e)
	}
	fmt.Fprintf(&b, "- This part took %s (%d run(s)).\n", took.Round(time.Second), n)
	for _, r := range runs {
		if r.profile {
			b.WriteString(profileSection(r.profiles, r.perOrder, r.profNotes))
		}
	}
	return b.String()
}
