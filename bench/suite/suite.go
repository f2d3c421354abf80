package main

// The suite's state across its parts, where the services are, and how a
// part starts what it measures: the flashgate binary and the bare server
// as processes (localstack.Launch, the launcher the tests use too),
// redis-servers of its own, a scratch database.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// services are the local stack of `make up` as the suite uses it, read
// once (localstack's: config's defaults unless FLASHGATE_REDIS_ADDRS,
// FLASHGATE_AMQP_URL or FLASHGATE_MYSQL_DSN point elsewhere).
type services struct {
	redis string // the first address of FLASHGATE_REDIS_ADDRS
	amqp  string
	// noBroker is an AMQP URL where nothing listens (port 1): a gateway
	// given it measures the buy path alone, its relay waiting instead of
	// forwarding every order at the same time.
	noBroker string
	// servers are the local stack's server processes, for their CPU: the
	// pid files deploy/local/service.sh writes, and each one's command.
	servers []struct{ name, file, comm string }
}

func localServices() services {
	return services{redis: localstack.RedisAddr, amqp: localstack.AMQPURL, noBroker: "amqp://guest:guest@127.0.0.1:1/",
		servers: []struct{ name, file, comm string }{
			{procRedis, ".run/redis/redis.pid", "redis-server"},
			{procRabbit, ".run/rabbitmq/rabbitmq.pid", "beam.smp"},
			{procMariaDB, ".run/mariadb/mariadbd.pid", "mariadbd"},
		}}
}

type suite struct {
	o        options
	svc      services
	bin      string // the flashgate binary (build)
	bare     string // bench/bare's
	procs    []*localstack.Process
	servers  []*localstack.RedisServer // redis-servers of its own (startRedis)
	rows     []*row
	notes    []string
	sections sections
	// picture is the cost part's picture sale (a whole sale, to its
	// last row in MySQL), drawn beside the report (pictureName); nil when
	// it was not measured.
	picture *bench.Report
	// peak is the buy part's main run (batching on, one hot sale), whose
	// rate the tail part halves; nil when it was not measured.
	peak *bench.Report
	// Rows that later parts are held to: the buy path with batching on,
	// the sold-out path (both with buyer authentication off).
	buyRow, soldOutRow *row
	// beside are files the report shows, copied next to it (the cost
	// part's call graphs).
	beside []besideFile
}

// sections are the report's sections after the main table, each written
// by its part; "" when not measured.
type sections struct {
	cost, buckets, room, replicated, failover, scale, trickle, goBench string
}

func newSuite(o options) *suite { return &suite{o: o, svc: localServices()} }

// besideFile is a file of the suite's folder copied next to the report as name.
type besideFile struct{ src, name string }

// build builds the binaries the suite runs into .run/bench.
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
		if err := localstack.Build(ctx, b.out, b.pkg, "-trimpath"); err != nil {
			return err
		}
	}
	return nil
}

// CPU placements of the suite's processes: the servers measured against
// the bare handler on CPU 0 (the load is on CPU 1), those of a whole
// stack on every CPU as `make run` starts them (not on the load's CPU,
// which they would inherit), or where the scheduler puts them.
const (
	cpuServer = "0"
	cpuEvery  = "every"
	cpuAny    = ""
)

// proc is what a part launches: the flashgate binary in a role, or the
// bare server.
type proc struct {
	log    string   // its log, .run/bench/LOG.log
	bin    string   // the flashgate binary; "": the suite's (build)
	args   []string // the role and its flags
	env    []string // after the suite's (gatewayEnv)
	cpu    string   // cpuServer, cpuEvery or cpuAny
	prefix string   // its key prefix (newPrefix)
	// ready is the URL that answers once it is ready ("" for none); a
	// gateway's is /readyz on its public listener, unless unready: then
	// launch does not wait.
	ready   string
	unready bool
}

// launch starts the flashgate binary as p says, with the suite's
// environment: free listeners, a key prefix, the local services, quiet
// logs. It returns once the process is ready; stopAll stops it too.
func (s *suite) launch(ctx context.Context, p proc) (*localstack.Process, error) {
	bin := s.bin
	if p.bin != "" {
		bin = p.bin
	}
	o := localstack.LaunchOptions{Name: p.log, Bin: bin, Args: p.args, StopWait: 30 * time.Second,
		Env: append([]string{"FLASHGATE_REDIS_ADDRS=" + s.svc.redis, "FLASHGATE_AMQP_URL=" + s.svc.amqp,
			"FLASHGATE_REDIS_KEY_PREFIX=" + p.prefix, "FLASHGATE_LOG_LEVEL=error", "FLASHGATE_DRAIN_DELAY=0s"}, p.env...)}
	if len(p.args) > 0 && p.args[0] == "gateway" {
		a := freeAddrs(2)
		o.Public, o.Admin = a[0], a[1]
		p.ready = "http://" + o.Public + "/readyz"
	}
	if !p.unready {
		o.Ready = p.ready
	}
	return s.start(ctx, o, p.cpu)
}

// start launches o with its log in .run/bench, placed on cpu.
func (s *suite) start(ctx context.Context, o localstack.LaunchOptions, cpu string) (*localstack.Process, error) {
	f, err := os.Create(filepath.Join(".run/bench", o.Name+".log"))
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	o.Log = f
	o.Command = func(name string, args ...string) *exec.Cmd { return pinned(cpu, name, args...) }
	p, err := localstack.Launch(ctx, o)
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// startBare starts the bare server answering every request with reply
// (accepted, sold_out, waiting), on cpu.
func (s *suite) startBare(ctx context.Context, reply, cpu, log string, extra ...string) (*localstack.Process, string, error) {
	addr := freeAddrs(1)[0]
	p, err := s.start(ctx, localstack.LaunchOptions{Name: log, Bin: s.bare, Args: append([]string{"-addr", addr, "-reply", reply}, extra...),
		Ready: "http://" + addr + "/", AnyAnswer: true, StopWait: 30 * time.Second}, cpu)
	return p, "http://" + addr, err
}

func (s *suite) stopAll() {
	for _, p := range s.procs {
		p.Stop()
	}
	for _, r := range s.servers {
		r.Stop()
	}
}

// startRedis starts a redis-server of the suite's own on free ports
// (localstack.StartRedisServer), on every CPU as `make up` starts Redis (not
// on the load's, which this process would pass on); stopAll stops it too.
func (s *suite) startRedis(ctx context.Context, o localstack.RedisOptions) (*localstack.RedisServer, error) {
	o.Command = func(name string, args ...string) *exec.Cmd { return pinned(cpuEvery, name, args...) }
	r, err := localstack.StartRedisServer(ctx, o)
	if err != nil {
		return nil, err
	}
	s.servers = append(s.servers, r)
	return r, nil
}

// The settings of the suite's own redis-servers: as deploy/local/service.sh
// configures the local Redis (AOF everysec, no RDB), with no automatic AOF
// rewrite (a rewrite's fork in the middle of one run would weigh on that
// run alone); a replica's full synchronisation sent at once, from memory.
var (
	aofEverysec  = []string{"--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0", "--save", ""}
	disklessSync = []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
)

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

// pinned prefixes a command with taskset when it is available and cpu is
// not cpuAny.
func pinned(cpu string, name string, args ...string) *exec.Cmd {
	if cpu == cpuEvery {
		cpu = fmt.Sprintf("0-%d", machineCPUs()-1)
	}
	if path, err := exec.LookPath("taskset"); err == nil && cpu != cpuAny && machineCPUs() > 1 {
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

// newPrefix is a key prefix (and queue name) of its own: tag and a number.
func newPrefix(tag string) string { return fmt.Sprintf("%s%d", tag, time.Now().UnixNano()%1e9) }

// scratchDB creates a database of its own (localstack.NewDatabase) with
// flashgate's schema (`flashgate migrate`) and returns its DSN and the
// function that drops it.
func (s *suite) scratchDB(ctx context.Context) (string, func(), error) {
	dsn, drop, err := localstack.NewDatabase(ctx)
	if err != nil {
		return "", nil, err
	}
	dropped := func() {
		if err := drop(); err != nil {
			fmt.Fprintln(os.Stderr, "drop database:", err)
		}
	}
	migrate := exec.CommandContext(ctx, s.bin, "migrate")
	migrate.Env = append(localstack.CleanEnv(), "FLASHGATE_MYSQL_DSN="+dsn)
	if b, err := migrate.CombinedOutput(); err != nil {
		dropped()
		return "", nil, fmt.Errorf("migrate: %v: %s", err, b)
	}
	return dsn, dropped, nil
}

// dropQueue deletes a measurement's RabbitMQ queues and exchanges. Each
// delete gets its own channel: a failed one closes its channel.
func (s *suite) dropQueue(name string) {
	conn, err := amqp.Dial(s.svc.amqp)
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
// would otherwise stay); a failure only leaves keys behind.
func (s *suite) dropPrefix(prefix string) {
	rdb := redis.NewClient(&redis.Options{Addr: s.svc.redis})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := localstack.DeleteKeys(ctx, rdb, prefix); err != nil {
		fmt.Fprintln(os.Stderr, "drop keys:", err)
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
