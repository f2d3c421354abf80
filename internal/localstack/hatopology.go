package localstack

// What the HA topology looks like now, read from the servers themselves
// over a RESP connection of this file's own (a go-redis client would log
// every refused dial to the nodes the tests kill on purpose): which node
// is primary of a slot, a primary's replica, the Sentinels' primary.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrimaryOf returns the address of the cluster primary that serves key's
// slot now, as CLUSTER SHARDS of every node that answers says: "" while
// they disagree (a failover under way) or name no primary in good health
// for it. It fails tb when no node answers.
func (h *HAStack) PrimaryOf(tb testing.TB, key string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), haAskWait)
	defer cancel()
	slot := int64(-1)
	views := map[string]int{}
	for _, addr := range h.ClusterAddrs {
		if slot < 0 {
			v, err := redisCall(ctx, addr, "CLUSTER", "KEYSLOT", key)
			if err != nil {
				continue
			}
			n, ok := v.(int64)
			if !ok {
				tb.Fatalf("CLUSTER KEYSLOT %q on %s: %v", key, addr, v)
			}
			slot = n
		}
		shards, err := clusterShards(ctx, addr)
		if err != nil {
			continue
		}
		views[shards.primaryOf(slot)]++
	}
	if len(views) == 0 {
		tb.Fatalf("PrimaryOf %q: no node of %v answers", key, h.ClusterAddrs)
	}
	if len(views) > 1 {
		return ""
	}
	for primary := range views {
		return primary
	}
	return ""
}

// ReplicaOf returns the address of a replica of the Redis primary on
// primaryAddr (a cluster node or a Sentinel's data node) whose link is up,
// as the primary's INFO replication says (state=online): "" when it has
// none, does not answer, or is no primary.
func (h *HAStack) ReplicaOf(tb testing.TB, primaryAddr string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), haAskWait)
	defer cancel()
	v, err := redisCall(ctx, primaryAddr, "INFO", "replication")
	info, ok := v.(string)
	if err != nil || !ok || infoField(info, "role") != "master" {
		return ""
	}
	for i := 0; ; i++ {
		r := infoField(info, "slave"+strconv.Itoa(i))
		if r == "" {
			return ""
		}
		f := map[string]string{}
		for kv := range strings.SplitSeq(r, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["state"] == "online" {
			return net.JoinHostPort(f["ip"], f["port"])
		}
	}
}

// SentinelPrimary returns the primary's address that a quorum (two) of
// the Sentinels name now (SENTINEL GET-MASTER-ADDR-BY-NAME), "" when no
// two agree; it fails tb when no Sentinel answers.
func (h *HAStack) SentinelPrimary(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), haAskWait)
	defer cancel()
	says := map[string]int{}
	answered := 0
	for _, addr := range h.SentinelAddrs {
		v, err := redisCall(ctx, addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", h.SentinelMaster)
		if err != nil {
			continue
		}
		answered++
		if hp, ok := v.([]any); ok && len(hp) == 2 {
			host, _ := hp[0].(string)
			port, _ := hp[1].(string)
			says[net.JoinHostPort(host, port)]++
		}
	}
	if answered == 0 {
		tb.Fatalf("SentinelPrimary: no Sentinel of %v answers", h.SentinelAddrs)
	}
	for addr, n := range says {
		if n >= 2 {
			return addr
		}
	}
	return ""
}

// shardView is a CLUSTER SHARDS answer: per shard, its slot ranges and
// its nodes.
type shardView []struct {
	slots [][2]int64
	nodes []shardNode
}

type shardNode struct {
	addr, role, health string
}

// primaryOf is the address of the primary in good health ("online") of
// the shard that holds slot, "" when there is none.
func (s shardView) primaryOf(slot int64) string {
	for _, sh := range s {
		for _, r := range sh.slots {
			if slot < r[0] || slot > r[1] {
				continue
			}
			for _, n := range sh.nodes {
				if n.role == "master" && n.health == "online" {
					return n.addr
				}
			}
			return ""
		}
	}
	return ""
}

// clusterShards asks addr for CLUSTER SHARDS and decodes it.
func clusterShards(ctx context.Context, addr string) (shardView, error) {
	v, err := redisCall(ctx, addr, "CLUSTER", "SHARDS")
	if err != nil {
		return nil, err
	}
	shards, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SHARDS on %s: %v", addr, v)
	}
	out := make(shardView, len(shards))
	for i, s := range shards {
		m := pairs(s)
		slots, _ := m["slots"].([]any)
		for j := 0; j+1 < len(slots); j += 2 {
			lo, _ := slots[j].(int64)
			hi, _ := slots[j+1].(int64)
			out[i].slots = append(out[i].slots, [2]int64{lo, hi})
		}
		nodes, _ := m["nodes"].([]any)
		for _, n := range nodes {
			nm := pairs(n)
			ip, _ := nm["ip"].(string)
			port, _ := nm["port"].(int64)
			role, _ := nm["role"].(string)
			health, _ := nm["health"].(string)
			out[i].nodes = append(out[i].nodes, shardNode{addr: net.JoinHostPort(ip, strconv.FormatInt(port, 10)),
				role: role, health: health})
		}
	}
	return out, nil
}

// pairs reads a RESP2 key/value list (a map in RESP3) into a map.
func pairs(v any) map[string]any {
	l, _ := v.([]any)
	m := make(map[string]any, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		if k, ok := l[i].(string); ok {
			m[k] = l[i+1]
		}
	}
	return m
}

// haCallWait bounds one redisCall: a paused server accepts the connection
// (the kernel does) and never answers.
const haCallWait = 2 * time.Second

// redisCall sends one command to addr on a connection of its own and
// reads the reply, in RESP2: a string (simple or bulk; "" for a nil
// bulk), an int64, or a []any of those; a Redis error reply is an error.
// No client library, which would log each refused dial of the nodes that
// the failover tests take down on purpose (as redisInfo).
func redisCall(ctx context.Context, addr string, args ...string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, haCallWait)
	defer cancel()
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(c), 0)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", addr, strings.Join(args, " "), err)
	}
	return v, nil
}

// readReply reads one RESP2 reply; depth bounds the nesting.
func readReply(br *bufio.Reader, depth int) (any, error) {
	if depth > 8 {
		return nil, errors.New("reply nested too deep")
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<24 {
			return nil, fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<20 {
			return nil, fmt.Errorf("bad array length %q", body)
		}
		if n < 0 {
			return []any(nil), nil
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readReply(br, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}
