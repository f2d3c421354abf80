package main

// The buckets part's Redis Cluster of three primaries, and the machine's
// floor under its ratios (buckets.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// startCluster starts the suite's cluster (localstack.StartRedisCluster,
// the one launcher of a private cluster): clusterPrimaries nodes on free
// ports, on every CPU as the suite's other servers, set up as
// deploy/local/cluster.sh sets up the nodes of `make up-cluster`, with no
// automatic AOF rewrite (its fork would weigh on one round alone; each
// round's start rewrites it instead).
func (s *suite) startCluster(ctx context.Context) (*ownCluster, error) {
	dir, err := os.MkdirTemp(".run/bench", "buckets-")
	if err != nil {
		return nil, err
	}
	rc, err := localstack.StartRedisCluster(ctx, localstack.ClusterOptions{Dir: dir, Primaries: clusterPrimaries,
		Command: func(name string, args ...string) *exec.Cmd { return pinned(cpuEvery, name, args...) },
		Args:    append([]string{"--cluster-node-timeout", "5000"}, aofEverysec...)})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.servers = append(s.servers, rc.Nodes...)
	return newOwnCluster(dir, rc.Nodes, redis.Options{}), nil
}

// The machine's floor under K = 3 ÷ K = 1: the same reserve script calls,
// with nothing of buckets (no pool, no moves, no turns), sent one at a time
// from this suite either all to one primary or in turn to the three. What
// the second costs beyond the first is what running the same work as three
// processes costs on this machine (two cores shared by three primaries, a
// gateway and a load: each primary wakes for one call in three, on
// whichever core is free), which buckets cannot take away but by carrying
// more buyers per call; on a cluster with a core per primary it is not
// there.
const (
	floorBatch  = 48      // reservations per call: about what a bucket's call carries under the hot load
	floorOrders = 144_000 // per variant
)

// floorRun is one measurement of the floor: Redis CPU µs per order of each
// node, with all calls on one node and with the calls in turn on all.
type floorRun struct{ one, turns []float64 }

// rotationFloor measures one floorRun on an empty cluster.
func (s *suite) rotationFloor(ctx context.Context, cl *ownCluster) (floorRun, error) {
	var fr floorRun
	if err := cl.empty(ctx); err != nil {
		return fr, err
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs()})
	defer cc.Close()
	keys := scripts.Keys{Prefix: "floor"}
	loader := scripts.New(cc, "", keys)
	if _, err := loader.Load(ctx); err != nil {
		return fr, fmt.Errorf("floor: load the scripts: %w", err)
	}
	// A sale on each node, as the meta hash the admin script writes holds
	// it (stock, limit; no buckets, no hold), found by its tag's slot.
	var tag [6]byte
	rand.Read(tag[:])
	sales := make([]string, len(cl.nodes))
	for i, found := 0, 0; found < len(sales); i++ {
		if i == 10_000 {
			return fr, errors.New("floor: no sale id found for every node")
		}
		sale := fmt.Sprintf("floor-%s-%d", hex.EncodeToString(tag[:]), i)
		n, err := cc.MasterForKey(ctx, keys.Meta(sale))
		if err != nil {
			return fr, fmt.Errorf("floor: primary of %s: %w", sale, err)
		}
		if j := cl.index(n.Options().Addr); j >= 0 && sales[j] == "" {
			sales[j] = sale
			found++
		}
	}
	for _, sale := range sales {
		if err := cc.HSet(ctx, keys.Meta(sale), "stock", 2*floorOrders, "sold", 0, "limit", 1).Err(); err != nil {
			return fr, fmt.Errorf("floor: sale %s: %w", sale, err)
		}
	}
	next := 0
	measure := func(nodes int) ([]float64, error) {
		before, err := cl.cpu(0)
		if err != nil {
			return nil, err
		}
		var b scripts.ReserveBatch
		for call := 0; call*floorBatch < floorOrders; call++ {
			sale := sales[call%nodes]
			b.Reset()
			for range floorBatch {
				next++
				b.Add("o"+strconv.Itoa(next), "u"+strconv.Itoa(next), 1, 0)
			}
			if _, err := loader.Reserve(ctx, []string{keys.Meta(sale), keys.Users(sale), keys.Outbox(sale),
				keys.Orders(sale), keys.Due(sale)}, sale, &b); err != nil {
				return nil, fmt.Errorf("floor: reserve on %s: %w", sale, err)
			}
		}
		after, err := cl.cpu(0)
		if err != nil {
			return nil, err
		}
		per := make([]float64, len(cl.nodes))
		for i := range per {
			per[i] = float64(after[i]-before[i]) / float64(time.Microsecond) / floorOrders
		}
		return per, nil
	}
	var err error
	if fr.one, err = measure(1); err != nil {
		return fr, err
	}
	if fr.turns, err = measure(len(cl.nodes)); err != nil {
		return fr, err
	}
	return fr, nil
}

// floorRatios are the medians over runs of turns ÷ one: the busiest node,
// and all nodes together.
func floorRatios(runs []floorRun) (busiest, all float64) {
	var bs, as []float64
	for _, r := range runs {
		ob, oa := busiestAll(r.one)
		tb, ta := busiestAll(r.turns)
		if ob > 0 && oa > 0 {
			bs, as = append(bs, tb/ob), append(as, ta/oa)
		}
	}
	if len(bs) == 0 {
		return 0, 0
	}
	return medianOf(bs), medianOf(as)
}

// busiestAll is the largest of v and their sum.
func busiestAll(v []float64) (busiest, all float64) {
	for _, x := range v {
		busiest, all = max(busiest, x), all+x
	}
	return busiest, all
}
