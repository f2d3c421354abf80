package localstack

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SingleRedisOnly skips tb, saying why, when the tests run on a Redis
// Cluster (Cluster): for a test that needs one Redis, e.g. a proxy in front
// of it. `make test-cluster` runs whole packages on the cluster, so a test
// that cannot run there says so here, or through a kit call that needs one
// Redis (Control of "redis", PrivateRedis), which calls this.
func SingleRedisOnly(tb testing.TB, why string) {
	tb.Helper()
	if Cluster() {
		tb.Skipf("one Redis only: %s (FLASHGATE_REDIS_ADDRS names a Redis Cluster)", why)
	}
}

// ClusterSlots is Redis Cluster's number of hash slots.
const ClusterSlots = 16384

// ClusterOptions say how to start a RedisCluster.
type ClusterOptions struct {
	// Dir holds one folder per node (0, 1, …) with its data, its log and
	// its node table. Required.
	Dir string
	// Primaries is the number of nodes, each a primary (no replicas);
	// three when 0.
	Primaries int
	// Args are further settings of every node, as redis-server reads them
	// on its command line.
	Args []string
	// Command is RedisOptions.Command, for every node.
	Command func(name string, args ...string) *exec.Cmd
}

// RedisCluster is a Redis Cluster of its starter's own: redis-server
// processes in cluster mode on free loopback ports (StartRedisServer), the
// hash slots split among them as `redis-cli --cluster create` splits them.
// deploy/local/cluster.sh starts the shared cluster of `make up-cluster`;
// this one is a test's or the bench suite's, which may empty it, stop it
// and measure its processes without disturbing anyone.
type RedisCluster struct {
	Nodes []*RedisServer
}

// clusterStartWait bounds the nodes' meeting: each must see every other
// and every slot served.
const clusterStartWait = 30 * time.Second

// StartRedisCluster starts o.Primaries nodes (StartRedisServer with
// Cluster), gives each its range of slots and a config epoch of its own
// (as redis-cli does, so that no epoch collision must be resolved first),
// makes them meet, and waits, within ctx and 30 s, until every node says
// the cluster is ok, knows every node and sees every slot served. On an
// error the nodes it started are stopped.
func StartRedisCluster(ctx context.Context, o ClusterOptions) (*RedisCluster, error) {
	if o.Dir == "" {
		return nil, errors.New("localstack: ClusterOptions.Dir is required")
	}
	if o.Primaries == 0 {
		o.Primaries = 3
	}
	c := &RedisCluster{}
	fail := func(err error) (*RedisCluster, error) {
		c.Stop()
		return nil, err
	}
	for i := range o.Primaries {
		n, err := StartRedisServer(ctx, RedisOptions{Dir: filepath.Join(o.Dir, strconv.Itoa(i)), Args: o.Args,
			Cluster: true, Command: o.Command})
		if err != nil {
			return fail(fmt.Errorf("cluster node %d: %w", i, err))
		}
		c.Nodes = append(c.Nodes, n)
	}
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer clients[i].Close()
	}
	for i, r := range SlotRanges(len(c.Nodes)) {
		if err := clients[i].ClusterAddSlotsRange(ctx, r[0], r[1]).Err(); err != nil {
			return fail(fmt.Errorf("cluster node %s: CLUSTER ADDSLOTS: %w", c.Nodes[i].Addr, err))
		}
		if err := clients[i].Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fail(fmt.Errorf("cluster node %s: CLUSTER SET-CONFIG-EPOCH: %w", c.Nodes[i].Addr, err))
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port(n.Addr), port(n.Bus)).Err(); err != nil {
			return fail(fmt.Errorf("CLUSTER MEET %s: %w", n.Addr, err))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, clusterStartWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i, rdb := range clients {
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && ClusterHealthy(info, len(c.Nodes)) {
				break
			}
			select {
			case <-ctx.Done():
				return fail(fmt.Errorf("cluster node %s not ok in time: %v %q", c.Nodes[i].Addr, err, info))
			case <-tick.C:
			}
		}
	}
	return c, nil
}

// Addrs are the nodes' client addresses, as FLASHGATE_REDIS_ADDRS takes
// them (comma-joined).
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Stop stops every node cleanly (RedisServer.Stop) and returns the first
// error; the data stays in the nodes' folders.
func (c *RedisCluster) Stop() error {
	var first error
	for _, n := range c.Nodes {
		if err := n.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// SlotRanges splits the hash slots among n primaries as `redis-cli
// --cluster create` does (3 primaries: 0-5460, 5461-10922, 10923-16383).
func SlotRanges(n int) [][2]int {
	per := float64(ClusterSlots) / float64(n)
	ranges := make([][2]int, n)
	first, cursor := 0, 0.0
	for i := range ranges {
		last := int(math.Round(cursor + per - 1))
		if last > ClusterSlots-1 || i == n-1 {
			last = ClusterSlots - 1
		}
		ranges[i] = [2]int{first, last}
		first = last + 1
		cursor += per
	}
	return ranges
}

// ClusterHealthy reads a CLUSTER INFO answer: the node says the cluster is
// ok, knows its n nodes and sees every slot served (what cluster.sh's
// healthy checks too).
func ClusterHealthy(info string, n int) bool {
	want := map[string]string{"cluster_state": "ok", "cluster_known_nodes": strconv.Itoa(n),
		"cluster_slots_ok": strconv.Itoa(ClusterSlots)}
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if w, ok := want[k]; ok && v == w {
			delete(want, k)
		}
	}
	return len(want) == 0
}

// OwnRedis starts a Redis of the test's own shaped as the shared one of
// the run (FLASHGATE_REDIS_ADDRS): one redis-server, or a cluster of three
// primaries under `make test-cluster`, stopped when the test ends; it
// returns the addresses a client is given. A test that disturbs what the
// whole server shares, as SCRIPT FLUSH in a loop does to every script
// cache, runs on it: test packages run side by side on the shared one,
// and another package's calls would meet the storm too.
func OwnRedis(tb testing.TB) []string {
	tb.Helper()
	if !Cluster() {
		return []string{PrivateRedis(tb, RedisOptions{Dir: tb.TempDir()}).Addr}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartRedisCluster(ctx, ClusterOptions{Dir: tb.TempDir(), Primaries: len(RedisAddrs)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c.Addrs()
}
