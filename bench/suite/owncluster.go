package main

// A Redis Cluster of the suite's own, as the buckets part (three primaries,
// localstack.StartRedisCluster) and the failover part (three primaries
// with a replica each, formed by redis-cli) start it: its nodes, and a
// client of each for the calls to that node alone.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

type ownCluster struct {
	dir     string // the nodes' data, removed by close ("" for none)
	nodes   []*localstack.RedisServer
	clients map[string]*redis.Client
	opts    redis.Options // of each node's client, but its address
}

// newOwnCluster is the cluster of nodes, each with a client of opts.
func newOwnCluster(dir string, nodes []*localstack.RedisServer, opts redis.Options) *ownCluster {
	c := &ownCluster{dir: dir, clients: map[string]*redis.Client{}, opts: opts}
	for _, n := range nodes {
		c.add(n)
	}
	return c
}

// add adds node n and its client.
func (c *ownCluster) add(n *localstack.RedisServer) {
	o := c.opts
	o.Addr = n.Addr
	c.nodes = append(c.nodes, n)
	c.clients[n.Addr] = redis.NewClient(&o)
}

func (c *ownCluster) addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.Addr
	}
	return a
}

// client is the client of the node on addr.
func (c *ownCluster) client(addr string) *redis.Client { return c.clients[addr] }

// index is the index of the node whose address is addr, -1 for none.
func (c *ownCluster) index(addr string) int {
	for i, n := range c.nodes {
		if n.Addr == addr {
			return i
		}
	}
	return -1
}

// close closes the clients, stops the nodes and removes their data.
func (c *ownCluster) close() {
	for _, cl := range c.clients {
		cl.Close()
	}
	for _, n := range c.nodes {
		if err := n.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
		}
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// empty deletes every key and rewrites each node's AOF (outside what is
// measured), so that each round starts from the same empty cluster and no
// AOF grows over the rounds.
func (c *ownCluster) empty(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := c.client(n.Addr).FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("%s: FLUSHALL: %w", n.Addr, err)
		}
		if err := c.client(n.Addr).BgRewriteAOF(ctx).Err(); err != nil && !strings.Contains(err.Error(), "in progress") {
			return fmt.Errorf("%s: BGREWRITEAOF: %w", n.Addr, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for {
			info, err := c.client(n.Addr).Info(ctx, "persistence").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO persistence: %w", n.Addr, err)
			}
			if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: the AOF rewrite did not finish in 30 s", n.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// cpu reads every node's CPU and the gateway's (pid; 0 for none), the
// gateway last.
func (c *ownCluster) cpu(gateway int) ([]time.Duration, error) {
	var out []time.Duration
	for _, n := range c.nodes {
		d, err := procCPU(n.Pid())
		if err != nil {
			return nil, fmt.Errorf("redis-server %s: %w", n.Addr, err)
		}
		out = append(out, d)
	}
	if gateway > 0 {
		d, err := procCPU(gateway)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}
