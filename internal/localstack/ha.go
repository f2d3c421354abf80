package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/retry"
)

// HAStack is the high-availability topology of `make up-ha`, as the
// failover tests see it: a Redis Cluster of three primaries with a
// replica each (deploy/local/redis-ha.sh), one Redis primary and its
// replica watched by three Sentinels (deploy/local/sentinel.sh), and a
// RabbitMQ cluster of three nodes (deploy/local/rabbitmq-cluster.sh),
// beside the services of `make up`. Its methods kill, pause and restart
// their processes through those scripts and read the topology from the
// servers themselves; each is bounded in time, fails the test (Fatalf:
// call it from the test's goroutine) when its script fails, with the
// script's output, and may be called from one test at a time.
type HAStack struct {
	// ClusterAddrs are the six nodes of the Redis Cluster, primaries
	// and replicas (which is which changes with each failover).
	ClusterAddrs []string
	// SentinelAddrs are the three Sentinels, SentinelMaster the name
	// they know the primary by: FLASHGATE_REDIS_ADDRS and
	// FLASHGATE_REDIS_SENTINEL_MASTER of a flashgate that follows it.
	SentinelAddrs  []string
	SentinelMaster string
	// SentinelDataAddrs are the primary and the replica the Sentinels
	// watch (SentinelPrimary says which is which now).
	SentinelDataAddrs []string
	// RabbitURLs are the AMQP URLs of the three RabbitMQ nodes, node 1
	// first, as FLASHGATE_AMQP_URL takes them (comma-joined).
	RabbitURLs []string
}

// The HA scripts, in deploy/local.
const (
	haRedisScript    = "redis-ha.sh"
	haSentinelScript = "sentinel.sh"
	haRabbitScript   = "rabbitmq-cluster.sh"
)

// haScriptWait bounds one call of an HA script: a start that heals waits
// up to 90 s for its Redis part to be healthy, and up to 3 minutes for a
// RabbitMQ node to boot and then for the cluster to settle.
const haScriptWait = 8 * time.Minute

// haAskWait bounds a look at the servers (PrimaryOf, ReplicaOf,
// SentinelPrimary): a second or two per server, a paused one included.
const haAskWait = 20 * time.Second

// HA skips tb unless the environment has FLASHGATE_TEST_HA=1 (`make
// test-ha` sets it, after `make up-ha`): its callers kill the topology's
// nodes, which no other test run should see happen. Otherwise it waits
// until no other test binary holds the topology (one package's failover
// tests at a time: the first call of a test binary takes .run/ha.lock
// until the binary exits), makes sure the topology is healthy (Heal: what
// is down is started again, bounded) and returns it. The tests of one
// binary that call it must not run in parallel with each other.
func HA(tb testing.TB) *HAStack {
	tb.Helper()
	if os.Getenv("FLASHGATE_TEST_HA") != "1" {
		tb.Skip("a failover test: it kills nodes of the high-availability topology of `make up-ha`; " +
			"run with FLASHGATE_TEST_HA=1 (make test-ha)")
	}
	if err := lockHA(); err != nil {
		tb.Fatal(err)
	}
	h := &HAStack{}
	if !h.heal(tb) {
		tb.FailNow()
	}
	list := func(script, action string) []string {
		return splitAddrs(strings.TrimSpace(haCall(tb, script, action)))
	}
	h.ClusterAddrs = list(haRedisScript, "addrs")
	h.SentinelAddrs = list(haSentinelScript, "addrs")
	h.SentinelDataAddrs = list(haSentinelScript, "data-addrs")
	h.SentinelMaster = strings.TrimSpace(haCall(tb, haSentinelScript, "name"))
	h.RabbitURLs = list(haRabbitScript, "urls")
	return h
}

// haLock holds .run/ha.lock, once taken, until the test binary exits.
var haLock struct {
	sync.Mutex
	f *os.File
}

// lockHA takes .run/ha.lock exclusively for the rest of the process's
// life, waiting up to 20 minutes (Lock's bound) for another test binary
// to let it go.
func lockHA() error {
	haLock.Lock()
	defer haLock.Unlock()
	if haLock.f != nil {
		return nil
	}
	root, err := Root()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(root, ".run", "ha.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	err = retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}, func(context.Context) error {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
			return retry.Stop(err)
		}
		return err
	}, nil)
	if err != nil {
		f.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: still held by another test binary after %v", f.Name(), lockWait)
		}
		return err
	}
	haLock.f = f
	return nil
}

// HAScript runs deploy/local/SCRIPT with args (redis-ha.sh, sentinel.sh
// or rabbitmq-cluster.sh), bounded by ctx, and returns its output, as
// Service does for service.sh.
func HAScript(ctx context.Context, script string, args ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", script), args...)
	// When ctx ends, the script is killed, not the redis-cli or rabbitmqctl
	// it waits for, which hold its output open: give up on them.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// haCall is HAScript for a test: bounded by haScriptWait, tb failed with
// the script's output when the script fails.
func haCall(tb testing.TB, script string, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), haScriptWait)
	defer cancel()
	out, err := HAScript(ctx, script, args...)
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	return out
}

// runHA is haCall of an action, whose output it logs.
func runHA(tb testing.TB, script string, args ...string) {
	tb.Helper()
	out := haCall(tb, script, args...)
	tb.Logf("%s %s: %s", script, strings.Join(args, " "), strings.TrimSpace(out))
}

// Heal starts every node of the topology that is down (or paused) and
// waits until each part is healthy again (the scripts' start, the three
// at once, each bounded): the failover tests call it in t.Cleanup, so
// that the next test finds the whole topology. It fails tb (Errorf) for
// each part that did not come back, with its script's output.
func (h *HAStack) Heal(tb testing.TB) {
	tb.Helper()
	h.heal(tb)
}

// heal is Heal; it reports whether every part is healthy.
func (h *HAStack) heal(tb testing.TB) bool {
	tb.Helper()
	scripts := []string{haRedisScript, haSentinelScript, haRabbitScript}
	outs := make([]string, len(scripts))
	errs := make([]error, len(scripts))
	var wg sync.WaitGroup
	for i, s := range scripts {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), haScriptWait)
			defer cancel()
			outs[i], errs[i] = HAScript(ctx, s, "start")
		})
	}
	wg.Wait()
	ok := true
	for i, s := range scripts {
		if errs[i] != nil {
			tb.Errorf("%s start: %v\n%s", s, errs[i], outs[i])
			ok = false
		} else {
			tb.Logf("%s start: %s", s, strings.TrimSpace(outs[i]))
		}
	}
	return ok
}

// redisScript says which script runs the Redis process on addr: fails tb
// when addr is none of the topology's.
func (h *HAStack) redisScript(tb testing.TB, addr string) (script, port string) {
	tb.Helper()
	switch {
	case slices.Contains(h.ClusterAddrs, addr):
		return haRedisScript, portOf(addr)
	case slices.Contains(h.SentinelDataAddrs, addr), slices.Contains(h.SentinelAddrs, addr):
		return haSentinelScript, portOf(addr)
	}
	tb.Fatalf("%s is no Redis process of the HA topology (cluster %v, Sentinel data nodes %v, Sentinels %v)",
		addr, h.ClusterAddrs, h.SentinelDataAddrs, h.SentinelAddrs)
	return "", ""
}

// portOf is the port of a host:port address.
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// KillRedis kills the Redis process on addr, a cluster node, a Sentinel's
// data node or a Sentinel (SIGKILL: no last write of its AOF), and
// returns once it is gone. Heal, or StartRedis, starts it again.
func (h *HAStack) KillRedis(tb testing.TB, addr string) {
	tb.Helper()
	script, port := h.redisScript(tb, addr)
	runHA(tb, script, "kill", port)
}

// StartRedis starts the Redis process on addr again and returns once it
// answers: a cluster node rejoins as a replica of its shard's primary
// now, a Sentinel's data node starts as a replica of the primary the
// Sentinels name.
func (h *HAStack) StartRedis(tb testing.TB, addr string) {
	tb.Helper()
	script, port := h.redisScript(tb, addr)
	runHA(tb, script, "node-start", port)
}

// PauseRedis stops the Redis process on addr (SIGSTOP: alive, silent, as
// a hung machine) until ResumeRedis, or the end of the test, which
// resumes it whatever happened.
func (h *HAStack) PauseRedis(tb testing.TB, addr string) {
	tb.Helper()
	script, port := h.redisScript(tb, addr)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), haScriptWait)
		defer cancel()
		// It may have been resumed, or killed, since: no failure here;
		// Heal says whether the topology came back.
		out, err := HAScript(ctx, script, "resume", port)
		tb.Logf("%s resume %s after the test: %v %s", script, port, err, strings.TrimSpace(out))
	})
	runHA(tb, script, "pause", port)
}

// ResumeRedis resumes the Redis process PauseRedis stopped (SIGCONT).
func (h *HAStack) ResumeRedis(tb testing.TB, addr string) {
	tb.Helper()
	script, port := h.redisScript(tb, addr)
	runHA(tb, script, "resume", port)
}

// KillRabbit kills the Erlang VM of RabbitMQ node n (1-3: RabbitURLs[n-1])
// with SIGKILL and returns once it is gone.
func (h *HAStack) KillRabbit(tb testing.TB, n int) {
	tb.Helper()
	runHA(tb, haRabbitScript, "kill", strconv.Itoa(n))
}

// StartRabbit starts RabbitMQ node n again and returns once it runs and
// is back in the cluster (its cluster_status lists the three running).
func (h *HAStack) StartRabbit(tb testing.TB, n int) {
	tb.Helper()
	runHA(tb, haRabbitScript, "node-start", strconv.Itoa(n))
}

// RabbitRunning returns the nodes (fgha1@localhost, …) that RabbitMQ node
// n's cluster_status lists as running, sorted; it fails tb when node n
// does not answer.
func (h *HAStack) RabbitRunning(tb testing.TB, n int) []string {
	tb.Helper()
	return strings.Fields(haCall(tb, haRabbitScript, "running", strconv.Itoa(n)))
}
