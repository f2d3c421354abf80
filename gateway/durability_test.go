package gateway

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// ownRedis is a redis-server of one test's own, on a free loopback port,
// with its data in the test's temporary folder, so that the test may change
// its persistence settings without touching the shared one of `make up`.
type ownRedis struct {
	addr string
	ctl  *redis.Client // the test's own client: CONFIG SET, ACL SETUSER
}

// startOwnRedis starts a redis-server as deploy/local/service.sh starts the
// local one (AOF on, no RDB snapshots) with fsync (everysec or always),
// and stops it (SIGTERM, then SIGKILL) when the test ends.
func startOwnRedis(t *testing.T, fsync string) *ownRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := localstack.StartRedisServer(ctx, localstack.RedisOptions{Dir: t.TempDir(),
		Args: []string{"--appendonly", "yes", "--appendfsync", fsync, "--save", ""}})
	if err != nil {
		t.Fatal(err)
	}
	r := &ownRedis{addr: srv.Addr, ctl: redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})}
	t.Cleanup(func() {
		r.ctl.Close()
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// do runs one command on r as the test's own client, failing the test on
// an error.
func (r *ownRedis) do(t *testing.T, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ctl.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// commandStats is r's INFO commandstats.
func (r *ownRedis) commandStats(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := r.ctl.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// calls is how many times r ran cmd (lower case), from INFO commandstats.
func (r *ownRedis) calls(t *testing.T, cmd string) int {
	t.Helper()
	stats := r.commandStats(t)
	_, rest, ok := strings.Cut(stats, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}

// aclDenials is how many times r's ACL refused the command cmd
// ("config|get"), from ACL LOG, which counts repeats of one entry.
func (r *ownRedis) aclDenials(t *testing.T, cmd string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entries, err := r.ctl.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if e.Reason == "command" && e.Object == cmd {
			n += e.Count
		}
	}
	return n
}

// onRedis points a test gateway at r, with zero-loss mode on or off.
func onRedis(r *ownRedis, zeroLoss bool) gwOption {
	return func(c *config.Config) {
		c.Redis.Addrs = []string{r.addr}
		c.Redis.ZeroLoss = zeroLoss
	}
}

// Zero-loss mode on a Redis that fsyncs every second: no buy is accepted
// and /readyz says why; once the primary fsyncs every write (CONFIG SET
// appendfsync always) buys are accepted within a bounded wait, and refused
// again when it stops.
func TestZeroLossSellsOnlyWhileRedisFsyncsEveryWrite(t *testing.T) {
	r := startOwnRedis(t, "everysec")
	g := startGateway(t, onRedis(r, true))
	g.mustSale("zl", `{"stock":1000,"per_user_limit":1}`)

	if b := g.buy("zl", "u-before", 1, "key-before"); b.code != 503 || b.status() != "unavailable" {
		t.Fatalf("buy with appendfsync everysec: %d %s, want 503 unavailable", b.code, b.raw)
	}
	ready := g.do("GET", g.base+"/readyz", "", nil)
	if ready.code != 503 || ready.status() != "unavailable" || !strings.Contains(ready.str("error"), "appendfsync everysec") {
		t.Fatalf("/readyz with appendfsync everysec: %d %s, want 503 unavailable naming appendfsync everysec", ready.code, ready.raw)
	}
	if m := g.scrape(); m["flashgate_redis_durable"] != 0 {
		t.Errorf("flashgate_redis_durable = %v with appendfsync everysec, want 0", m["flashgate_redis_durable"])
	}
	if v := g.view("zl"); v.num("sold") != 0 {
		t.Fatalf("sold %d after refused buys", v.num("sold"))
	}

	r.do(t, "CONFIG", "SET", "appendfsync", "always")
	n := 0
	localstack.WaitFor(t, 20*time.Second, "a buy accepted after CONFIG SET appendfsync always", func() bool {
		n++
		b := g.buy("zl", "u-"+strconv.Itoa(n), 1, "")
		if b.code != 202 && (b.code != 503 || b.status() != "unavailable") {
			t.Fatalf("buy while the gateway catches up: %d %s", b.code, b.raw)
		}
		return b.code == 202
	})
	// The refused key was not remembered: the same key now buys.
	if b := g.buy("zl", "u-before", 1, "key-before"); b.code != 202 {
		t.Errorf("buy with the key refused before: %d %s, want 202", b.code, b.raw)
	}
	if ready := g.do("GET", g.base+"/readyz", "", nil); ready.code != 200 {
		t.Errorf("/readyz with appendfsync always: %d %s", ready.code, ready.raw)
	}
	if m := g.scrape(); m["flashgate_redis_durable"] != 1 {
		t.Errorf("flashgate_redis_durable = %v with appendfsync always, want 1", m["flashgate_redis_durable"])
	}

	for _, set := range [][2]string{{"appendfsync", "everysec"}, {"appendonly", "no"}} {
		r.do(t, "CONFIG", "SET", set[0], set[1])
		localstack.WaitFor(t, 20*time.Second, "buys refused after CONFIG SET "+set[0]+" "+set[1], func() bool {
			n++
			b := g.buy("zl", "u-"+strconv.Itoa(n), 1, "")
			return b.code == 503 && b.status() == "unavailable"
		})
		ready := g.do("GET", g.base+"/readyz", "", nil)
		if ready.code != 503 || !strings.Contains(ready.str("error"), set[0]+" "+set[1]) {
			t.Errorf("/readyz after CONFIG SET %s %s: %d %s", set[0], set[1], ready.code, ready.raw)
		}
		r.do(t, "CONFIG", "SET", "appendfsync", "always")
		r.do(t, "CONFIG", "SET", "appendonly", "yes")
		localstack.WaitFor(t, 20*time.Second, "buys accepted again after restoring appendonly yes, appendfsync always", func() bool {
			n++
			return g.buy("zl", "u-"+strconv.Itoa(n), 1, "").code == 202
		})
	}
	g.checkLedger("zl")
}

// Zero-loss mode off: a Redis that fsyncs every second sells, /readyz is
// 200, and the gateway never asks Redis for its settings (no CONFIG GET
// over several of the mode's rounds) nor shows the mode's series.
func TestZeroLossOffChecksNothing(t *testing.T) {
	r := startOwnRedis(t, "everysec")
	r.do(t, "CONFIG", "RESETSTAT")
	g := startGateway(t, onRedis(r, false))
	g.mustSale("zl-off", `{"stock":10}`)
	if b := g.buy("zl-off", "u-1", 1, ""); b.code != 202 {
		t.Fatalf("buy with zero-loss mode off: %d %s, want 202", b.code, b.raw)
	}
	if ready := g.do("GET", g.base+"/readyz", "", nil); ready.code != 200 {
		t.Errorf("/readyz with zero-loss mode off: %d %s", ready.code, ready.raw)
	}
	if _, ok := g.scrape()["flashgate_redis_durable"]; ok {
		t.Error("flashgate_redis_durable is shown with zero-loss mode off")
	}
	// Several seconds of the gateway's background rounds (the sweeper's
	// and the bucket settling's registry reads, once a second each), in
	// which zero-loss mode, were it on, would have asked every second.
	localstack.WaitFor(t, 20*time.Second, "three seconds of background rounds", func() bool { return r.calls(t, "smembers") >= 6 })
	if stats := r.commandStats(t); strings.Contains(stats, "cmdstat_config|get:") {
		t.Errorf("the gateway asked CONFIG GET with zero-loss mode off:\n%s", stats)
	}
}

// A Redis that refuses CONFIG (as managed services do; here an ACL that
// takes CONFIG from the default user the gateway logs in as) cannot be
// verified: buys are refused, /readyz says why, and the log says so once
// at error level, not every second. Granting CONFIG GET on a Redis that
// fsyncs every write lets the gateway sell.
func TestZeroLossRefusedConfig(t *testing.T) {
	r := startOwnRedis(t, "always")
	// The test's own client keeps every right under a user of its own.
	r.do(t, "ACL", "SETUSER", "ctl", "on", ">ctl-password", "~*", "&*", "+@all")
	r.ctl.Close()
	r.ctl = redis.NewClient(&redis.Options{Addr: r.addr, Username: "ctl", Password: "ctl-password", MaxRetries: -1})
	r.do(t, "ACL", "SETUSER", "default", "-config")

	core, logs := observer.New(zapcore.InfoLevel)
	g := startGatewayLog(t, zap.New(core), onRedis(r, true))
	g.mustSale("zl-acl", `{"stock":10}`)
	if b := g.buy("zl-acl", "u-1", 1, ""); b.code != 503 || b.status() != "unavailable" {
		t.Fatalf("buy while CONFIG is refused: %d %s, want 503 unavailable", b.code, b.raw)
	}
	ready := g.do("GET", g.base+"/readyz", "", nil)
	if ready.code != 503 || !strings.Contains(ready.str("error"), "refuses CONFIG GET") {
		t.Errorf("/readyz while CONFIG is refused: %d %s", ready.code, ready.raw)
	}
	// Several rounds, one message: each round's CONFIG GET is refused, and
	// Redis counts the refusals in its ACL log.
	localstack.WaitFor(t, 20*time.Second, "three refused rounds", func() bool { return r.aclDenials(t, "config|get") >= 3 })
	refused := logs.FilterMessageSnippet("refuses CONFIG GET")
	if refused.Len() != 1 || refused.All()[0].Level != zapcore.ErrorLevel {
		t.Errorf("%d log entries about the refused CONFIG GET, want 1 at error level: %v", refused.Len(), refused.All())
	}
	if d := refused.All(); len(d) > 0 && !strings.Contains(d[0].ContextMap()["detail"].(string), r.addr) {
		t.Errorf("the log entry does not name the primary %s: %v", r.addr, d[0].ContextMap())
	}

	r.do(t, "ACL", "SETUSER", "default", "+config|get")
	n := 1
	localstack.WaitFor(t, 20*time.Second, "a buy accepted once CONFIG GET is granted", func() bool {
		n++
		return g.buy("zl-acl", "u-"+strconv.Itoa(n), 1, "").code == 202
	})
	if logs.FilterMessageSnippet("buys are accepted").Len() != 1 {
		t.Errorf("no log entry saying buys are accepted again: %v", logs.All())
	}
}
