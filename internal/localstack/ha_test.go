package localstack

import (
	"bufio"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// haFailoverWait is a generous bound on each wait of the failover tests
// (a promotion, a rejoin): the topology does each in seconds; the bound
// only keeps a test that fails from hanging.
const haFailoverWait = 90 * time.Second

// rabbitNodes are the nodes of deploy/local/rabbitmq-cluster.sh.
var rabbitNodes = []string{"fgha1@localhost", "fgha2@localhost", "fgha3@localhost"}

// writeReplicated sets key on the primary addr and waits (WAIT) until one
// replica holds it: what a failover must not lose.
func writeReplicated(t *testing.T, addr, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := redisCall(ctx, addr, "SET", key, val); err != nil {
		t.Fatal(err)
	}
	n, err := redisCall(ctx, addr, "WAIT", "1", "1500")
	if err != nil || n != int64(1) {
		t.Fatalf("WAIT 1 on %s: %v %v: the replica does not confirm the write", addr, n, err)
	}
}

// readKey is GET key on addr.
func readKey(t *testing.T, addr, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := redisCall(ctx, addr, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	return s
}

// roleOf is the role of the Redis on addr (master, slave) and, for a
// replica, its primary's address.
func roleOf(t *testing.T, addr string) (role, primary string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := redisCall(ctx, addr, "INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := v.(string)
	role = infoField(info, "role")
	if role == "slave" {
		primary = infoField(info, "master_host") + ":" + infoField(info, "master_port")
	}
	return role, primary
}

// dropKey deletes key wherever it is now (a DEL on a node that does not
// serve it is refused, MOVED, and changes nothing); best effort.
func dropKey(addrs []string, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range addrs {
		_, _ = redisCall(ctx, a, "DEL", key)
	}
}

// A cluster primary killed (SIGKILL): its replica takes over its slots
// with what it had confirmed, and the killed node, started again, comes
// back as the replica of the one that replaced it.
func TestHAClusterFailover(t *testing.T) {
	h := HA(t)
	t.Cleanup(func() { h.Heal(t) })
	key := "fg:{ha" + RandomHex(4) + "}:meta"
	t.Cleanup(func() { dropKey(h.ClusterAddrs, key) })
	primary := h.PrimaryOf(t, key)
	if primary == "" {
		t.Fatalf("no primary serves %q", key)
	}
	replica := h.ReplicaOf(t, primary)
	if replica == "" {
		t.Fatalf("primary %s has no replica in sync", primary)
	}
	writeReplicated(t, primary, key, "before")

	h.KillRedis(t, primary)
	killed := time.Now()
	WaitFor(t, haFailoverWait, "CLUSTER SHARDS to show "+key+"'s slot served by "+replica, func() bool {
		return h.PrimaryOf(t, key) == replica
	})
	t.Logf("%s promoted %v after %s was killed", replica, time.Since(killed).Round(100*time.Millisecond), primary)
	if got := readKey(t, replica, key); got != "before" {
		t.Errorf("GET %s on the promoted %s: %q, want what the old primary confirmed (WAIT 1): %q", key, replica, got, "before")
	}

	h.StartRedis(t, primary)
	started := time.Now()
	WaitFor(t, haFailoverWait, primary+" to be a replica of "+replica+" in sync", func() bool {
		return h.ReplicaOf(t, replica) == primary
	})
	t.Logf("%s a replica in sync %v after its start", primary, time.Since(started).Round(100*time.Millisecond))
	if role, of := roleOf(t, primary); role != "slave" || of != replica {
		t.Errorf("%s: role %s of %q, want a replica of %s", primary, role, of, replica)
	}
	if got := h.PrimaryOf(t, key); got != replica {
		t.Errorf("after %s came back, the nodes name %q the primary of %q, want %s", primary, got, key, replica)
	}
}

// A cluster primary that hangs (SIGSTOP) is replaced like a dead one, and
// when it runs again it finds itself a replica.
func TestHAClusterPausedPrimary(t *testing.T) {
	h := HA(t)
	t.Cleanup(func() { h.Heal(t) })
	key := "fg:{ha" + RandomHex(4) + "}:meta"
	primary := h.PrimaryOf(t, key)
	if primary == "" {
		t.Fatalf("no primary serves %q", key)
	}
	replica := h.ReplicaOf(t, primary)
	if replica == "" {
		t.Fatalf("primary %s has no replica in sync", primary)
	}

	h.PauseRedis(t, primary)
	WaitFor(t, haFailoverWait, replica+" to take over "+key+"'s slot from the paused "+primary, func() bool {
		return h.PrimaryOf(t, key) == replica
	})
	h.ResumeRedis(t, primary)
	WaitFor(t, haFailoverWait, "the resumed "+primary+" to be a replica of "+replica, func() bool {
		return h.ReplicaOf(t, replica) == primary
	})
}

// The Sentinels' primary killed: they promote its replica within their
// bounds, with what it had confirmed; the old primary, started again,
// starts as the replica of the new one (the script asks the Sentinels),
// never as a second primary.
func TestHASentinelFailover(t *testing.T) {
	h := HA(t)
	t.Cleanup(func() { h.Heal(t) })
	primary := h.SentinelPrimary(t)
	if !slices.Contains(h.SentinelDataAddrs, primary) {
		t.Fatalf("the Sentinels name %q, not one of the data nodes %v", primary, h.SentinelDataAddrs)
	}
	var other string
	for _, a := range h.SentinelDataAddrs {
		if a != primary {
			other = a
		}
	}
	if got := h.ReplicaOf(t, primary); got != other {
		t.Fatalf("the replica of %s in sync is %q, want %s", primary, got, other)
	}
	key := "fg:ha:" + RandomHex(4)
	t.Cleanup(func() { dropKey(h.SentinelDataAddrs, key) })
	writeReplicated(t, primary, key, "before")

	h.KillRedis(t, primary)
	killed := time.Now()
	WaitFor(t, haFailoverWait, "SENTINEL get-master-addr-by-name "+h.SentinelMaster+" to name "+other, func() bool {
		return h.SentinelPrimary(t) == other
	})
	t.Logf("the Sentinels switched to %s %v after %s was killed", other, time.Since(killed).Round(100*time.Millisecond), primary)
	if role, _ := roleOf(t, other); role != "master" {
		t.Errorf("the Sentinels name %s, whose role is %s", other, role)
	}
	if got := readKey(t, other, key); got != "before" {
		t.Errorf("GET %s on the promoted %s: %q, want what the old primary confirmed (WAIT 1): %q", key, other, got, "before")
	}

	h.StartRedis(t, primary)
	if role, of := roleOf(t, primary); role != "slave" || of != other {
		t.Errorf("%s started again as %s of %q, want a replica of %s from its start", primary, role, of, other)
	}
	WaitFor(t, haFailoverWait, primary+" to be a replica of "+other+" in sync", func() bool {
		return h.ReplicaOf(t, other) == primary
	})
}

// One RabbitMQ node of three killed (SIGKILL of its VM): the other two
// still run as a cluster and list each other; started again, it rejoins.
func TestHARabbitNodeRejoins(t *testing.T) {
	h := HA(t)
	t.Cleanup(func() { h.Heal(t) })
	for n := 1; n <= 3; n++ {
		if got := h.RabbitRunning(t, n); !slices.Equal(got, rabbitNodes) {
			t.Fatalf("node %d lists %v running, want %v", n, got, rabbitNodes)
		}
	}
	const victim = 2
	rest := slices.Delete(slices.Clone(rabbitNodes), victim-1, victim)

	h.KillRabbit(t, victim)
	WaitFor(t, haFailoverWait, "nodes 1 and 3 to list each other running, and not node 2", func() bool {
		return slices.Equal(h.RabbitRunning(t, 1), rest) && slices.Equal(h.RabbitRunning(t, 3), rest)
	})
	for _, n := range []int{1, 3} {
		c, err := amqp.DialConfig(h.RabbitURLs[n-1], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			t.Errorf("node %d (%s) with node 2 down: %v", n, h.RabbitURLs[n-1], err)
			continue
		}
		_ = c.Close()
	}

	started := time.Now()
	h.StartRabbit(t, victim)
	t.Logf("node %d back in the cluster %v after its start", victim, time.Since(started).Round(100*time.Millisecond))
	for n := 1; n <= 3; n++ {
		if got := h.RabbitRunning(t, n); !slices.Equal(got, rabbitNodes) {
			t.Errorf("node %d lists %v running, want %v", n, got, rabbitNodes)
		}
	}
}

// Without FLASHGATE_TEST_HA=1, HA skips its test before touching anything.
func TestHASkipsWithoutTheVariable(t *testing.T) {
	t.Setenv("FLASHGATE_TEST_HA", "")
	var sub *testing.T
	reached := false
	t.Run("failover", func(t *testing.T) {
		sub = t
		HA(t)
		reached = true
	})
	if reached || !sub.Skipped() {
		t.Errorf("HA without FLASHGATE_TEST_HA: reached the test %v, skipped %v; want a skip", reached, sub.Skipped())
	}
}

func TestReadReply(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    any
		wantErr string
	}{
		{name: "simple string", in: "+OK\r\n", want: "OK"},
		{name: "integer", in: ":-42\r\n", want: int64(-42)},
		{name: "bulk", in: "$5\r\na\r\nbc\r\n", want: "a\r\nbc"},
		{name: "nil bulk", in: "$-1\r\n", want: ""},
		{name: "nested array", in: "*2\r\n*2\r\n$5\r\nslots\r\n:7\r\n+x\r\n",
			want: []any{[]any{"slots", int64(7)}, "x"}},
		{name: "empty array", in: "*0\r\n", want: []any{}},
		{name: "error reply", in: "-MOVED 3999 127.0.0.1:7102\r\n", wantErr: "MOVED 3999"},
		{name: "short bulk", in: "$10\r\nabc\r\n", wantErr: "EOF"},
		{name: "bad type", in: "%1\r\n", wantErr: "unexpected reply"},
		{name: "bad length", in: "*x\r\n", wantErr: "bad array length"},
		{name: "too deep", in: strings.Repeat("*1\r\n", 10) + ":1\r\n", wantErr: "too deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readReply(bufio.NewReader(strings.NewReader(tt.in)), 0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %#v, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, %v; want %#v", got, err, tt.want)
			}
		})
	}
}

func TestShardPrimaryOf(t *testing.T) {
	view := shardView{
		{slots: [][2]int64{{0, 5460}}, nodes: []shardNode{
			{addr: "127.0.0.1:7101", role: "master", health: "fail"},
			{addr: "127.0.0.1:7105", role: "replica", health: "online"}}},
		{slots: [][2]int64{{5461, 10922}, {16000, 16383}}, nodes: []shardNode{
			{addr: "127.0.0.1:7106", role: "replica", health: "online"},
			{addr: "127.0.0.1:7102", role: "master", health: "online"}}},
	}
	tests := []struct {
		name string
		slot int64
		want string
	}{
		{name: "primary failed", slot: 10, want: ""},
		{name: "second range of a shard", slot: 16383, want: "127.0.0.1:7102"},
		{name: "first slot of a shard", slot: 5461, want: "127.0.0.1:7102"},
		{name: "no shard", slot: 12000, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := view.primaryOf(tt.slot); got != tt.want {
				t.Errorf("primaryOf(%d) = %q, want %q", tt.slot, got, tt.want)
			}
		})
	}
}
