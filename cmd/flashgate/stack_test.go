package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/salerows"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// stack is one test's private pipeline: a corner of Redis and RabbitMQ
// (localstack.Isolated), a scratch MySQL database with the schema, and the
// settings every flashgate process of the test gets.
type stack struct {
	t    *testing.T
	id   string
	env  []string // FLASHGATE_* settings of every process
	cfg  *config.Config
	rdb  redis.UniversalClient // a cluster client on a Redis Cluster
	db   *sql.DB
	keys scripts.Keys
}

// newStack sets up the stack and migrates its database with `flashgate
// migrate`; extraEnv is added to every process's settings. What it set up
// is removed when the test ends, after the processes have stopped.
func newStack(t *testing.T, extraEnv ...string) *stack {
	t.Helper()
	cfg := localstack.Isolated(t)
	cfg.MySQL.DSN = localstack.Database(t)
	cfg.Relay.ClaimAfter = time.Second
	cfg.Relay.Poll = 20 * time.Millisecond
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Shutdown.DrainDelay = 0
	s := &stack{t: t, id: localstack.RandomHex(5), cfg: cfg, keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}}
	s.env = slices.Concat(serviceEnv(cfg), []string{
		"FLASHGATE_RELAY_CLAIM_AFTER=" + cfg.Relay.ClaimAfter.String(),
		"FLASHGATE_RELAY_POLL=" + cfg.Relay.Poll.String(),
		"FLASHGATE_SHUTDOWN_TIMEOUT=" + cfg.Shutdown.Timeout.String(),
		"FLASHGATE_DRAIN_DELAY=0s",
		"FLASHGATE_LOG_LEVEL=info",
	}, extraEnv)

	// Of the Redis the processes get (FLASHGATE_REDIS_ADDRS, one address or
	// a cluster's nodes), as they build it.
	s.rdb = localstack.NewRedis(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := localstack.Ping(ctx, s.rdb); err != nil {
		_ = s.rdb.Close()
		t.Fatal(err)
	}
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	// Cleanups run last-in first-out: the processes, started later, stop
	// before these clients close and before Isolated and Database remove
	// the keys, the topology and the database.
	t.Cleanup(func() {
		_ = s.rdb.Close()
		_ = s.db.Close()
	})

	out, code := s.command("migrate")
	if code != 0 || !strings.Contains(out, "schema at version") {
		t.Fatalf("flashgate migrate: exit %d\n%s", code, out)
	}
	return s
}

// start starts `flashgate args...` with the stack's settings plus env.
func (s *stack) start(name string, env []string, args ...string) *proc {
	s.t.Helper()
	return startProc(s.t, name, slices.Concat(s.env, env), args...)
}

// startGateway starts a gateway of the stack; see startGateway.
func (s *stack) startGateway(g *gatewayProc) *gatewayProc {
	s.t.Helper()
	return startGateway(s.t, g, s.env)
}

func (s *stack) startConsumers(n int) []*proc {
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = s.start("consumer-"+strconv.Itoa(i), nil, "consumer")
	}
	return ps
}

// command runs a short-lived flashgate command with the stack's settings
// and returns its output and exit code.
func (s *stack) command(args ...string) (string, int) {
	s.t.Helper()
	return runFlashgate(s.t, s.env, args...)
}

func (s *stack) createSale(g *gatewayProc, sale string, stock, limit int) {
	s.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, body, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, stock, limit))
	if err != nil || code != 201 {
		s.t.Fatalf("create sale %s: %d %s %v", sale, code, body, err)
	}
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

// orders returns the sale's rows in MySQL (salerows.Read), failing the
// test on a query error and on an order id seen twice.
func (s *stack) orders(sale string) []salerows.Row {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := salerows.Read(ctx, s.db, sale)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, _, dups := salerows.Owners(rows); len(dups) > 0 {
		s.t.Fatalf("order %s twice in MySQL", dups[0])
	}
	return rows
}

// owners returns the sale's orders in MySQL, order id → user, and the
// units each user holds there.
func (s *stack) owners(sale string) (map[string]string, map[string]int64) {
	s.t.Helper()
	byID, units, _ := salerows.Owners(s.orders(sale))
	return byID, units
}

// mysqlOrders returns every order of the sale in MySQL, id → quantity, and
// the ledger's figures.
func (s *stack) mysqlOrders(sale string) (map[string]int, int64, int64) {
	s.t.Helper()
	out := map[string]int{}
	for _, r := range s.orders(sale) {
		out[r.OrderID] = int(r.Quantity)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lu, lo, err := orderdb.Ledger(ctx, s.db, sale)
	if err != nil {
		s.t.Fatal(err)
	}
	return out, lu, lo
}

// count returns the sale's rows and units in MySQL (salerows.Count); zeros
// when they cannot be read.
func (s *stack) count(sale string) (rows, units int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, units, _ = salerows.Count(ctx, s.db, sale)
	return rows, units
}

// redisSold is the sale's sold and outbox length in Redis: its own, or for
// a sale of several buckets its buckets' summed (the home sells nothing).
func (s *stack) redisSold(ctx context.Context, sale string) (sold, outbox int64) {
	for _, l := range s.lanes(ctx, sale) {
		n, _ := s.rdb.HGet(ctx, s.keys.Meta(l), "sold").Int64()
		sold += n
		outbox += s.rdb.XLen(ctx, s.keys.Outbox(l)).Val()
	}
	return sold, outbox
}

// lanes is the ids whose keys hold the sale's orders: the sale's own, or
// its buckets'.
func (s *stack) lanes(ctx context.Context, sale string) []string {
	if names, err := s.rdb.HGet(ctx, s.keys.Meta(sale), "names").Result(); err == nil && names != "" {
		return strings.Split(names, ",")
	}
	return []string{sale}
}

// waitDrained waits until MySQL holds as many units as Redis sold and the
// outbox is empty. After 15s with entries no relay has read, it fails at
// once: the gateway runs no relay.
func (s *stack) waitDrained(sale string, timeout time.Duration) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	last := "nothing read" // the figures of the last look that had time to read them
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}, func(ctx context.Context) error {
		sold, outbox := s.redisSold(ctx, sale)
		_, units := s.count(sale)
		if sold > 0 && units == sold && outbox == 0 {
			return nil
		}
		if ctx.Err() == nil {
			last = fmt.Sprintf("Redis sold %d, outbox %d entries, MySQL %d units", sold, outbox, units)
		}
		if time.Since(start) > 15*time.Second && outbox > 0 {
			if groups, err := s.rdb.XInfoGroups(ctx, s.keys.Outbox(sale)).Result(); err == nil && len(groups) == 0 {
				return retry.Stop(fmt.Errorf("no relay has read the outbox of %s after 15s (%d entries): is the relay running inside `flashgate gateway`?", sale, outbox))
			}
		}
		return fmt.Errorf("Redis sold %d, outbox %d entries, MySQL %d units", sold, outbox, units)
	}, nil)
	if err != nil {
		s.t.Fatalf("sale %s not drained after %v: %v (%s)", sale, time.Since(start).Round(time.Second), err, last)
	}
}

// checkExactlyOnce checks invariant 3 for a sale ("every 202 becomes
// exactly one MySQL row; no row exists without a reservation"): every order
// a buyer saw accepted is in MySQL, every row is an order Redis accepted,
// MySQL holds what Redis sold, and the ledger agrees.
func (s *stack) checkExactlyOnce(sale string, accepted map[string]string) {
	s.t.Helper()
	rows, lu, lo := s.mysqlOrders(sale)
	for id := range accepted {
		if _, ok := rows[id]; !ok {
			s.t.Fatalf("order %s was accepted (202) but is not in MySQL", id)
		}
	}
	ctx := context.Background()
	inRedis := map[string]string{}
	for _, l := range s.lanes(ctx, sale) {
		for id, rec := range s.rdb.HGetAll(ctx, s.keys.Orders(l)).Val() {
			inRedis[id] = rec
		}
	}
	var units int64
	for id, q := range rows {
		if _, ok := inRedis[id]; !ok {
			s.t.Fatalf("order %s is in MySQL but Redis never accepted it", id)
		}
		units += int64(q)
	}
	sold, _ := s.redisSold(ctx, sale)
	if int64(len(rows)) != int64(len(inRedis)) || units != sold || lu != units || lo != int64(len(rows)) {
		s.t.Fatalf("MySQL %d rows / %d units, ledger %d units / %d orders; Redis %d orders / sold %d",
			len(rows), units, lu, lo, len(inRedis), sold)
	}
	s.t.Logf("sale %s: %d orders in MySQL, each once; %d seen accepted by buyers", sale, len(rows), len(accepted))
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
	bodies := make([][]byte, n)
	for i := range os {
		os[i] = order.Order{OrderID: fmt.Sprintf("%s-%s-%d", sale, s.id, i), SaleID: sale, UserID: "u" + strconv.Itoa(i), Quantity: 1 + i%2, ReservedAt: now}
		body, err := os[i].Marshal()
		if err != nil {
			s.t.Fatal(err)
		}
		bodies[i] = body
	}
	// In messages of relay.message_orders orders, as the relay sends them.
	per := max(1, s.cfg.Relay.MessageOrders)
	const window = 64
	var pending []*amqp.DeferredConfirmation
	for start := 0; start < n; start += per {
		part := bodies[start:min(start+per, n)]
		dc, err := sess.Channel.PublishWithDeferredConfirm(s.cfg.AMQP.Exchange, broker.RoutingKey, true, false,
			amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, MessageId: os[start].OrderID,
				Type: order.TypeBatch, Headers: amqp.Table{order.CountHeader: int32(len(part))}, Body: order.AppendBatch(nil, part...)})
		if err != nil {
			s.t.Fatal(err)
		}
		pending = append(pending, dc)
		if len(pending) == window || start+per >= n {
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
			parts, err := order.Split(d.Body)
			if err != nil {
				s.t.Fatalf("message %q: %v", d.Body, err)
			}
			for _, p := range parts {
				o, err := order.Unmarshal(p)
				if err != nil {
					s.t.Fatalf("message %q: %v", d.Body, err)
				}
				delete(missing, o.OrderID)
			}
		case <-ctx.Done():
			s.t.Fatalf("%d of %d orders never reached the queue", len(missing), len(ids))
		}
	}
}
