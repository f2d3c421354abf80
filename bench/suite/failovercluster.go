package main

// The failover part's Redis Cluster (failover.go): three primaries with a
// replica each, of the suite's own. localstack.StartRedisCluster makes
// primaries only, so the nodes are started by StartRedisServer (through
// suite.startRedis, which stops them too) and formed by redis-cli, as
// deploy/local/redis-ha.sh forms `make up-ha`'s.

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// startFailoverCluster starts foNodes cluster-mode nodes under dir and
// forms them into three primaries with a replica each (redis-cli --cluster
// create --cluster-replicas 1), then waits until it is healthy. The nodes
// started are returned with an error too, for the caller to stop.
func (s *suite) startFailoverCluster(ctx context.Context, dir string) (*ownCluster, error) {
	cl := newOwnCluster("", nil, redis.Options{MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	args := []string{"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no",
		"--cluster-replica-validity-factor", "0"}
	args = append(append(args, aofEverysec...), disklessSync...)
	for i := range foNodes {
		n, err := s.startRedis(ctx, localstack.RedisOptions{Dir: filepath.Join(dir, strconv.Itoa(i)), Cluster: true, Args: args})
		if err != nil {
			return cl, fmt.Errorf("cluster node %d: %w", i, err)
		}
		cl.add(n)
	}
	cctx, cancel := context.WithTimeout(ctx, foHealWait)
	defer cancel()
	create := exec.CommandContext(cctx, "redis-cli", append(append([]string{"--cluster", "create"}, cl.addrs()...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return cl, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	return cl, cl.waitHealthy(ctx)
}

// primaries is the cluster's shards as the first node that answers sees
// them.
func (c *ownCluster) primaries(ctx context.Context) ([]redis.ClusterShard, error) {
	var last error
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		shards, err := c.client(n.Addr).ClusterShards(ctx).Result()
		if err == nil {
			return shards, nil
		}
		last = err
	}
	return nil, fmt.Errorf("CLUSTER SHARDS: no node answers (last: %v)", last)
}

// views asks every node but skip (the killed one) for the primary of slot
// (CLUSTER SHARDS): each one's answer ("" for none, or no answer), and the
// primary all of them name when they agree on one other than skip.
func (c *ownCluster) views(ctx context.Context, slot int64, skip string) ([]string, string) {
	var views []string
	agreed, ok := "", true
	for _, n := range c.nodes {
		if n.Addr == skip {
			continue
		}
		shards, err := c.client(n.Addr).ClusterShards(ctx).Result()
		v := ""
		if err == nil {
			v = primaryOfSlot(shards, slot)
		}
		views = append(views, v)
		switch {
		case v == "" || v == skip:
			ok = false
		case agreed == "":
			agreed = v
		case agreed != v:
			ok = false
		}
	}
	if !ok {
		return views, ""
	}
	return views, agreed
}

// primaryOfSlot is the address of the primary in good health of the shard
// that holds slot, "" when there is none.
func primaryOfSlot(shards []redis.ClusterShard, slot int64) string {
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return n.IP + ":" + strconv.FormatInt(n.Port, 10)
				}
			}
			return ""
		}
	}
	return ""
}

// waitHealthy waits, within foHealWait, until every node says the cluster
// is ok with foNodes nodes and every slot served, and each of the
// foPrimaries primaries has a replica online at its offset.
func (c *ownCluster) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(foHealWait)
	for {
		err := c.healthy(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the cluster not healthy in %v: %w", foHealWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *ownCluster) healthy(ctx context.Context) error {
	for _, n := range c.nodes {
		info, err := c.client(n.Addr).ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		if !localstack.ClusterHealthy(info, foNodes) {
			return fmt.Errorf("%s: not ok: %q", n.Addr, info)
		}
	}
	shards, err := c.primaries(ctx)
	if err != nil {
		return err
	}
	primaries := 0
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue
		}
		p := primaryOfSlot(shards, sh.Slots[0].Start)
		if p == "" {
			return fmt.Errorf("slot %d has no primary online", sh.Slots[0].Start)
		}
		primaries++
		info, err := c.client(p).Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", p, err)
		}
		online := false
		for _, n := range sh.Nodes {
			if n.Role == "replica" {
				state, offset := replicaState(info, n.IP+":"+strconv.FormatInt(n.Port, 10))
				online = online || (state == "online" && offset == infoValue(info, "master_repl_offset"))
			}
		}
		if !online {
			return fmt.Errorf("primary %s has no replica online and caught up", p)
		}
	}
	if primaries != foPrimaries {
		return fmt.Errorf("%d primaries serve slots, want %d", primaries, foPrimaries)
	}
	return nil
}
