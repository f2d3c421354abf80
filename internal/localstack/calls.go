package localstack

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Calls counts the commands a Redis client sends, alone or in pipelines,
// that match: the tests that hold a part to the Redis calls it makes (a
// scrape that makes none, a scrape that reads only what changed). Add it
// with rdb.AddHook; it is safe for concurrent use.
type Calls struct {
	// Match tells whether a command counts; nil counts every one.
	Match func(ctx context.Context, cmd redis.Cmder) bool
	n     atomic.Int64
}

var _ redis.Hook = (*Calls)(nil)

// N returns the commands counted so far.
func (c *Calls) N() int64 { return c.n.Load() }

func (c *Calls) count(ctx context.Context, cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if c.Match == nil || c.Match(ctx, cmd) {
			c.n.Add(1)
		}
	}
}

// DialHook is redis.Hook's; it changes nothing.
func (c *Calls) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's: it counts the command.
func (c *Calls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook is redis.Hook's: it counts each command of the
// pipeline.
func (c *Calls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(ctx, cmds)
		return next(ctx, cmds)
	}
}
