// Command suite is `make bench`: it measures flashgate side by side with its
// baselines in one run on this machine and writes docs/benchmarks.md.
//
// Every comparison is a ratio of two figures taken minutes apart on the same
// machine with the same client, never an absolute threshold: these machines
// are shared and noisy. Servers run pinned to CPU 0 and the load (this
// process) to CPU 1 when taskset is available.
//
//	go build -o .run/bench/suite ./bench/suite && .run/bench/suite -out docs/benchmarks.md
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

func main() {
	out := flag.String("out", "docs/benchmarks.md", "where to write the report")
	dur := flag.Duration("duration", 5*time.Second, "length of each HTTP measurement")
	conns := flag.Int("conns", 64, "client connections")
	orders := flag.Int("orders", 20000, "orders of each pipeline measurement")
	skipGo := flag.Bool("skip-go-bench", false, "skip the go test benchmarks")
	skipPipe := flag.Bool("skip-pipeline", false, "skip the pipeline measurements")
	only := flag.String("only", "", `run one part alone: "auth" (buyer authentication on vs off), "cost" (cost per order), "zeroloss" (appendfsync always vs everysec), "buckets" (one hot sale, K = 1 vs K = 3, on a Redis Cluster), "scale" (10,000 sales through Redis restarts), "room" (the waiting room's joins, polls and fairness), "replicated" (min_replicas 1 vs 0 on a primary and replica), "failover" (kill -9 of a cluster primary: promotion and first 202)`)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	var err error
	switch *only {
	case "":
		err = run(ctx, *out, *dur, *conns, *orders, *skipGo, *skipPipe)
	case "auth":
		err = runOnly(ctx, *out, *dur, *conns, func(s *suite, ctx context.Context) error { return s.measureAuth(ctx, nil, nil) })
	case "cost":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureCost)
	case "zeroloss":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureZeroLoss)
	case "buckets":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureBuckets)
	case "scale":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureScale)
	case "room":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureRoom)
	case "replicated":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureReplicated)
	case "failover":
		err = runOnly(ctx, *out, *dur, *conns, (*suite).measureFailover)
	default:
		err = fmt.Errorf("-only %q: want auth, cost, zeroloss, buckets, scale, room, replicated or failover", *only)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench suite:", err)
		os.Exit(1)
	}
}

type suite struct {
	bin, bare string // built binaries
	dur       time.Duration
	conns     int
	procs     []*exec.Cmd
	servers   []*localstack.RedisServer // redis-servers of its own (startRedis)
	rows      []row
	notes     []string
	cost      string // the cost-per-order section (cost.go); "" when not measured
	buckets   string // the buckets section (buckets.go); "" when not measured
	scale     string // the shop-scale section (scale.go); "" when not measured
	room      string // the waiting-room section (room.go); "" when not measured

	// The replicated-mode and failover sections (replicated.go,
	// failover.go); "" when not measured.
	replicated, failover string
	// picture is the main run (batching on, one hot sale), drawn beside
	// the report (pictureName); nil when it was not measured.
	picture *bench.Report
	// beside are files the report shows, copied next to it (the cost
	// part's call graphs).
	beside []besideFile
}

// besideFile is a file of the suite's folder copied next to the report as name.
type besideFile struct{ src, name string }

// pictureName is the main run's SVG, written next to the report.
const pictureName = "bench-sale.svg"

// row is one line of the report's main table.
type row struct {
	group, name   string
	value         float64 // the figure compared
	unit          string
	prec          int // decimals of value in the report
	p50, p99      time.Duration
	baseline      string  // name of the row it is compared with ("" for none)
	target        float64 // minimum ratio value/baseline, 0 for none
	ratio         float64
	comparedValue float64
}

func run(ctx context.Context, out string, dur time.Duration, conns, orders int, skipGo, skipPipe bool) error {
	s := &suite{dur: dur, conns: conns}
	defer s.stopAll()
	if err := s.build(ctx); err != nil {
		return err
	}
	started := time.Now()

	// 1. The buy path on one hot sale.
	bareAcc, err := s.measureBare(ctx, "accepted")
	if err != nil {
		return err
	}
	s.add(row{group: "buy path, one hot sale", name: "bare fasthttp handler (ceiling)", value: bareAcc.Throughput, unit: "req/s", p50: bareAcc.All.P50, p99: bareAcc.All.P99})
	on, err := s.measureGateway(ctx, "active", nil, bench.Options{Stock: 1_000_000_000, Users: 1_000_000_000, Timeline: true})
	if err != nil {
		return err
	}
	s.picture = on
	off, err := s.measureGateway(ctx, "active", []string{"FLASHGATE_BATCH_MAX_SIZE=1"}, bench.Options{Stock: 1_000_000_000, Users: 1_000_000_000})
	if err != nil {
		return err
	}
	s.add(row{group: "buy path, one hot sale", name: "gateway, batching off", value: off.Throughput, unit: "req/s", p50: off.All.P50, p99: off.All.P99})
	s.add(row{group: "buy path, one hot sale", name: "gateway, batching on", value: on.Throughput, unit: "req/s", p50: on.All.P50, p99: on.All.P99,
		baseline: "gateway, batching off", target: 2.5})
	s.add(row{group: "buy path, one hot sale", name: "gateway, batching on (vs ceiling)", value: on.Throughput, unit: "req/s", p50: on.All.P50, p99: on.All.P99,
		baseline: "bare fasthttp handler (ceiling)", target: 0.6})

	// 2. The sold-out path.
	bareSO, err := s.measureBare(ctx, "sold_out")
	if err != nil {
		return err
	}
	s.add(row{group: "sold-out path", name: "bare fasthttp handler, 410 (ceiling)", value: bareSO.Throughput, unit: "req/s", p50: bareSO.All.P50, p99: bareSO.All.P99})
	so, err := s.measureGateway(ctx, "sold-out", nil, bench.Options{Stock: 0, Users: 1_000_000_000})
	if err != nil {
		return err
	}
	s.add(row{group: "sold-out path", name: "gateway, sold-out sale", value: so.Throughput, unit: "req/s", p50: so.All.P50, p99: so.All.P99,
		baseline: "bare fasthttp handler, 410 (ceiling)", target: 0.9})

	// 2b. What buyer authentication costs on both paths.
	if err := s.measureAuth(ctx, on, so); err != nil {
		return err
	}

	// 3. Tail latency at half the peak rate (open loop).
	half, err := s.measureGateway(ctx, "active", nil, bench.Options{Stock: 1_000_000_000, Users: 1_000_000_000, Rate: on.Throughput / 2})
	if err != nil {
		return err
	}
	s.add(row{group: "tail latency", name: fmt.Sprintf("gateway at half the peak rate (%.0f req/s, open loop): p99/p50", on.Throughput/2),
		value: float64(half.All.P99) / float64(max(half.All.P50, 1)), unit: "× p50", p50: half.All.P50, p99: half.All.P99})
	s.notes = append(s.notes, fmt.Sprintf("Target p99 ≤ 10 × p50 at half the peak rate: p99/p50 = %.1f (%s).",
		float64(half.All.P99)/float64(max(half.All.P50, 1)), verdict(float64(half.All.P99)/float64(max(half.All.P50, 1)) <= 10)))

	// 4. The pipeline, 202 to MySQL row, against the broker's own rates.
	if skipPipe {
		s.notes = append(s.notes, "pipeline skipped (-skip-pipeline)")
	} else if err := s.measurePipeline(ctx, orders); err != nil {
		s.notes = append(s.notes, "pipeline not measured: "+err.Error())
	}

	// 4b. Cost per order: every process's CPU per order and its baselines.
	if err := s.measureCost(ctx); err != nil {
		s.notes = append(s.notes, "cost per order not measured: "+err.Error())
	}

	// 4c. What zero-loss mode (appendfsync always) costs the reserve path.
	if err := s.measureZeroLoss(ctx); err != nil {
		s.notes = append(s.notes, "zero-loss mode not measured: "+err.Error())
	}

	// 4d. One hot sale in 1 and in 3 buckets on a Redis Cluster.
	if err := s.measureBuckets(ctx); err != nil {
		s.notes = append(s.notes, "buckets not measured: "+err.Error())
	}

	// 4e. A shop's scale: 10,000 sales through Redis restarts.
	if err := s.measureScale(ctx); err != nil {
		s.notes = append(s.notes, "shop scale not measured: "+err.Error())
	}

	// 4f. The waiting room: joins and polls against the bare handler and
	// the reserve path, and the fairness of both modes.
	if err := s.measureRoom(ctx); err != nil {
		s.notes = append(s.notes, "waiting room not measured: "+err.Error())
	}

	// 4g. Replicated mode (min_replicas 1) against the default, on a
	// primary and replica of the suite's own.
	if err := s.measureReplicated(ctx); err != nil {
		s.notes = append(s.notes, "replicated mode not measured: "+err.Error())
	}

	// 4h. The window of a Redis Cluster failover: kill -9 of a primary
	// under load, its promotion, its sales' first 202.
	if err := s.measureFailover(ctx); err != nil {
		s.notes = append(s.notes, "failover not measured: "+err.Error())
	}

	// 5. Go benchmarks: strategies and the handler.
	var goBench string
	if !skipGo {
		goBench, err = s.goBenchmarks(ctx)
		if err != nil {
			s.notes = append(s.notes, "go benchmarks failed: "+err.Error())
		}
	}
	return s.write(out, goBench, time.Since(started))
}

// build builds the binaries the suite runs.
func (s *suite) build(ctx context.Context) error {
	dir, err := filepath.Abs(".run/bench")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s.bin, s.bare = filepath.Join(dir, "flashgate"), filepath.Join(dir, "bare")
	for _, b := range []struct{ out, pkg string }{{s.bin, "./cmd/flashgate"}, {s.bare, "./bench/bare"}} {
		if err := runCmd(ctx, "go", "build", "-trimpath", "-o", b.out, b.pkg); err != nil {
			return err
		}
	}
	return nil
}

// Names of the auth-off rows that the auth-on rows are compared with.
const (
	rowBuyOff     = "gateway, batching on"
	rowSoldOutOff = "gateway, sold-out sale"
)

// measureAuth measures the buy path and the sold-out path with buyer
// authentication on (HS256, a token per simulated buyer, signed by the load
// generator with the secret the gateway was given), each beside the same
// path with it off: acceptedOff and soldOutOff, measured earlier in this
// run, or here when nil.
func (s *suite) measureAuth(ctx context.Context, acceptedOff, soldOutOff *bench.Report) error {
	var err error
	active := bench.Options{Stock: 1_000_000_000, Users: 1_000_000_000}
	soldOut := bench.Options{Stock: 0, Users: 1_000_000_000}
	if acceptedOff == nil {
		if acceptedOff, err = s.measureGateway(ctx, "active", nil, active); err != nil {
			return err
		}
		s.add(row{group: "buyer authentication", name: rowBuyOff, value: acceptedOff.Throughput, unit: "req/s", p50: acceptedOff.All.P50, p99: acceptedOff.All.P99})
	}
	if soldOutOff == nil {
		if soldOutOff, err = s.measureGateway(ctx, "sold-out", nil, soldOut); err != nil {
			return err
		}
		s.add(row{group: "buyer authentication", name: rowSoldOutOff, value: soldOutOff.Throughput, unit: "req/s", p50: soldOutOff.All.P50, p99: soldOutOff.All.P99})
	}
	var key [24]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	secret := hex.EncodeToString(key[:]) // 48 bytes: above the gateway's minimum of 32
	env := []string{"FLASHGATE_BUYER_JWT_SECRET=" + secret}
	for _, m := range []struct {
		name, baseline string
		o              bench.Options
		want           string // the status every answer must have
	}{
		{"gateway, batching on, buyer authentication on (HS256)", rowBuyOff, active, "accepted"},
		{"gateway, sold-out sale, buyer authentication on (HS256)", rowSoldOutOff, soldOut, "sold_out"},
	} {
		m.o.JWTSecret = secret
		rep, err := s.measureGateway(ctx, "auth-"+m.want, env, m.o)
		if err != nil {
			return err
		}
		// A token the gateway refused would make this a measurement of
		// 401s: every answer must be the one auth off gets.
		for _, oc := range rep.Outcomes {
			if oc.Status != m.want && oc.Count > 0 {
				return fmt.Errorf("%s: %d answers %s (want only %s)", m.name, oc.Count, oc.Status, m.want)
			}
		}
		s.add(row{group: "buyer authentication", name: m.name, value: rep.Throughput, unit: "req/s", p50: rep.All.P50, p99: rep.All.P99,
			baseline: m.baseline})
	}
	s.notes = append(s.notes, "Buyer authentication on: every request carries an HS256 JWT for its own buyer (a fresh buyer each "+
		"request, so no token is ever seen twice), which the gateway verifies before anything else; "+
		"the ratio is the throughput kept against the same path with authentication off. "+
		"`go test -bench 'SoldOutHandlerAuth|BuyerToken' ./gateway/` shows the check alone per algorithm.")
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func (s *suite) add(r row) {
	if r.baseline != "" {
		for _, b := range s.rows {
			if b.name == r.baseline && b.value > 0 {
				r.ratio = r.value / b.value
				r.comparedValue = b.value
			}
		}
	}
	s.rows = append(s.rows, r)
	fmt.Fprintf(os.Stderr, "%-60s %12.*f %s  p50 %v p99 %v", r.name, r.prec, r.value, r.unit, r.p50, r.p99)
	if r.baseline != "" {
		fmt.Fprintf(os.Stderr, "  %.2f× %s", r.ratio, r.baseline)
	}
	fmt.Fprintln(os.Stderr)
}

// machineCPUs counts the machine's CPUs, not this process's (which the
// Makefile pins to one).
func machineCPUs() int {
	out, err := exec.Command("nproc", "--all").Output()
	if err != nil {
		return runtime.NumCPU()
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return runtime.NumCPU()
	}
	return n
}

// pinned prefixes a command with taskset when it is available.
func pinned(cpu string, name string, args ...string) *exec.Cmd {
	if path, err := exec.LookPath("taskset"); err == nil && machineCPUs() > 1 {
		return exec.Command(path, append([]string{"-c", cpu, name}, args...)...)
	}
	return exec.Command(name, args...)
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago (localstack.FreeAddrs).
func freeAddrs(n int) []string {
	addrs, err := localstack.FreeAddrs(n)
	if err != nil {
		panic(err)
	}
	return addrs
}

func freeAddr() string { return freeAddrs(1)[0] }

// freePair is a gateway's two addresses, public and admin.
func freePair() (string, string) {
	a := freeAddrs(2)
	return a[0], a[1]
}

func (s *suite) start(cmd *exec.Cmd, logName string) error {
	f, err := os.Create(filepath.Join(".run/bench", logName+".log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	s.procs = append(s.procs, cmd)
	return nil
}

func (s *suite) stop(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func (s *suite) stopAll() {
	for _, c := range s.procs {
		if c.ProcessState == nil {
			s.stop(c)
		}
	}
	for _, r := range s.servers {
		r.Stop()
	}
}

// startRedis starts a redis-server of the suite's own on free ports
// (localstack.StartRedisServer), on every CPU as `make up` starts Redis (not
// on the load's, which this process would pass on); stopAll stops it too.
func (s *suite) startRedis(ctx context.Context, o localstack.RedisOptions) (*localstack.RedisServer, error) {
	o.Command = func(name string, args ...string) *exec.Cmd { return pinned(everyCPU(), name, args...) }
	r, err := localstack.StartRedisServer(ctx, o)
	if err != nil {
		return nil, err
	}
	s.servers = append(s.servers, r)
	return r, nil
}

func waitHTTP(ctx context.Context, url string) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode < 500 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer", url)
}

func (s *suite) measureBare(ctx context.Context, reply string) (*bench.Report, error) {
	addr := freeAddr()
	cmd := pinned("0", s.bare, "-addr", addr, "-reply", reply)
	if err := s.start(cmd, "bare-"+reply); err != nil {
		return nil, err
	}
	defer s.stop(cmd)
	if err := waitHTTP(ctx, "http://"+addr+"/"); err != nil {
		return nil, err
	}
	return bench.Run(ctx, bench.Options{URL: "http://" + addr, Raw: true, Conns: s.conns, Duration: s.dur,
		Users: 1_000_000_000, Stock: 1, NoKeys: true})
}

// gatewayEnv is the environment of a gateway of the suite: free ports, its
// own key prefix, quiet logs.
func gatewayEnv(public, admin, prefix string, extra []string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "FLASHGATE_HTTP_ADDR="+public, "FLASHGATE_ADMIN_ADDR="+admin,
		"FLASHGATE_REDIS_KEY_PREFIX="+prefix, "FLASHGATE_LOG_LEVEL=error", "FLASHGATE_DRAIN_DELAY=0s")
	return append(env, extra...)
}

func (s *suite) measureGateway(ctx context.Context, name string, env []string, o bench.Options) (*bench.Report, error) {
	public, admin := freePair()
	prefix := fmt.Sprintf("bench%d", time.Now().UnixNano()%1e9)
	cmd := pinned("0", s.bin, "gateway")
	// The buy path alone: the relay finds no broker (nothing listens on
	// port 1) and waits, instead of forwarding every order at the same time.
	cmd.Env = gatewayEnv(public, admin, prefix, append(env, "FLASHGATE_AMQP_URL=amqp://guest:guest@127.0.0.1:1/"))
	if err := s.start(cmd, "gateway-"+name); err != nil {
		return nil, err
	}
	defer dropPrefix(prefix)
	defer s.stop(cmd)
	if err := waitHTTP(ctx, "http://"+public+"/readyz"); err != nil {
		return nil, err
	}
	o.URL, o.AdminURL, o.NoMySQL, o.Conns, o.Duration = "http://"+public, "http://"+admin, true, s.conns, s.dur
	o.NoKeys = true // the same requests as the bare server gets: no idempotency keys, no duplicate clicks
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	if rep.Err() != nil {
		return nil, fmt.Errorf("%s: invariant check failed: %w", name, rep.Err())
	}
	return rep, nil
}

// drainRuns is how many times each drain figure is measured; the report
// gives the median.
var drainRuns = flag.Int("drain-runs", 3, "runs of each consumer-drain measurement (1, 2 and 4 consumers, outbox and pre-filled queue); the report gives medians")

// drainConsumers are the consumer counts the drain measurements compare.
var drainConsumers = []int{1, 2, 4}

// drain measures the pipeline downstream of the 202 with consumers
// consumers: a gateway whose relay cannot reach RabbitMQ sells orders of
// sale, which wait in the outbox; then a gateway with a working relay
// starts. From the outbox (prefilled false), the consumers run from the
// start, and the time from the relay's start to the last row in MySQL
// gives orders per second: relay and consumers together. From a pre-filled
// queue (prefilled true), the relay publishes the whole outbox first and
// stops; then the consumers start, and the rows written between the moment
// RabbitMQ has them all subscribed and the last row give the consumers'
// own rate. Relay and consumers run on every CPU, as `make run` starts
// them, not on the load's CPU, which they would inherit.
func (s *suite) drain(ctx context.Context, dsn, sale string, consumers, orders int, prefilled bool) (float64, error) {
	prefix := fmt.Sprintf("pipe%d", time.Now().UnixNano()%1e9)
	defer dropPrefix(prefix)
	extra := []string{"FLASHGATE_MYSQL_DSN=" + dsn, "FLASHGATE_AMQP_EXCHANGE=" + prefix, "FLASHGATE_AMQP_QUEUE=" + prefix}
	defer dropQueue(prefix)
	mode := "outbox"
	if prefilled {
		mode = "queue"
	}
	logName := fmt.Sprintf("pipeline-%s-%d", mode, consumers)

	public, admin := freePair()
	seller := exec.Command(s.bin, "gateway")
	seller.Env = gatewayEnv(public, admin, prefix, append(extra, "FLASHGATE_AMQP_URL=amqp://guest:guest@127.0.0.1:1/"))
	if err := s.start(seller, logName+"-seller"); err != nil {
		return 0, err
	}
	err := waitHTTP(ctx, "http://"+public+"/readyz")
	var rep *bench.Report
	if err == nil {
		rep, err = bench.Run(ctx, bench.Options{URL: "http://" + public, AdminURL: "http://" + admin, NoMySQL: true, NoKeys: true,
			Sale: sale, Stock: int64(orders), Users: orders * 2, Conns: s.conns, UntilSoldOut: true, MaxDuration: 2 * time.Minute})
	}
	s.stop(seller)
	if err != nil {
		return 0, err
	}
	if rep.Err() != nil || rep.Figures.AcceptedOrders != int64(orders) {
		return 0, fmt.Errorf("selling %d orders: %d accepted, %v", orders, rep.Figures.AcceptedOrders, rep.Err())
	}

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// The consumers, started by launch, stop when drain returns.
	var cons []*exec.Cmd
	defer func() {
		for _, c := range cons {
			s.stop(c)
		}
	}()
	launch := func() error {
		for i := 0; i < consumers; i++ {
			c := pinned(everyCPU(), s.bin, "consumer")
			c.Env = gatewayEnv("127.0.0.1:0", "127.0.0.1:0", prefix, extra)
			if err := s.start(c, fmt.Sprintf("%s-consumer-%d", logName, i)); err != nil {
				return err
			}
			cons = append(cons, c)
		}
		return nil
	}

	public, admin = freePair()
	relay := pinned(everyCPU(), s.bin, "gateway")
	relay.Env = gatewayEnv(public, admin, prefix, extra)
	defer s.stop(relay)
	deadline := time.Now().Add(3 * time.Minute)
	if !prefilled {
		if err := launch(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if err := s.start(relay, logName+"-relay"); err != nil {
		return 0, err
	}
	var startRows int64
	if prefilled {
		if err := waitOutboxEmpty(ctx, "http://"+admin, sale, deadline); err != nil {
			return 0, err
		}
		s.stop(relay)
		if err := launch(); err != nil {
			return 0, err
		}
		// The clock starts once RabbitMQ has every consumer subscribed;
		// what the first ones wrote before does not count.
		if start, err = waitSubscribed(ctx, prefix, consumers, deadline); err != nil {
			return 0, err
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sale_id = ?", sale).Scan(&startRows); err != nil {
			return 0, err
		}
		if startRows >= int64(orders)*9/10 {
			return 0, fmt.Errorf("%d of %d orders written before %d consumers were subscribed: too few orders to measure (-orders)", startRows, orders, consumers)
		}
	}
	for {
		var rows, units int64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE sale_id = ?", sale).Scan(&rows, &units); err != nil {
			return 0, err
		}
		if rows == int64(orders) && units == int64(orders) {
			return float64(int64(orders)-startRows) / time.Since(start).Seconds(), nil
		}
		if rows > int64(orders) {
			return 0, fmt.Errorf("%d rows for %d orders", rows, orders)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d orders in MySQL after 3 minutes", rows, orders)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdServices takes .run/faults.lock shared, as the test packages that
// use RabbitMQ and MariaDB do (internal/localstack.Lock), so that no fault
// test stops or restarts them in the middle of a drain: on a shared
// machine that made single runs ten times slower. It waits up to five
// minutes for a fault test to finish; call release when done.
func holdServices(ctx context.Context) (release func(), err error) {
	if err := os.MkdirAll(".run", 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(".run", "faults.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) || ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// medianOf returns the median of vs (0 for none).
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sorted := slices.Clone(vs)
	slices.Sort(sorted)
	if n := len(sorted); n%2 == 0 {
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return sorted[len(sorted)/2]
}

// waitOutboxEmpty waits until the sale's outbox is empty: the relay has
// published every order with confirms.
func waitOutboxEmpty(ctx context.Context, adminURL, sale string, deadline time.Time) error {
	c, err := adminapi.New(adminURL, "")
	if err != nil {
		return err
	}
	for {
		v, err := c.Sale(ctx, sale)
		if err == nil && v.OutboxPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay did not empty the outbox in time (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSubscribed waits until queue has n consumers and returns when it saw
// them.
func waitSubscribed(ctx context.Context, queue string, n int, deadline time.Time) (time.Time, error) {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	for ctx.Err() == nil {
		ch, err := conn.Channel()
		if err != nil {
			return time.Time{}, err
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		ch.Close()
		if err != nil {
			return time.Time{}, fmt.Errorf("queue %s: %w", queue, err)
		}
		if q.Consumers >= n {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d consumers subscribed to %s in time", q.Consumers, n, queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, ctx.Err()
}

// dropQueue deletes a measurement's RabbitMQ queues and exchanges. Each
// delete gets its own channel: a failed one closes its channel.
func dropQueue(name string) {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		fmt.Fprintln(os.Stderr, "drop queues:", err)
		return
	}
	defer conn.Close()
	for _, n := range []string{name, name + ".dead"} {
		for _, del := range []func(*amqp.Channel) error{
			func(ch *amqp.Channel) error { _, err := ch.QueueDelete(n, false, false, false); return err },
			func(ch *amqp.Channel) error { return ch.ExchangeDelete(n, false, false) },
		} {
			ch, err := conn.Channel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "drop queues:", err)
				return
			}
			if err := del(ch); err != nil {
				fmt.Fprintln(os.Stderr, "drop", n+":", err)
			}
			ch.Close()
		}
	}
}

// dropPrefix deletes a measurement's Redis keys (millions of outbox entries
// would otherwise stay).
func dropPrefix(prefix string) {
	// redis-cli is part of the local stack; a failure only leaves keys behind.
	script := fmt.Sprintf("redis-cli -h 127.0.0.1 --scan --pattern '%s:*' | xargs -r -n 1000 redis-cli -h 127.0.0.1 unlink > /dev/null", prefix)
	exec.Command("bash", "-c", script).Run()
}

// measurePipeline times orders from the outbox to the last MySQL row, and
// from a pre-filled queue to the last row, with 1, 2 and 4 consumers
// (drainRuns rounds, each round every count once, so that a change in the
// machine's load falls on all of them; medians reported), and the broker's
// own publish-with-confirms and consume rates on the same broker.
func (s *suite) measurePipeline(ctx context.Context, orders int) error {
	dbName := fmt.Sprintf("flashgate_test_bench_%d", time.Now().UnixNano()%1e9)
	root, err := sql.Open("mysql", "flashgate:flashgate@tcp(127.0.0.1:3306)/")
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+dbName); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	defer root.ExecContext(context.Background(), "DROP DATABASE "+dbName)
	dsn := "flashgate:flashgate@tcp(127.0.0.1:3306)/" + dbName + "?parseTime=true"
	migrate := exec.CommandContext(ctx, s.bin, "migrate")
	migrate.Env = append(os.Environ(), "FLASHGATE_MYSQL_DSN="+dsn)
	if b, err := migrate.CombinedOutput(); err != nil {
		return fmt.Errorf("migrate: %v: %s", err, b)
	}

	if release, err := holdServices(ctx); err != nil {
		s.notes = append(s.notes, "consumer drains measured without the fault lock: "+err.Error())
	} else {
		defer release()
	}

	// runs[prefilled][consumers] are the rates of every round, in order.
	// Each run sells a sale of its own, and no row is deleted between
	// runs: a DELETE's purge would run into the next measurement.
	runs := map[bool]map[int][]float64{false: {}, true: {}}
	for r := range max(*drainRuns, 1) {
		for _, consumers := range drainConsumers {
			for _, prefilled := range []bool{false, true} {
				sale := fmt.Sprintf("pipe-%d-%d-%t", r, consumers, prefilled)
				rate, err := s.drain(ctx, dsn, sale, consumers, orders, prefilled)
				if err != nil {
					return err
				}
				runs[prefilled][consumers] = append(runs[prefilled][consumers], rate)
			}
		}
	}
	const (
		groupOutbox = "pipeline, 202 → MySQL row"
		groupQueue  = "consumers, pre-filled queue → MySQL row"
	)
	name := func(prefilled bool, consumers int) string {
		if prefilled {
			return fmt.Sprintf("%d consumer(s): orders/s from a pre-filled queue to MySQL rows", consumers)
		}
		return fmt.Sprintf("%d consumer(s): orders/s from the outbox to MySQL rows", consumers)
	}
	rates := map[int]float64{}
	var detail []string
	for _, prefilled := range []bool{false, true} {
		for _, consumers := range drainConsumers {
			rs := runs[prefilled][consumers]
			m := medianOf(rs)
			r := row{group: groupOutbox, name: name(prefilled, consumers), value: m, unit: "orders/s"}
			if prefilled {
				r.group = groupQueue
			} else {
				rates[consumers] = m
			}
			if consumers != drainConsumers[0] {
				r.baseline = name(prefilled, drainConsumers[0])
				if prefilled {
					// The consumers' own target: more of them never
					// drain slower than one.
					r.target = 1
				}
			}
			s.add(r)
			var b strings.Builder
			for i, v := range rs {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%.0f", v)
			}
			detail = append(detail, fmt.Sprintf("%s %d: %s", map[bool]string{false: "outbox", true: "pre-filled queue"}[prefilled], consumers, b.String()))
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("Consumer drains, %d orders each: every figure is the median of %d runs (orders/s, in the order run: %s). "+
		"From the outbox, the relay and the consumers run at once, so the relay's publishing bounds the figure; from a pre-filled queue the relay "+
		"has published everything and stopped, and the clock runs from the moment RabbitMQ has every consumer subscribed to the last row.",
		orders, max(*drainRuns, 1), strings.Join(detail, "; ")))

	pub, con, err := bench.BrokerRates(ctx, "amqp://guest:guest@127.0.0.1:5672/", orders, 1024)
	if err != nil {
		return fmt.Errorf("broker rates: %w", err)
	}
	s.add(row{group: "pipeline, 202 → MySQL row", name: "RabbitMQ alone: publish with confirms", value: pub, unit: "msg/s"})
	s.add(row{group: "pipeline, 202 → MySQL row", name: "RabbitMQ alone: consume with acks", value: con, unit: "msg/s"})
	s.add(row{group: "pipeline, 202 → MySQL row", name: "2 consumer(s) vs the broker's publish rate", value: rates[2], unit: "orders/s",
		baseline: "RabbitMQ alone: publish with confirms", target: 0.5})
	return nil
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+)\s+(\d+)\s+(.*)$`)

func (s *suite) goBenchmarks(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", "2s",
		"./gateway/", "./bench/")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	var keep []string
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		if benchLine.MatchString(line) || strings.HasPrefix(line, "pkg:") || strings.HasPrefix(line, "cpu:") {
			keep = append(keep, line)
		}
	}
	out := strings.Join(keep, "\n")
	// The strategy ratios.
	rate := func(name string) float64 {
		m := regexp.MustCompile(`BenchmarkContention/` + name + `\S*\s.*?([\d.]+) reservations/s`).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	// The full ones come first in the output, so "lua" finds lua before
	// lua-lean; the lean ones are named in full.
	lua, rowlock, watch := rate("lua"), rate("rowlock"), rate("watch")
	if lua > 0 && rowlock > 0 && watch > 0 {
		s.notes = append(s.notes,
			fmt.Sprintf("Strategies under 50-way contention on one item, like for like (each checks stock and the buyer's limit, decrements, records the buyer's units, the order and an outbox entry; committed reservations/s): Lua %.0f, row lock %.0f, WATCH/MULTI %.0f. Lua ÷ row lock = %.1f× (target ≥ 30×: %s); Lua ÷ WATCH = %.1f× (target ≥ 100×: %s).",
				lua, rowlock, watch, lua/rowlock, verdict(lua/rowlock >= 30), lua/watch, verdict(lua/watch >= 100)))
	}
	leanLua, leanRow, leanWatch := rate("lua-lean"), rate("rowlock-lean"), rate("watch-lean")
	if leanLua > 0 && leanRow > 0 && leanWatch > 0 {
		s.notes = append(s.notes,
			fmt.Sprintf("The same, lean (check and decrement only): Lua %.0f, row lock %.0f, WATCH/MULTI %.0f; Lua ÷ row lock = %.1f×, Lua ÷ WATCH = %.1f×.",
				leanLua, leanRow, leanWatch, leanLua/leanRow, leanLua/leanWatch))
	}
	return out, err
}

func (s *suite) write(path, goBench string, took time.Duration) error {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Benchmarks\n\nRegenerated by `make bench` (%s, %s) on %s: %d CPUs, %s/%s. It took %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), host, machineCPUs(), runtime.GOOS, runtime.GOARCH, took.Round(time.Second))
	fmt.Fprintf(&b, "Every figure below is compared with a baseline measured in the same run by the same client "+
		"(`flashgate bench`'s load generator, %d keep-alive connections, %v per measurement, closed loop unless noted). "+
		"Servers are pinned to CPU 0 and the client to CPU 1 when `taskset` exists. Absolute numbers move with the "+
		"machine's other load; the ratios are what the targets are about.\n\n", s.conns, s.dur)
	b.WriteString("| group | measurement | value | p50 | p99 | ratio to baseline | target |\n| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range s.rows {
		ratio, target := "", ""
		if r.baseline != "" {
			ratio = fmt.Sprintf("%.2f× %s", r.ratio, r.baseline)
		}
		if r.target > 0 {
			target = fmt.Sprintf("≥ %.1f× (%s)", r.target, verdict(r.ratio >= r.target))
		}
		lat := func(d time.Duration) string {
			if d == 0 {
				return ""
			}
			return d.Round(time.Microsecond).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %.*f %s | %s | %s | %s | %s |\n", r.group, r.name, r.prec, r.value, r.unit, lat(r.p50), lat(r.p99), ratio, target)
	}
	if len(s.notes) > 0 {
		b.WriteString("\n")
		for _, n := range s.notes {
			b.WriteString("- " + n + "\n")
		}
	}
	if s.picture != nil {
		if err := s.writePicture(filepath.Join(filepath.Dir(path), pictureName)); err != nil {
			return err
		}
		b.WriteString("\n## The main run over time\n\n" +
			"The gateway with batching on, one hot sale (the relay has no broker, so the outbox only grows), " +
			"second by second, as `flashgate bench --svg` draws it:\n\n" +
			"![buys and latency per second and the outbox backlog of the main run](" + pictureName + ")\n")
	}
	if len(s.beside) > 0 {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
	}
	for _, f := range s.beside {
		data, err := os.ReadFile(f.src)
		if err == nil {
			err = os.WriteFile(filepath.Join(filepath.Dir(path), f.name), data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("copy %s beside the report: %w", f.src, err)
		}
	}
	b.WriteString(s.cost)
	b.WriteString(s.buckets)
	b.WriteString(s.room)
	b.WriteString(s.replicated)
	b.WriteString(s.failover)
	if s.scale != "" {
		b.WriteString("\n" + s.scale)
	}
	if goBench != "" {
		b.WriteString("\n## Go benchmarks\n\n`go test -run '^$' -bench . -benchmem -benchtime 2s ./gateway/ ./bench/`:\n\n```\n" + goBench + "\n```\n")
	}
	b.WriteString("\n## How to reproduce\n\n```sh\nmake bench          # services and Graphviz, then this suite; rewrites docs/benchmarks.md and its pictures\n```\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writePicture draws the main run into path.
func (s *suite) writePicture(path string) error {
	var b bytes.Buffer
	if err := s.picture.WriteSVG(&b); err != nil {
		return fmt.Errorf("picture of the main run: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func runCmd(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return nil
}

// runOnly is `-only PART`: one part of the suite alone (measure), its
// section written to out: a partial report, not to be written over
// docs/benchmarks.md.
func runOnly(ctx context.Context, out string, dur time.Duration, conns int, measure func(*suite, context.Context) error) error {
	s := &suite{dur: dur, conns: conns}
	defer s.stopAll()
	if err := s.build(ctx); err != nil {
		return err
	}
	started := time.Now()
	if err := measure(s, ctx); err != nil {
		return err
	}
	return s.write(out, "", time.Since(started))
}
