package main

// Process-level tests of the whole pipeline: gateway (with its relay),
// RabbitMQ, consumers, MySQL. The binary is built once, started as real
// processes, killed with SIGKILL; RabbitMQ and MariaDB are stopped and
// restarted with deploy/local/service.sh. Every test has its own Redis key
// prefix, exchange, queues and MySQL database.
//
// Tests of this package stop shared services, so the package holds
// .run/faults.lock exclusively while it runs; every other package whose
// tests use RabbitMQ or MariaDB holds it shared. `go test ./...` thus runs
// this package alone against those services, and everything else in
// parallel as usual.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/consumer"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/scripts"
)

func TestMain(m *testing.M) {
	// These tests stop and restart RabbitMQ and MariaDB: no other
	// package's tests may use them meanwhile.
	code := localstack.Run(m, true)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// service runs deploy/local/service.sh ACTION NAME (stop/start/restart a
// local server), bounded in time.
func service(t *testing.T, action, name string) {
	t.Helper()
	root, err := localstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", "service.sh"), action, name).CombinedOutput()
	if err != nil {
		t.Fatalf("service.sh %s %s: %v\n%s", action, name, err, out)
	}
	t.Logf("service.sh %s %s: %s", action, name, strings.TrimSpace(string(out)))
}

// ensureUp makes sure a service stopped by a test is running again when the
// test ends, whatever happened.
func ensureUp(t *testing.T, name string) {
	t.Cleanup(func() {
		root, _ := localstack.Root()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", "service.sh"), "start", name).CombinedOutput(); err != nil {
			t.Errorf("restarting %s after the test: %v\n%s", name, err, out)
		}
	})
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// pipelineBinary builds the binary once per package run, with the race
// detector when the tests have it, so that races in the processes show too.
func pipelineBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "flashgate-pipeline-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "flashgate")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", append(args, ".")...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// stack is one test's private pipeline.
type stack struct {
	t    *testing.T
	id   string
	bin  string
	env  []string // FLASHGATE_* settings of every process
	cfg  *config.Config
	rdb  *redis.Client
	db   *sql.DB
	keys scripts.Keys

	mu    sync.Mutex
	procs []*proc
}

func newStack(t *testing.T, extraEnv ...string) *stack {
	t.Helper()
	id := localstack.RandomHex(5)
	s := &stack{t: t, id: id, bin: pipelineBinary(t)}
	cfg := config.Default()
	cfg.Redis.KeyPrefix = "t" + id
	cfg.AMQP.Exchange = "test.pipeline." + id
	cfg.AMQP.Queue = "test.pipeline." + id
	cfg.MySQL.DSN = localstack.Database(t)
	cfg.Relay.ClaimAfter = time.Second
	cfg.Relay.Poll = 20 * time.Millisecond
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Shutdown.DrainDelay = 0
	s.cfg = cfg
	s.keys = scripts.Keys{Prefix: cfg.Redis.KeyPrefix}
	s.env = append([]string{
		"FLASHGATE_REDIS_KEY_PREFIX=" + cfg.Redis.KeyPrefix,
		"FLASHGATE_AMQP_EXCHANGE=" + cfg.AMQP.Exchange,
		"FLASHGATE_AMQP_QUEUE=" + cfg.AMQP.Queue,
		"FLASHGATE_MYSQL_DSN=" + cfg.MySQL.DSN,
		"FLASHGATE_RELAY_CLAIM_AFTER=" + cfg.Relay.ClaimAfter.String(),
		"FLASHGATE_RELAY_POLL=" + cfg.Relay.Poll.String(),
		"FLASHGATE_SHUTDOWN_TIMEOUT=" + cfg.Shutdown.Timeout.String(),
		"FLASHGATE_DRAIN_DELAY=0s",
		"FLASHGATE_LOG_LEVEL=info",
	}, extraEnv...)

	s.rdb = redis.NewClient(&redis.Options{Addr: cfg.Redis.Addrs[0]})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", cfg.Redis.Addrs[0], err)
	}
	db, err := consumer.OpenDB(cfg.MySQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.db = db

	// Cleanup runs last-in first-out: processes die before their stores go.
	t.Cleanup(func() {
		dropRedisKeys(t, cfg.Redis.KeyPrefix)
		_ = s.rdb.Close()
		_ = s.db.Close()
		dropTopology(t, cfg.AMQP)
	})
	t.Cleanup(s.stopAll)

	out, code := s.command("migrate")
	if code != 0 || !strings.Contains(out, "schema at version") {
		t.Fatalf("flashgate migrate: exit %d\n%s", code, out)
	}
	return s
}

// proc is one flashgate process of a stack.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

func (s *stack) start(name string, env []string, args ...string) *proc {
	s.t.Helper()
	p := &proc{name: name, out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = append(append(cleanEnv(), s.env...), env...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// stopAll kills what still runs and reports races and, when the test
// failed, the end of every process's log.
func (s *stack) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		log := p.out.String()
		if strings.Contains(log, "WARNING: DATA RACE") {
			s.t.Errorf("%s: data race\n%s", p.name, log)
		} else if s.t.Failed() {
			if len(log) > 6000 {
				log = "…" + log[len(log)-6000:]
			}
			s.t.Logf("---- %s (%v) ----\n%s", p.name, p.err, log)
		}
	}
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s survives SIGKILL", p.name)
	}
}

// command runs a short-lived flashgate command and returns its output and
// exit code.
func (s *stack) command(args ...string) (string, int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(cleanEnv(), s.env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	s.t.Fatalf("flashgate %v: %v\n%s", args, err, out)
	return "", -1
}

// gwProc is a gateway process of a stack on fixed ports, so that a restart
// comes back where the buyers expect it.
type gwProc struct {
	public, admin string
	p             *proc
}

func (s *stack) startGateway(g *gwProc) *gwProc {
	s.t.Helper()
	if g == nil {
		g = &gwProc{public: freeAddr(s.t), admin: freeAddr(s.t)}
	}
	g.p = s.start("gateway", []string{"FLASHGATE_HTTP_ADDR=" + g.public, "FLASHGATE_ADMIN_ADDR=" + g.admin}, "gateway")
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.Get("http://" + g.public + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return g
			}
		}
		select {
		case <-g.p.exited:
			s.t.Fatalf("gateway exited at start: %v\n%s", g.p.err, g.p.out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("gateway not ready after 30s\n%s", g.p.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *stack) createSale(g *gwProc, sale string, stock, limit int) {
	s.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, body, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, stock, limit))
	if err != nil || code != 201 {
		s.t.Fatalf("create sale %s: %d %s %v", sale, code, body, err)
	}
}

// buyers buy concurrently until stopped or out of users. A buy that gets no
// answer (the gateway was killed, or is restarting) is retried with the same
// Idempotency-Key, as a careful client does, so that a reservation whose
// reply was lost is answered again rather than taken twice.
type buyers struct {
	t        *testing.T
	mu       sync.Mutex
	accepted map[string]string // order id → user
	codes    map[int]int
	bad      []string // answers no buyer should ever get
	retries  atomic.Int64
	n202     atomic.Int64
	stopped  chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// startBuyers sends buys from workers goroutines to the gateway at base,
// each working through its share of users (users < 0: unlimited), pausing
// pause between buys.
func startBuyers(t *testing.T, base, sale string, workers, users int, pause time.Duration) *buyers {
	b := &buyers{t: t, accepted: map[string]string{}, codes: map[int]int{}, stopped: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	deadline := time.Now().Add(3 * time.Minute)
	for w := range workers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for i := 0; users < 0 || i*workers+w < users; i++ {
				user := fmt.Sprintf("u%d-%d", w, i)
				for {
					select {
					case <-b.stopped:
						return
					default:
					}
					if time.Now().After(deadline) {
						b.fail("buyer deadline passed")
						return
					}
					code, id, body, err := buyOnce(client, base, sale, user)
					if err != nil || code == 503 {
						b.retries.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					b.record(code, id, user, body)
					break
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	t.Cleanup(b.stop)
	return b
}

func buyOnce(c *http.Client, base, sale, user string) (code int, orderID, body string, err error) {
	req, err := http.NewRequest("POST", base+"/v1/sales/"+sale+"/orders", strings.NewReader(`{"user_id":"`+user+`","quantity":1}`))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-"+user)
	res, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", "", err
	}
	var v struct {
		Status  string `json:"status"`
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(raw, &v)
	return res.StatusCode, v.OrderID, string(raw), nil
}

func (b *buyers) record(code int, id, user, body string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.codes[code]++
	switch code {
	case 202:
		if id == "" {
			b.bad = append(b.bad, "202 without order id: "+body)
			return
		}
		if prev, ok := b.accepted[id]; ok && prev != user {
			b.bad = append(b.bad, "order id "+id+" given to two users")
		}
		b.accepted[id] = user
		b.n202.Add(1)
	case 410, 409, 429: // sold out, limit reached, shed
	default:
		b.bad = append(b.bad, strconv.Itoa(code)+" "+body)
	}
}

func (b *buyers) fail(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bad = append(b.bad, msg)
}

func (b *buyers) stop() { b.stopOnce.Do(func() { close(b.stopped) }); b.wg.Wait() }

// wait waits for the buyers to run out of users.
func (b *buyers) wait() { b.wg.Wait() }

// waitAccepted waits until n buys have been accepted in all.
func (b *buyers) waitAccepted(n int64, timeout time.Duration) {
	b.t.Helper()
	waitUntil(b.t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool { return b.n202.Load() >= n })
}

// check fails the test on any answer a buyer should never get.
func (b *buyers) check() map[string]string {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bad) > 0 {
		n := min(len(b.bad), 10)
		b.t.Fatalf("%d unexpected answers, first ones: %q", len(b.bad), b.bad[:n])
	}
	b.t.Logf("answers %v, %d retried without an answer", b.codes, b.retries.Load())
	return b.accepted
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached after %v: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mysqlOrders returns every order of the sale in MySQL, id → quantity, and
// the ledger's figures.
func (s *stack) mysqlOrders(sale string) (map[string]int, int64, int64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT order_id, quantity FROM orders WHERE sale_id = ?`, sale)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var q int
		if err := rows.Scan(&id, &q); err != nil {
			s.t.Fatal(err)
		}
		if _, dup := out[id]; dup {
			s.t.Fatalf("order %s twice in MySQL", id)
		}
		out[id] = q
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	var lu, lo int64
	err = s.db.QueryRowContext(ctx, `SELECT units, orders FROM sale_ledger WHERE sale_id = ?`, sale).Scan(&lu, &lo)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		s.t.Fatal(err)
	}
	return out, lu, lo
}

func (s *stack) count(sale string) (rows, units int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM orders WHERE sale_id = ?`, sale).Scan(&rows, &units)
	return rows, units
}

// waitDrained waits until MySQL holds as many units as Redis sold and the
// outbox is empty.
func (s *stack) waitDrained(sale string, timeout time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	var sold, outbox, units int64
	deadline := time.Now().Add(timeout)
	for {
		sold, _ = s.rdb.HGet(ctx, s.keys.Meta(sale), "sold").Int64()
		outbox = s.rdb.XLen(ctx, s.keys.Outbox(sale)).Val()
		_, units = s.count(sale)
		if sold > 0 && units == sold && outbox == 0 {
			return
		}
		if time.Since(deadline.Add(-timeout)) > 15*time.Second && outbox > 0 {
			if groups, err := s.rdb.XInfoGroups(ctx, s.keys.Outbox(sale)).Result(); err == nil && len(groups) == 0 {
				s.t.Fatalf("no relay has read the outbox of %s after 15s (%d entries): is the relay running inside `flashgate gateway`?", sale, outbox)
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("not drained after %v: Redis sold %d, outbox %d entries, MySQL %d units", timeout, sold, outbox, units)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExactlyOnce checks invariant 3 for a sale: every order a buyer saw
// accepted is in MySQL, every row is an order Redis accepted, MySQL holds
// what Redis sold, and the ledger agrees.
func (s *stack) checkExactlyOnce(sale string, accepted map[string]string) {
	s.t.Helper()
	rows, lu, lo := s.mysqlOrders(sale)
	for id := range accepted {
		if _, ok := rows[id]; !ok {
			s.t.Fatalf("order %s was accepted (202) but is not in MySQL", id)
		}
	}
	ctx := context.Background()
	inRedis := s.rdb.HGetAll(ctx, s.keys.Orders(sale)).Val()
	var units int64
	for id, q := range rows {
		if _, ok := inRedis[id]; !ok {
			s.t.Fatalf("order %s is in MySQL but Redis never accepted it", id)
		}
		units += int64(q)
	}
	sold, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "sold").Int64()
	if int64(len(rows)) != int64(len(inRedis)) || units != sold || lu != units || lo != int64(len(rows)) {
		s.t.Fatalf("MySQL %d rows / %d units, ledger %d units / %d orders; Redis %d orders / sold %d",
			len(rows), units, lu, lo, len(inRedis), sold)
	}
	s.t.Logf("sale %s: %d orders in MySQL, each once; %d seen accepted by buyers", sale, len(rows), len(accepted))
}

// reconcile runs `flashgate reconcile` and returns its output and exit code.
func (s *stack) reconcile(sale string, wait time.Duration) (string, int) {
	return s.command("reconcile", "--sale", sale, "--wait", wait.String())
}

func (s *stack) checkNoDrift(sale string) {
	s.t.Helper()
	out, code := s.reconcile(sale, 30*time.Second)
	if code != 0 || !strings.Contains(out, "no drift") {
		s.t.Fatalf("reconcile: exit %d\n%s", code, out)
	}
}

func (s *stack) startConsumers(n int) []*proc {
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = s.start("consumer-"+strconv.Itoa(i), nil, "consumer")
	}
	return ps
}

// TestPipelineBurst: ≥ 5,000 buys at once over two consumers; MySQL holds
// exactly the accepted orders, each once; reconcile agrees, and notices a
// planted row.
func TestPipelineBurst(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "burst", 5000, 1)

	b := startBuyers(t, "http://"+g.public, "burst", 64, 6000, 0)
	b.wait()
	accepted := b.check()
	if len(accepted) != 5000 {
		t.Fatalf("%d buys accepted, want 5000 (the stock)", len(accepted))
	}
	s.waitDrained("burst", 2*time.Minute)
	s.checkExactlyOnce("burst", accepted)
	s.checkNoDrift("burst")

	// A row that no reservation made: reconcile must say so, exit 3.
	if _, err := consumer.WriteOrders(context.Background(), s.db, []order.Order{{
		OrderID: "planted-" + s.id, SaleID: "burst", UserID: "intruder", Quantity: 1, ReservedAt: time.Now(),
	}}); err != nil {
		t.Fatal(err)
	}
	out, code := s.reconcile("burst", 0)
	if code != 3 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, "planted-"+s.id) {
		t.Fatalf("reconcile after a planted row: exit %d\n%s", code, out)
	}
	t.Logf("reconcile on a planted row:\n%s", out)
}

// TestPipelineGatewayKill9: the gateway dies (SIGKILL) mid-burst, with
// reservations whose replies were lost and outbox entries its relay had
// read but not confirmed; a new gateway takes over. Every order a buyer saw
// accepted reaches MySQL once, and MySQL ends up with what Redis sold.
func TestPipelineGatewayKill9(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "crash", 1000000, 1)

	b := startBuyers(t, "http://"+g.public, "crash", 32, -1, time.Millisecond)
	b.waitAccepted(2000, time.Minute)
	g.p.kill9(t)
	before := b.n202.Load()
	s.startGateway(g) // same ports
	b.waitAccepted(before+2000, time.Minute)
	b.stop()
	accepted := b.check()

	s.waitDrained("crash", 2*time.Minute)
	s.checkExactlyOnce("crash", accepted)
	s.checkNoDrift("crash")
}

// TestPipelineRabbitMQOutage: RabbitMQ is stopped for several seconds in
// the middle of a burst. Buys keep being accepted (the outbox holds them);
// once RabbitMQ is back every order arrives, once.
func TestPipelineRabbitMQOutage(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "outage", 1000000, 1)

	b := startBuyers(t, "http://"+g.public, "outage", 16, -1, 2*time.Millisecond)
	b.waitAccepted(1000, time.Minute)
	ensureUp(t, "rabbitmq")
	service(t, "stop", "rabbitmq")
	down := b.n202.Load()
	time.Sleep(3 * time.Second) // the outage lasts; buyers keep buying
	during := b.n202.Load() - down
	service(t, "start", "rabbitmq")
	b.waitAccepted(b.n202.Load()+1000, time.Minute)
	b.stop()
	accepted := b.check() // no 5xx, no unanswered buy
	if during == 0 {
		t.Fatal("no buy was accepted while RabbitMQ was down")
	}
	t.Logf("%d buys accepted while RabbitMQ was down", during)

	s.waitDrained("outage", 3*time.Minute)
	s.checkExactlyOnce("outage", accepted)
	s.checkNoDrift("outage")
}

// publishOrders puts n orders of a sale on the stack's queue, with confirms,
// as a relay would, and returns them.
func (s *stack) publishOrders(sale string, n int) []order.Order {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := broker.Open(ctx, s.cfg.AMQP, "pipeline test publisher")
	if err != nil {
		s.t.Fatalf("RabbitMQ (run `make up`): %v", err)
	}
	defer sess.Close()
	if err := sess.Channel.Confirm(false); err != nil {
		s.t.Fatal(err)
	}
	os := make([]order.Order, n)
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	const window = 2000
	var pending []*amqp.DeferredConfirmation
	for i := range os {
		os[i] = order.Order{OrderID: fmt.Sprintf("%s-%s-%d", sale, s.id, i), SaleID: sale, UserID: "u" + strconv.Itoa(i), Quantity: 1 + i%2, ReservedAt: now}
		body, err := os[i].Marshal()
		if err != nil {
			s.t.Fatal(err)
		}
		dc, err := sess.Channel.PublishWithDeferredConfirm(s.cfg.AMQP.Exchange, broker.RoutingKey, true, false,
			amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, MessageId: os[i].OrderID, Body: body})
		if err != nil {
			s.t.Fatal(err)
		}
		pending = append(pending, dc)
		if len(pending) == window || i == n-1 {
			for _, dc := range pending {
				if ok, err := dc.WaitContext(ctx); err != nil || !ok {
					s.t.Fatalf("publish not confirmed: %v", err)
				}
			}
			pending = pending[:0]
		}
	}
	return os
}

// checkRows checks that MySQL holds exactly orders, once, ledger included.
func (s *stack) checkRows(sale string, want []order.Order) {
	s.t.Helper()
	rows, lu, lo := s.mysqlOrders(sale)
	var units int64
	for _, o := range want {
		q, ok := rows[o.OrderID]
		if !ok {
			s.t.Fatalf("order %s not in MySQL", o.OrderID)
		}
		if q != o.Quantity {
			s.t.Fatalf("order %s: quantity %d, want %d", o.OrderID, q, o.Quantity)
		}
		units += int64(o.Quantity)
	}
	if len(rows) != len(want) || lu != units || lo != int64(len(want)) {
		s.t.Fatalf("MySQL %d rows, ledger %d units / %d orders; want %d rows, %d units", len(rows), lu, lo, len(want), units)
	}
}

// TestConsumerKill9: one of three consumer processes dies (SIGKILL) with
// deliveries in hand, mid-drain; the others finish: nothing lost, nothing
// doubled.
func TestConsumerKill9(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	want := s.publishOrders("k9", 30000)
	ps := s.startConsumers(3)
	waitUntil(t, 2*time.Minute, "a fifth of the orders in MySQL", func() bool { r, _ := s.count("k9"); return r >= 6000 })
	ps[1].kill9(t)
	r, _ := s.count("k9")
	t.Logf("killed consumer-1 with %d of 30000 rows written", r)
	waitUntil(t, 3*time.Minute, "all orders in MySQL", func() bool { r, _ := s.count("k9"); return r >= 30000 })
	s.checkRows("k9", want)
}

// TestConsumerMariaDBRestart restarts MariaDB while two consumers drain the
// queue: they retry without acknowledging, and finish once it is back.
func TestConsumerMariaDBRestart(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	want := s.publishOrders("mdb", 30000)
	s.startConsumers(2)
	waitUntil(t, 2*time.Minute, "a fifth of the orders in MySQL", func() bool { r, _ := s.count("mdb"); return r >= 6000 })
	ensureUp(t, "mariadb")
	service(t, "restart", "mariadb")
	r, _ := s.count("mdb")
	t.Logf("%d of 30000 rows after the restart", r)
	waitUntil(t, 3*time.Minute, "all orders in MySQL", func() bool { r, _ := s.count("mdb"); return r >= 30000 })
	s.checkRows("mdb", want)
}

// TestRelayRabbitMQOutage stops RabbitMQ under a running relay: entries
// added meanwhile stay in the outbox, and all reach the queue once it is
// back.
func TestRelayRabbitMQOutage(t *testing.T) {
	s := newStack(t)
	r, err := relay.New(s.cfg, relay.Deps{Redis: s.rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("relay did not stop")
		}
	})
	ids := s.addOutbox("rl", 100)
	waitUntil(t, 30*time.Second, "first entries relayed", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })

	ensureUp(t, "rabbitmq")
	service(t, "stop", "rabbitmq")
	ids = append(ids, s.addOutbox("rl", 500)...)
	errs := r.Stats().Errors
	waitUntil(t, time.Minute, "relay noticed the outage", func() bool { st := r.Stats(); return !st.Connected && st.Errors >= errs+2 })
	if n := s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val(); n != 500 {
		t.Fatalf("outbox holds %d entries while RabbitMQ is down, want 500", n)
	}
	service(t, "start", "rabbitmq")
	waitUntil(t, 2*time.Minute, "outbox drained after RabbitMQ came back", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })
	s.consumeIDs(ids)
	t.Logf("relay stats %+v", r.Stats())
}

// addOutbox writes n entries into a sale's outbox as the reserve script
// does, and registers the sale.
func (s *stack) addOutbox(sale string, n int) []string {
	s.t.Helper()
	ctx := context.Background()
	s.rdb.SAdd(ctx, s.keys.Sales(), sale)
	ids := make([]string, n)
	pipe := s.rdb.Pipeline()
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%s", sale, localstack.RandomHex(6))
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.Outbox(sale), Values: []any{
			"order_id", ids[i], "sale_id", sale, "user_id", "u" + strconv.Itoa(i), "quantity", "1",
			"reserved_at", strconv.FormatInt(time.Now().UnixMilli(), 10)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.t.Fatal(err)
	}
	return ids
}

// consumeIDs reads the stack's queue until every id has arrived.
func (s *stack) consumeIDs(ids []string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sess, err := broker.Open(ctx, s.cfg.AMQP, "pipeline test reader")
	if err != nil {
		s.t.Fatal(err)
	}
	defer sess.Close()
	deliveries, err := sess.Channel.Consume(s.cfg.AMQP.Queue, "", true, false, false, false, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, id := range ids {
		missing[id] = true
	}
	for len(missing) > 0 {
		select {
		case d, ok := <-deliveries:
			if !ok {
				s.t.Fatalf("deliveries closed, %d orders missing", len(missing))
			}
			delete(missing, d.MessageId)
		case <-ctx.Done():
			s.t.Fatalf("%d of %d orders never reached the queue", len(missing), len(ids))
		}
	}
}

// TestConsumerSIGTERM stops a consumer process with SIGTERM mid-drain: it
// exits 0 within its shutdown deadline, having committed and acknowledged
// what it held; a second consumer finishes, and every order is in MySQL once.
func TestConsumerSIGTERM(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	want := s.publishOrders("term", 20000)
	p := s.startConsumers(1)[0]
	waitUntil(t, 2*time.Minute, "a tenth of the orders in MySQL", func() bool { r, _ := s.count("term"); return r >= 2000 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(s.cfg.Shutdown.Timeout + 10*time.Second):
		t.Fatal("consumer still running after SIGTERM and its shutdown deadline")
	}
	if p.err != nil {
		t.Fatalf("consumer exit after SIGTERM: %v\n%s", p.err, p.out)
	}
	r, _ := s.count("term")
	t.Logf("consumer stopped with %d of 20000 rows written", r)
	s.startConsumers(1)
	waitUntil(t, 3*time.Minute, "all orders in MySQL", func() bool { r, _ := s.count("term"); return r >= 20000 })
	s.checkRows("term", want)
}

func TestReconcileUsage(t *testing.T) {
	bin := pipelineBinary(t)
	for _, args := range [][]string{{"reconcile"}, {"reconcile", "--sale", "s", "--wait", "-1s"}, {"reconcile", "--sale", "s", "extra"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("flashgate %v: %v, want exit code 2\n%s", args, err, out)
		}
	}
}
