package scripts

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
)

// The Redis client is built here, beside the keys and scripts it carries,
// as orderdb.Open builds the MySQL pool and broker.Open the RabbitMQ
// session: the binary builds it from its settings (ClientOptions), the
// tests from options of their own (internal/localstack.NewRedis), and both
// through NewClient, so that one address or several means the same client
// everywhere.

// ClientOptions returns the options of flashgate's Redis client for the
// settings c: c's addresses and credentials, and the timeouts of the buy
// path, so that a call that cannot finish within redis.timeout fails, it
// never hangs (a context deadline counts too), with two retries of a
// command whose connection failed. Pass them to NewClient.
func ClientOptions(c config.Redis) redis.UniversalOptions {
	t := c.Timeout
	return redis.UniversalOptions{
		Addrs:                 c.Addrs,
		MasterName:            c.SentinelMaster,
		SentinelPassword:      c.SentinelPassword,
		Username:              c.Username,
		Password:              c.Password,
		DialTimeout:           t,
		ReadTimeout:           t,
		WriteTimeout:          t,
		PoolTimeout:           t,
		ContextTimeoutEnabled: true,
		PoolSize:              c.PoolSize,
		MaxRetries:            2,
	}
}

// NewClient returns a client with the options o: of the primary that the
// Sentinels at o.Addrs know as o.MasterName when that is set (go-redis's
// failover client, which follows the primary through a failover); else of
// a Redis Cluster when o.Addrs holds more than one address, else of one
// Redis. A cluster client reloads the cluster's slot map once it is older
// than ClusterReload, so that after a failover it reaches the promoted
// replica within about that time, also when the failed primary cannot
// answer the MOVED that would tell it. A client of one address first asks,
// on every new connection (one INFO round trip, before o.OnConnect if set),
// whether its server is a node of a Redis Cluster, and refuses it if so:
// every command then fails with ErrClusterNode. A client of one node of a
// cluster would reach only that node's slots, and every sale elsewhere
// would answer MOVED, while the others work. A server or proxy that
// answers no INFO is taken as it is. NewClient connects to nothing and does
// not change o; the caller closes the client, which is safe for concurrent
// use.
func NewClient(o redis.UniversalOptions) redis.UniversalClient {
	o.Addrs = slices.Clone(o.Addrs)
	switch {
	case o.MasterName != "":
		return redis.NewFailoverClient(o.Failover())
	case len(o.Addrs) > 1:
		co := o.Cluster()
		co.ClusterStateReloadInterval = ClusterReload
		return redis.NewClusterClient(co)
	}
	then := o.OnConnect
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if err := refuseClusterNode(ctx, cn); err != nil || then == nil {
			return err
		}
		return then(ctx, cn)
	}
	return redis.NewClient(o.Simple())
}

// ClusterReload is how old a cluster client's slot map may grow before a
// command makes the client read it again (in the background, one read at a
// time). A failed primary answers nothing, so only this tells a client that
// its replica took its slots: go-redis's default, a minute, would leave the
// failed primary's sales answering 503 for that long after the promotion.
// One CLUSTER SLOTS per second per process costs the cluster nothing.
const ClusterReload = time.Second

// ErrClusterNode is the error of every command of a client of one address
// (NewClient) whose server is a node of a Redis Cluster.
var ErrClusterNode = errors.New("this Redis is a node of a Redis Cluster, but FLASHGATE_REDIS_ADDRS (redis.addrs) " +
	"has one address, which means one Redis: list two or more of the cluster's nodes")

// refuseClusterNode is the check of NewClient's one-address client.
func refuseClusterNode(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return ErrClusterNode
	}
	return nil
}

// ForEachPrimary calls fn with a client of every primary of a Redis
// Cluster, at once, or with rdb itself when it is one Redis; addr is the
// primary's address ("redis" for a client of another kind). A node-wide
// command sent to node (INFO, SCAN, SCRIPT FLUSH, CONFIG GET) concerns that
// primary alone, so that fn's work on every node is its work on the
// cluster. It returns the first error, and the cluster's when it cannot
// list its primaries. It blocks until every fn has returned.
func ForEachPrimary(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, node redis.Cmdable, addr string) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return fn(ctx, node, node.Options().Addr)
		})
	case *redis.Client:
		return fn(ctx, c, c.Options().Addr)
	case nil:
		return errors.New("no Redis client")
	default:
		return fn(ctx, c, "redis")
	}
}
