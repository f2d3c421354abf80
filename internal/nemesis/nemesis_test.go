package nemesis

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

// The run's knobs: `go test ./internal/nemesis -run TestNemesis
// -nemesis.duration=30m -nemesis.seed=N` (make nemesis DURATION=30m). By
// default, the short form that `make test` runs: a fixed set of seeds,
// a short day each.
var (
	flagDuration = flag.Duration("nemesis.duration", 20*time.Second, "how long each seed's sale day lasts")
	flagSeed     = flag.Uint64("nemesis.seed", 0, "the one seed to run (0: the fixed set of the short run)")
)

// shortSeeds are the seeds of the short run: fixed, so that CI replays the
// same schedules.
var shortSeeds = []uint64{1, 2, 3}

// TestNemesis runs a sale day under faults for each seed and checks its
// history: each sale linearizable against the model, and the end state's
// invariants. A failure prints the seed, the fault schedule, and the path
// of porcupine's picture of the failing sale.
func TestNemesis(t *testing.T) {
	localstack.SingleRedisOnly(t, "the run restarts a redis-server of its own")
	seeds := shortSeeds
	if *flagSeed != 0 {
		seeds = []uint64{*flagSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runDay(t, seed, *flagDuration) })
	}
}

// closedTTL is the gateways' cache.closed_ttl (the default), which the
// model must know: how long a gateway may answer a closed sale from
// memory.
const closedTTL = 500 * time.Millisecond

// redisTimeout is the gateways' redis.timeout (the default): a reply
// Redis gave that long ago may still be remembered (closedTTL) from its
// arrival on.
const redisTimeout = 500 * time.Millisecond

// checkTimeout bounds porcupine's check of one sale; past it the sale is
// reported as not checked rather than failed.
const checkTimeout = 30 * time.Second

func runDay(t *testing.T, seed uint64, duration time.Duration) {
	t.Logf("nemesis seed %d (replay: go test ./internal/nemesis -run 'TestNemesis' -nemesis.seed=%d -nemesis.duration=%v)", seed, seed, duration)
	bin := localstack.Binary(t)
	// The run's own Redis, AOF on and written before each answer, so that
	// a kill -9 loses nothing it answered (a lost second would be a loss
	// the contract allows, which the model would call a bug).
	redisSrv := localstack.PrivateRedis(t, localstack.RedisOptions{Dir: t.TempDir(),
		Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--save", ""}})
	servers, cfg := defaultServers(t, redisSrv.Addr)
	migrate(t, bin, servers)
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	// Buyer authentication on: every buy carries its buyer's token.
	secret := localstack.RandomHex(32)
	stack := StartStack(t, StackOptions{Bin: bin, Servers: servers, Gateways: 3, Consumers: 2,
		Env: []string{"FLASHGATE_CLOSED_CACHE_TTL=" + closedTTL.String(), "FLASHGATE_BUYER_JWT_SECRET=" + secret}})
	history := NewHistory()
	client := NewClient(history, secret)
	t.Cleanup(client.CloseIdleConnections)
	// The test reads each sale's event number straight from its Redis, past
	// the proxies, to bound the changes nobody was answered.
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	keys := scripts.Keys{Prefix: servers.KeyPrefix}
	seqOf := func(ctx context.Context, sale string) (int64, error) {
		return rdb.HGet(ctx, keys.Meta(sale), "seq").Int64()
	}
	day := NewDay(DayOptions{Seed: seed, Buyers: 6, Open: 4, SaleLife: 12 * time.Second,
		Stale: closedTTL + redisTimeout + 500*time.Millisecond, Seq: seqOf},
		stack, client, "n"+localstack.RandomHex(3))
	nem := NewNemesis(rand.New(rand.NewPCG(seed, 0)), stack, redisSrv, time.Now())

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { nem.Run(ctx) })
	dayErr := day.Run(ctx)
	wg.Wait()
	counts := nem.Counts()
	t.Logf("faults thrown: %v", counts)
	report := func() {
		var b strings.Builder
		fmt.Fprintf(&b, "seed %d, fault schedule:\n", seed)
		for _, e := range nem.Schedule() {
			b.WriteString("  " + e.String() + "\n")
		}
		t.Log(b.String())
	}
	if dayErr != nil {
		report()
		t.Fatal(dayErr)
	}
	if errs := nem.Errors(); len(errs) > 0 {
		report()
		t.Fatalf("%d faults could not be thrown or healed, the first: %v", len(errs), errs[0])
	}
	for _, p := range stack.Procs {
		if p.Exited() {
			report()
			t.Fatalf("%s exited on its own during the run\n%s", p.Name, tail(p.Output()))
		}
	}

	sales := day.Sales()
	settleStart := time.Now()
	views := settle(t, stack, db, sales)
	checkStart := time.Now()
	end := history.Now()
	dir := failureDir(t, seed)
	bySale := history.BySale()
	var ops, dropped, unknown int
	byKind := map[string]int{}
	var bad []string
	for _, s := range sales {
		rows, err := ReadRows(context.Background(), db, s.Spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		v := views[s.Spec.ID]
		for _, p := range CheckEnd(s.Spec, v, rows) {
			bad = append(bad, s.Spec.ID+": "+p)
		}
		res := Resolve(s.Spec, bySale[s.Spec.ID], Final{Rows: rows, Stock: int(v.Stock), InitialStock: s.Spec.Stock, Probes: history.Probes(s.Spec.ID)}, history.At, end)
		for _, p := range res.Problems {
			bad = append(bad, s.Spec.ID+": "+p)
		}
		ops += len(res.Ops)
		dropped += res.Dropped
		for _, op := range res.Ops {
			byKind[op.Input.(Input).Kind]++
		}
		verdict := Linearizable(s.Spec, res.Ops, checkTimeout, dir)
		switch verdict.Result {
		case porcupine.Illegal:
			bad = append(bad, fmt.Sprintf("%s: not linearizable (%d operations); porcupine's picture: %s %v",
				s.Spec.ID, verdict.Ops, verdict.Visualization, errOrEmpty(verdict.VisualizeErr)))
		case porcupine.Unknown:
			unknown++
			open := map[string]int{}
			kinds := map[string]int{}
			for _, op := range res.Ops {
				in := op.Input.(Input)
				kinds[in.Kind+fmt.Sprint(op.Output.(Output).Code)]++
				if op.Return == end {
					open[in.Kind]++
				}
			}
			t.Logf("%s (payment window %t, stock %d, limit %d): operations %v, of which end with the run: %v; the history: %s",
				s.Spec.ID, s.Spec.Window, s.Spec.Stock, s.Spec.Limit, kinds, open, writeOps(dir, s.Spec.ID, res.Ops))
			t.Logf("%s: the check of %d operations timed out; not counted", s.Spec.ID, verdict.Ops)
		}
	}
	t.Logf("seed %d: %d sales, %d requests recorded, %d operations checked %v (%d ambiguous requests that did not happen dropped; %d sales whose check timed out), faults %v; settled in %v, checked in %v",
		seed, len(sales), history.Len(), ops, byKind, dropped, unknown, counts, checkStart.Sub(settleStart).Round(time.Millisecond), time.Since(checkStart).Round(time.Millisecond))
	if len(bad) > 0 {
		report()
		t.Fatalf("seed %d: %d problems:\n%s", seed, len(bad), strings.Join(bad, "\n"))
	}
	t.Logf("seed %d: every sale linearizable, end state as the invariants say", seed)
}

// migrate creates the schema of the run's database with `flashgate
// migrate`.
func migrate(t *testing.T, bin string, s Servers) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "migrate")
	cmd.Env = append(localstack.CleanEnv(), "FLASHGATE_MYSQL_DSN="+s.MySQLDSN)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("flashgate migrate: %v\n%s", err, out)
	}
}

// settle waits, the faults healed, until every sale's orders have reached
// MySQL in their final state (payment windows run out, expiries done), and
// returns the admin views then. A sale that does not settle within three
// minutes fails the test with its figures: MySQL never caught up with
// Redis.
func settle(t *testing.T, stack *Stack, db *sql.DB, sales []*DaySale) map[string]*admin.Sale {
	t.Helper()
	c, err := admin.New(admin.ListenerURL(stack.Gateways[0].Admin), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	views := map[string]*admin.Sale{}
	deadline := time.Now().Add(3 * time.Minute)
	for _, s := range sales {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v, err := c.Sale(ctx, s.Spec.ID)
			var rows []order.Order
			if err == nil {
				rows, err = ReadRows(ctx, db, s.Spec.ID)
			}
			cancel()
			if err == nil && Settled(v, Sum(rows)) {
				views[s.Spec.ID] = v
				break
			}
			if time.Now().After(deadline) {
				f, raw := Sum(rows), []byte("none")
				if v != nil {
					raw = v.Raw
				}
				t.Fatalf("sale %s not settled after 3 minutes (%v): admin view %s; MySQL %d rows, sold %d, buyers %d, pending %d",
					s.Spec.ID, err, raw, f.Rows, f.Sold, f.Buyers, f.Pending)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return views
}

// failureDir is where a failing run leaves porcupine's pictures:
// .run/nemesis/seed-N-TIME/ under the repository, which outlives the test.
func failureDir(t *testing.T, seed uint64) string {
	root, err := localstack.Root()
	if err != nil {
		return t.TempDir()
	}
	dir := filepath.Join(root, ".run", "nemesis", fmt.Sprintf("seed-%d-%s", seed, time.Now().UTC().Format("20060102T150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() {
		// Keep it only when it holds a picture.
		if entries, _ := os.ReadDir(dir); len(entries) == 0 {
			os.Remove(dir)
		}
	})
	return dir
}

// writeOps writes a sale's resolved history, one operation a line in the
// order of their calls, into dir, and returns the file's path.
func writeOps(dir, sale string, ops []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%12.3f %12.3f client %-8d %s\n", time.Duration(op.Call).Seconds(), time.Duration(op.Return).Seconds(),
			op.ClientId, describe(op.Input.(Input), op.Output.(Output)))
	}
	path := filepath.Join(dir, "sale-"+sale+".txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err.Error()
	}
	return path
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
