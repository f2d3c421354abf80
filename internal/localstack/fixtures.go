package localstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

// Where the tests find the services: the local stack's, which are config's
// defaults (TestDefaultsAreTheLocalStack holds them to
// deploy/local/stack.env), unless FLASHGATE_REDIS_ADDRS, FLASHGATE_AMQP_URL
// or FLASHGATE_MYSQL_DSN point elsewhere. RedisAddrs are all the addresses
// of FLASHGATE_REDIS_ADDRS (several: a Redis Cluster, as for the binary;
// `make test-cluster` names the nodes of `make up-cluster`), RedisAddr the
// first. Read once, when the test binary starts; not to be changed.
var (
	RedisAddrs = splitAddrs(override("FLASHGATE_REDIS_ADDRS", strings.Join(config.Default().Redis.Addrs, ",")))
	RedisAddr  = RedisAddrs[0]
	AMQPURL    = override("FLASHGATE_AMQP_URL", config.Default().AMQP.URL)
	MySQLDSN   = override("FLASHGATE_MYSQL_DSN", config.Default().MySQL.DSN)
)

// splitAddrs reads a comma-separated address list as config does: blanks
// around each address dropped, empty ones skipped.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = append(out, config.Default().Redis.Addrs...)
	}
	return out
}

func override(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// RandomHex returns n random bytes in hex, for names no other test uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DeleteKeys deletes every key of rdb under prefix (prefix + ":*"), a
// thousand at a time. On a Redis Cluster it scans every primary, each of
// which holds only its own slots' keys, and deletes each key by a command of
// its own (pipelined), since one UNLINK of keys in several slots is refused
// (CROSSSLOT) even by one node. It blocks until done or ctx ends and returns
// the first error of Redis.
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	return scripts.ForEachPrimary(ctx, rdb, func(ctx context.Context, node redis.Cmdable, _ string) error {
		return deleteOnNode(ctx, node, prefix)
	})
}

func deleteOnNode(ctx context.Context, node redis.Cmdable, prefix string) error {
	iter := node.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	flush := func() error {
		pipe := node.Pipeline()
		for _, k := range keys {
			pipe.Unlink(ctx, k)
		}
		_, err := pipe.Exec(ctx)
		keys = keys[:0]
		return err
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(keys) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// Cluster reports whether the tests run on a Redis Cluster (RedisAddrs
// holds several addresses).
func Cluster() bool { return len(RedisAddrs) > 1 }

// NewRedis returns a client as the binary builds it (scripts.NewClient)
// with o's settings, of o.Addrs, or of RedisAddrs when o names none: a
// cluster client when there are several addresses, else a client of one
// Redis, which refuses a node of a cluster. The caller closes it. o may be
// nil (go-redis's defaults; scripts.ClientOptions are the binary's).
func NewRedis(o *redis.UniversalOptions) redis.UniversalClient {
	var opt redis.UniversalOptions
	if o != nil {
		opt = *o
	}
	if len(opt.Addrs) == 0 {
		opt.Addrs = RedisAddrs
	}
	return scripts.NewClient(opt)
}

// Redis returns a client of RedisAddrs (NewRedis with go-redis's defaults),
// closed when the test ends. It fails tb when Redis, or any primary of the
// cluster, does not answer a PING within five seconds.
func Redis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rdb := NewRedis(nil)
	tb.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Ping(ctx, rdb); err != nil {
		tb.Fatal(err)
	}
	return rdb
}

// Ping pings Redis, or every primary of the cluster, and says which does not
// answer and what to run. It also sends one PING through rdb itself, which
// warms a cluster client up: its first command loads the slot map and the
// servers' command table (COMMAND, a large reply), and commands sent
// meanwhile wait for it, past a test's short Redis timeout on a loaded
// machine.
func Ping(ctx context.Context, rdb redis.UniversalClient) error {
	hint := "run `make up`"
	if _, ok := rdb.(*redis.ClusterClient); ok {
		hint = "run `make up-cluster`"
	}
	err := scripts.ForEachPrimary(ctx, rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		if err := node.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		return nil
	})
	if err == nil {
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("Redis at %s does not answer (%s): %w", addrsOf(rdb), hint, err)
	}
	return nil
}

// addrsOf names the address(es) a client was given.
func addrsOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return strings.Join(RedisAddrs, ",")
}

// DropKeys is DeleteKeys for a test's cleanup: bounded by ten seconds, an
// error only logged.
func DropKeys(tb testing.TB, rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := DeleteKeys(ctx, rdb, prefix); err != nil {
		tb.Logf("drop keys of %s: %v", prefix, err)
	}
}

// DropTopology deletes queues, then exchanges, on a connection of its own
// (a fault test may have closed the test's) to the first node of url (one
// URL, or a list as amqp.url takes) that answers. Each delete gets its own
// channel, since a failed one closes its channel.
func DropTopology(tb testing.TB, url string, queues, exchanges []string) {
	var conn *amqp.Connection
	var err error
	for _, node := range (config.AMQP{URL: url}).Nodes() {
		if conn, err = amqp.DialConfig(node, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)}); err == nil {
			break
		}
	}
	if err != nil {
		tb.Logf("drop topology on %s: %v", config.MaskURL(url), err)
		return
	}
	defer conn.Close()
	del := func(f func(ch *amqp.Channel) error) {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		_ = f(ch)
	}
	for _, q := range queues {
		del(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	}
	for _, x := range exchanges {
		del(func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, false, false) })
	}
}
