package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// rollbackStack starts the test's own redis-server (so that it can be
// killed without disturbing the shared one; see TestPaymentRedisRestart), a
// stack on it, a gateway and two consumers.
func rollbackStack(t *testing.T) (*redisProc, *stack, *gatewayProc) {
	t.Helper()
	r := startRedis(t)
	s := newStack(t, "FLASHGATE_REDIS_ADDRS="+r.addr)
	s.useRedis(r)
	// A rewrite of the append-only file while snapshot copies the folder
	// would leave a copy whose manifest names files it does not hold.
	if err := s.rdb.ConfigSet(bg(t, 5*time.Second), "auto-aof-rewrite-percentage", "0").Err(); err != nil {
		t.Fatal(err)
	}
	g := s.startGateway(nil)
	s.startConsumers(2)
	return r, s, g
}

// restored is what a rolled-back Redis held when it came back, before any
// repair: read from a server of its own started on another copy of the
// snapshot, so that no gateway or consumer can have touched it.
type restored struct {
	at     time.Time         // when the test's server answered again
	meta   map[string]string // the sale's meta hash
	sold   int64
	orders map[string]string // order id → record
}

// rollBack is the machine crash and the restart: it kills the test's
// redis-server (kill -9), puts the snapshot's append-only folder in place
// of its own, starts it again on the same port and returns what it holds.
func (s *stack) rollBack(r *redisProc, snapshot, sale string) restored {
	s.t.Helper()
	t := s.t
	r.kill9(t)
	r.restore(t, snapshot)
	r.start(t)
	rb := restored{at: time.Now()}
	// The same figure read at once from the server itself, for the log: a
	// script call since (a buy, a sweep) may have begun the repair.
	direct, _ := s.rdb.HGet(context.Background(), s.keys.Meta(sale), "sold").Result()
	t.Logf("redis-server %s killed and started again from the copy; sold %q read at once; its log:\n%s", r.addr, direct, aofLog(r))

	probeDir := t.TempDir()
	if err := os.CopyFS(filepath.Join(probeDir, "appendonlydir"), os.DirFS(filepath.Join(snapshot, "appendonlydir"))); err != nil {
		t.Fatal(err)
	}
	probe := startRedisIn(t, probeDir)
	c := redis.NewClient(&redis.Options{Addr: probe.addr})
	defer c.Close()
	ctx := bg(t, 10*time.Second)
	var err error
	if rb.meta, err = c.HGetAll(ctx, s.keys.Meta(sale)).Result(); err != nil {
		t.Fatal(err)
	}
	if rb.orders, err = c.HGetAll(ctx, s.keys.Orders(sale)).Result(); err != nil {
		t.Fatal(err)
	}
	if len(rb.meta) == 0 {
		t.Fatalf("harness: the copy holds no sale %s (meta %s): it was taken before the sale existed", sale, s.keys.Meta(sale))
	}
	rb.sold, _ = strconv.ParseInt(rb.meta["sold"], 10, 64)
	probe.stop(t)
	t.Logf("the copy holds sale %s with sold %d, %d order records, meta %v", sale, rb.sold, len(rb.orders), rb.meta)
	return rb
}

// aofLog returns the lines of the server's log, since its last start, that
// tell how it read its append-only file back.
func aofLog(r *redisProc) string {
	b, err := os.ReadFile(r.srv.LogPath())
	if err != nil {
		return err.Error()
	}
	log := string(b)
	if i := strings.LastIndex(log, "oO0OoO0OoO0Oo Redis is starting"); i >= 0 {
		log = log[i:]
	}
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "AOF") || strings.Contains(line, "truncat") || strings.Contains(line, "DB loaded") {
			out = append(out, "  "+strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// within waits until cond holds or deadline passes, checking at least once,
// and reports whether it held.
func within(deadline time.Time, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// saleView reads the admin sale view; nil while the gateway refuses it.
func saleView(c *admin.Client, sale string) *admin.Sale {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Sale(ctx, sale)
	if err != nil {
		return nil
	}
	return v
}

// mysqlLive returns MySQL's live units of the sale (pending_payment, paid,
// confirmed), in all and per user, and its rows by state.
func (s *stack) mysqlLive(sale string) (units int64, perUser map[string]int64, states map[string]int64, rows map[string]orderRow) {
	rows = s.mysqlStates(sale)
	perUser, states = map[string]int64{}, map[string]int64{}
	for _, r := range rows {
		states[r.state]++
		if order.Live(r.state) {
			units += r.qty
			perUser[r.user] += r.qty
		}
	}
	return units, perUser, states, rows
}

// waitSettled waits until the sale's outbox is empty and MySQL's rows have
// stopped changing (no buyer is buying), so that what MySQL holds is final;
// bounded by timeout, after which it fails the test.
func (s *stack) waitSettled(sale string, timeout time.Duration) {
	s.t.Helper()
	prev := int64(-1)
	localstack.WaitFor(s.t, timeout, "the outbox of "+sale+" empty and MySQL unchanged", func() bool {
		outbox := s.rdb.XLen(context.Background(), s.keys.Outbox(sale)).Val()
		n, units := s.count(sale)
		cur := n<<32 | units
		settled := outbox == 0 && cur == prev
		prev = cur
		if !settled {
			time.Sleep(400 * time.Millisecond)
		}
		return settled
	})
}

// checkLimit fails the test when a user holds more than limit live units,
// in MySQL or in Redis.
func (s *stack) checkLimit(sale string, limit int64, perUser map[string]int64) {
	s.t.Helper()
	var over []string
	for u, n := range perUser {
		if n > limit {
			over = append(over, fmt.Sprintf("%s: %d", u, n))
		}
	}
	if len(over) > 0 {
		slices.Sort(over)
		s.t.Errorf("%d users hold more than the limit of %d in MySQL, first ones: %q", len(over), limit, over[:min(len(over), 5)])
	}
	over = over[:0]
	for u, v := range s.rdb.HGetAll(context.Background(), s.keys.Users(sale)).Val() {
		if n, _ := strconv.ParseInt(v, 10, 64); n > limit {
			over = append(over, fmt.Sprintf("%s: %d", u, n))
		}
	}
	if len(over) > 0 {
		slices.Sort(over)
		s.t.Errorf("%d users hold more than the limit of %d in Redis, first ones: %q", len(over), limit, over[:min(len(over), 5)])
	}
}
