package consumer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// oldMark is the mark script of the releases before the created set
// (scripts/lua/mark.lua until issue 30), kept here to be measured against.
const oldMark = `local vs = redis.call('HMGET', KEYS[1], unpack(ARGV))
local out, seen = {}, {}
for i = 1, #ARGV do
  local v = vs[i]
  if v and string.sub(v, 1, 1) == 'q' and not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    out[#out + 1] = ARGV[i]
    out[#out + 1] = 'c' .. string.sub(v, 2)
  end
end
if #out > 0 then
  redis.call('HSET', KEYS[1], unpack(out))
end
return #out / 2`

// TestMarkCost measures what marking orders created costs Redis, the
// mark script of the releases before (one EVALSHA per batch, rewriting each
// record) against the marker's SADD (markWrite, one per batch), on a
// redis-server of its own (AOF on, everysec, as deployed) so that nobody
// else's commands are counted: per way, 100,000 orders in batches of 256,
// 3 runs each, alternating, medians. It reads the server's CPU
// (used_cpu_sys + used_cpu_user) and the top-level command's time (INFO
// commandstats) around the marks, and what the order view's get costs on a
// record each way marked (the server's CPU, and the script's own time in
// commandstats, without the round trip's), and the memory the created set
// takes. It is a
// measurement, not a check: run it with FLASHGATE_MEASURE_MARK=1 and -v.
func TestMarkCost(t *testing.T) {
	if os.Getenv("FLASHGATE_MEASURE_MARK") == "" {
		t.Skip("a measurement: FLASHGATE_MEASURE_MARK=1 go test -run TestMarkCost -v ./consumer/")
	}
	ctx, rdb, keys, loader := measureRedis(t)
	c := &Consumer{rdb: rdb, keys: keys, log: zap.NewNop()}
	oldScript := redis.NewScript(oldMark)
	if err := oldScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}

	const orders, batch, views, runs = 100000, 256, 20000, 3
	const sale = "cost"
	ids := make([]string, orders)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016x%016x", time.Now().UnixMilli()<<16, i) // 32 hex, as the gateway's
	}
	rec := scripts.Record{State: order.StateConfirmed, ReservedAt: time.Now().UnixMilli(), Quantity: 1, UserID: "user-000000"}.String()
	seed := func() {
		if err := rdb.Del(ctx, keys.Orders(sale), keys.Created(sale)).Err(); err != nil {
			t.Fatal(err)
		}
		for lo := 0; lo < orders; lo += 1000 {
			args := make([]any, 0, 2000)
			for _, id := range ids[lo : lo+1000] {
				args = append(args, id, rec)
			}
			if err := rdb.HSet(ctx, keys.Orders(sale), args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// cpu is the server's CPU so far, in µs; usec the time INFO
	// commandstats counts for command since CONFIG RESETSTAT.
	cpu := func() float64 {
		info := rdb.Info(ctx, "cpu").Val()
		return (infoFloat(info, "used_cpu_sys") + infoFloat(info, "used_cpu_user")) * 1e6
	}
	usec := func(command string) float64 {
		info := rdb.Info(ctx, "commandstats").Val()
		for line := range strings.SplitSeq(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":"); ok {
				for f := range strings.SplitSeq(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						n, _ := strconv.ParseFloat(v, 64)
						return n
					}
				}
			}
		}
		return 0
	}
	ways := []struct {
		name, command string
		mark          func(ids []string) error
	}{
		{"mark script (before)", "evalsha", func(ids []string) error {
			args := make([]any, len(ids))
			for i, id := range ids {
				args[i] = id
			}
			return oldScript.EvalSha(ctx, rdb, []string{keys.Orders(sale)}, args...).Err()
		}},
		{"SADD (after)", "sadd", func(ids []string) error {
			n := c.markErrors.Load()
			c.markWrite(ctx, map[string][]string{}, map[string][]string{sale: ids}, len(ids))
			if c.markErrors.Load() != n {
				return fmt.Errorf("markWrite failed")
			}
			return nil
		}},
	}
	viewKeys := []string{keys.Meta(sale), keys.Users(sale), keys.Outbox(sale), keys.Orders(sale), keys.Due(sale), keys.Created(sale)}
	type result struct{ cpu, cmd, view, viewCmd []float64 }
	res := make([]result, len(ways))
	for run := range runs {
		for w, way := range ways {
			seed()
			rdb.ConfigResetStat(ctx)
			before := cpu()
			for lo := 0; lo < orders; lo += batch {
				if err := way.mark(ids[lo:min(lo+batch, orders)]); err != nil {
					t.Fatal(err)
				}
			}
			spent := cpu() - before
			cmd := usec(way.command)
			res[w].cpu = append(res[w].cpu, spent/orders)
			res[w].cmd = append(res[w].cmd, cmd/orders)

			// The view of orders so marked: the order script's get.
			rdb.ConfigResetStat(ctx)
			before = cpu()
			for i := range views {
				r, err := loader.Order(ctx, viewKeys, "get", keys.Events(), sale, ids[i*(orders/views)])
				if err != nil || !r.Record.Created {
					t.Fatalf("%s: view %+v, %v; want created", way.name, r, err)
				}
			}
			res[w].view = append(res[w].view, (cpu()-before)/views)
			res[w].viewCmd = append(res[w].viewCmd, usec("evalsha")/views)
			t.Logf("run %d %-21s Redis CPU %.2f µs/order, %s %.2f µs/order; view get %.2f µs, evalsha %.2f µs", run+1, way.name,
				spent/orders, way.command, cmd/orders, res[w].view[len(res[w].view)-1], res[w].viewCmd[len(res[w].viewCmd)-1])
		}
	}
	for w, way := range ways {
		t.Logf("median %-21s Redis CPU %.2f µs/order [%.2f–%.2f], %s %.2f µs/order; view get %.2f µs [%.2f–%.2f], evalsha %.2f µs [%.2f–%.2f]", way.name,
			median(res[w].cpu), slices.Min(res[w].cpu), slices.Max(res[w].cpu), way.command, median(res[w].cmd),
			median(res[w].view), slices.Min(res[w].view), slices.Max(res[w].view),
			median(res[w].viewCmd), slices.Min(res[w].viewCmd), slices.Max(res[w].viewCmd))
	}
	set, err := rdb.MemoryUsage(ctx, keys.Created(sale), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := rdb.MemoryUsage(ctx, keys.Orders(sale), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memory: created set %.1f bytes/order, orders hash %.1f bytes/order (MEMORY USAGE ... SAMPLES 0, %d orders)",
		float64(set)/orders, float64(hash)/orders, orders)
}

func infoFloat(info, field string) float64 {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// measureRedis starts a redis-server of the test's own (AOF on, everysec,
// as deployed) with the scripts loaded, and returns a context bounding the
// measurement, a client (both ended with the test), the keys and the
// loader.
func measureRedis(t *testing.T) (context.Context, *redis.Client, scripts.Keys, *scripts.Loader) {
	t.Helper()
	srv := localstack.PrivateRedis(t, localstack.RedisOptions{Dir: t.TempDir(),
		Args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--save", ""}})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	keys := scripts.Keys{Prefix: "m"}
	loader := scripts.New(rdb, "", keys)
	if _, err := loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, rdb, keys, loader
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// TestViewCost measures what the order view's get costs Redis on a record
// flagged created (as the mark script of the releases before left it) and
// on one flagged queued whose id is in the created set (as the marker
// leaves it: one SISMEMBER more), in alternating blocks on a redis-server
// of its own. Run it with FLASHGATE_MEASURE_MARK=1 and -v.
func TestViewCost(t *testing.T) {
	if os.Getenv("FLASHGATE_MEASURE_MARK") == "" {
		t.Skip("a measurement: FLASHGATE_MEASURE_MARK=1 go test -run TestViewCost -v ./consumer/")
	}
	ctx, rdb, keys, loader := measureRedis(t)
	const sale, n, blocks = "view", 2000, 10
	rec := scripts.Record{State: order.StateConfirmed, ReservedAt: time.Now().UnixMilli(), Quantity: 1, UserID: "user-000000"}
	q := rec.String()
	rec.Created = true
	c := rec.String()
	// 100,000 orders of each kind, so that the set is a sale's size.
	for lo := 0; lo < 100000; lo += 1000 {
		var hs, ss []any
		for i := lo; i < lo+1000; i++ {
			hs = append(hs, fmt.Sprintf("c%031d", i), c, fmt.Sprintf("q%031d", i), q)
			ss = append(ss, fmt.Sprintf("q%031d", i))
		}
		rdb.HSet(ctx, keys.Orders(sale), hs...)
		rdb.SAdd(ctx, keys.Created(sale), ss...)
	}
	viewKeys := []string{keys.Meta(sale), keys.Users(sale), keys.Outbox(sale), keys.Orders(sale), keys.Due(sale), keys.Created(sale)}
	cpu := func() float64 {
		info := rdb.Info(ctx, "cpu").Val()
		return (infoFloat(info, "used_cpu_sys") + infoFloat(info, "used_cpu_user")) * 1e6
	}
	spent := map[string][]float64{}
	for b := range blocks {
		for _, kind := range []string{"c", "q"} {
			before := cpu()
			for i := range n {
				r, err := loader.Order(ctx, viewKeys, "get", keys.Events(), sale, fmt.Sprintf("%s%031d", kind, (b*n+i)%100000))
				if err != nil || !r.Record.Created {
					t.Fatalf("view: %+v, %v", r, err)
				}
			}
			spent[kind] = append(spent[kind], (cpu()-before)/n)
		}
	}
	t.Logf("view get, Redis CPU per call over %d blocks of %d: record flagged c %.2f µs [%.2f–%.2f], q + SISMEMBER %.2f µs [%.2f–%.2f]",
		blocks, n, median(spent["c"]), slices.Min(spent["c"]), slices.Max(spent["c"]),
		median(spent["q"]), slices.Min(spent["q"]), slices.Max(spent["q"]))
}
