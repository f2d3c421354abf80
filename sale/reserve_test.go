package sale

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// BenchmarkReserveBatch measures one batch of reservations through
// Store.Reserve on a redis-server of its own (what it counts is then its
// own calls alone): 16 buyers, each new, each accepted (a
// sale of stock beyond the run), half with an Idempotency-Key, as a busy
// sale's batches are. It reports per order: the gateway's allocations and
// bytes, and Redis's own CPU for the script call (INFO commandstats,
// evalsha's usec), so that a change of the call's form is measured on
// both sides of the wire. Compare two trees with
//
//	go test -run '^$' -bench ReserveBatch -count 6 ./sale/
//
// alternating the trees (the machine is shared; see docs/benchmarks.md).
func BenchmarkReserveBatch(b *testing.B) {
	const batch = 16
	e := privateEnv(b, Options{})
	const sale = "bench"
	e.mustSale(sale, `{"stock":1000000000,"per_user_limit":1}`)
	ctx := context.Background()
	rs := make([]Reservation, batch)
	out := make([]Result, batch)
	n := 0
	usec0 := evalshaUsec(b, e)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range rs {
			n++
			u := "u" + strconv.Itoa(n)
			rs[i] = Reservation{OrderID: e.store.ids.next(), UserID: u, Quantity: 1}
			if n%2 == 0 {
				rs[i].IdemKey = "k" + u
			}
		}
		if err := e.store.Reserve(ctx, sale, rs, out); err != nil {
			b.Fatal(err)
		}
		for i := range out {
			if out[i].Err != nil {
				b.Fatalf("reservation %d: %v", i, out[i].Err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(evalshaUsec(b, e)-usec0)/float64(n), "redis-µs/order")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/order")
}

// privateEnv is newEnv on a redis-server of the test's own, so that what
// Redis counts is the test's calls alone. It skips on a Redis Cluster
// (localstack.PrivateRedis).
func privateEnv(b testing.TB, o Options) *env {
	srv := localstack.PrivateRedis(b, localstack.RedisOptions{Dir: b.TempDir(), Args: []string{"--save", ""}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	keys := scripts.Keys{Prefix: "b"}
	loader := scripts.New(rdb, "", keys)
	if _, err := loader.Load(context.Background()); err != nil {
		b.Fatalf("load scripts: %v", err)
	}
	st, err := New(rdb, loader, keys, o)
	if err != nil {
		b.Fatal(err)
	}
	return &env{t: b, rdb: rdb, loader: loader, keys: keys, store: st}
}

// evalshaUsec is Redis's total CPU in EVALSHA so far (INFO commandstats),
// in µs.
func evalshaUsec(b testing.TB, e *env) int64 { return commandStat(b, e, "evalsha", "usec") }

// commandStat is the field (calls, usec) of INFO commandstats's line of
// command cmd; 0 before the command's first call.
func commandStat(tb testing.TB, e *env, cmd, field string) int64 {
	tb.Helper()
	info, err := e.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// An Idempotency-Key costs one command of the reserve script: a
// reservation accepted writes its key (SET NX GET), reading nothing
// besides; a refused one reads it (GET) and writes nothing; a repeat
// finds the first answer in that one command and is answered it.
func TestIdempotencyKeyOneCommand(t *testing.T) {
	e := privateEnv(t, Options{})
	const sale = "idem"
	e.mustSale(sale, `{"stock":3,"per_user_limit":1}`)
	ctx := context.Background()
	calls := func() (set, get int64) {
		return commandStat(t, e, "set", "calls"), commandStat(t, e, "get", "calls")
	}
	reserve := func(rs ...Reservation) []Result {
		t.Helper()
		out := make([]Result, len(rs))
		if err := e.store.Reserve(ctx, sale, rs, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	step := func(what string, wantSet, wantGet int64, rs ...Reservation) []Result {
		t.Helper()
		set0, get0 := calls()
		out := reserve(rs...)
		set, get := calls()
		if set-set0 != wantSet || get-get0 != wantGet {
			t.Errorf("%s: %d SET and %d GET, want %d and %d", what, set-set0, get-get0, wantSet, wantGet)
		}
		return out
	}

	first := step("two keyed buyers and one without accepted", 2, 0,
		Reservation{OrderID: "o1", UserID: "u1", Quantity: 1, IdemKey: "k1"},
		Reservation{OrderID: "o2", UserID: "u2", Quantity: 1, IdemKey: "k2"},
		Reservation{OrderID: "o3", UserID: "u3", Quantity: 1})
	for i, r := range first {
		if r.Err != nil {
			t.Fatalf("reservation %d: %v", i, r.Err)
		}
	}
	// The sale is sold out: a new key is read, not written; a repeat of
	// k1 is found and answered o1; k2 with another quantity conflicts.
	again := step("sold out: a new key, a repeat, a conflict", 0, 3,
		Reservation{OrderID: "o4", UserID: "u4", Quantity: 1, IdemKey: "k4"},
		Reservation{OrderID: "o5", UserID: "u1", Quantity: 1, IdemKey: "k1"},
		Reservation{OrderID: "o6", UserID: "u2", Quantity: 2, IdemKey: "k2"})
	if !errors.Is(again[0].Err, ErrSoldOut) || again[1].Err != nil || again[1].OrderID != "o1" ||
		!errors.Is(again[2].Err, ErrIdempotencyConflict) {
		t.Errorf("after the sale sold out: %+v", again)
	}
	if n, err := e.rdb.Exists(ctx, e.keys.Idem(sale, "k4")).Result(); err != nil || n != 0 {
		t.Errorf("the refused key k4 is kept (%d, %v)", n, err)
	}
	// Restocked: a repeat that would be accepted finds its first answer in
	// the write itself, which then writes nothing.
	e.mustSale(sale, `{"stock":10}`)
	e.mustSale(sale, `{"per_user_limit":2}`)
	re := step("open: a repeat of k1", 1, 0, Reservation{OrderID: "o7", UserID: "u1", Quantity: 1, IdemKey: "k1"})
	if re[0].Err != nil || re[0].OrderID != "o1" {
		t.Errorf("repeat of k1 on an open sale: %+v, want o1 again", re[0])
	}
	if v := e.view(sale); v.Sold != 3 {
		t.Errorf("sold %d after the repeats, want 3", v.Sold)
	}
}
