package scripts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Remove is the name of the relay's removal of confirmed outbox entries,
// lua/remove.lua. It is not one of the set that Load loads and swaps (not
// in Names): it sells nothing and is right whatever state Redis is in, so
// Redis may cache it without the hold pass, and the relay must be able to
// remove what RabbitMQ confirmed before any set is in use, or when a
// folder broken at start keeps every set out (ErrCompile). It is always
// the built-in copy: a scripts.dir folder need not hold it and cannot
// change it.
const Remove = "remove"

// removeScript is the built-in remove.lua.
var removeScript = redis.NewScript(mustBuiltin(Remove))

// Remove runs the remove script: KEYS the outbox and meta of one sale, ARGV
// the relay's group, then each entry's id and number of orders. It returns
// the number of entries it deleted. It needs no Load and no set in use:
// on NOSCRIPT it sends the script itself (EVAL), which caches it. Its
// calls are not in Stats. It blocks for one or two round trips, bounded by
// ctx, and returns the error of Redis or the connection, or one wrapping
// ErrReply. It is safe for concurrent use.
func (l *Loader) Remove(ctx context.Context, keys []string, args ...any) (int64, error) {
	v, err := removeScript.Run(ctx, l.rdb, keys, args...).Result()
	if err != nil {
		return 0, err
	}
	n, err := decodeCount(v)
	if err != nil {
		return 0, replyError(Remove, err)
	}
	return n, nil
}

// Remarked is the name of package repair's record that the orders of a
// sale MySQL holds were marked created again, lua/remarked.lua. Like
// Remove it is outside the set: it sells nothing, is right whatever state
// Redis is in, and is always the built-in copy.
const Remarked = "remarked"

// remarkedScript is the built-in remarked.lua.
var remarkedScript = redis.NewScript(mustBuiltin(Remarked))

// Remarked runs the remarked script: KEYS the meta hash of one sale (or
// bucket), cseq the seq up to which the orders MySQL holds of it were
// marked created again. It reports whether meta cseq moved (not when the
// sale is held, or was last checked under another history of this Redis,
// or is there already). Like Remove it needs no Load, is not in Stats,
// blocks for one or two round trips bounded by ctx, returns the error of
// Redis or the connection, or one wrapping ErrReply, and is safe for
// concurrent use.
func (l *Loader) Remarked(ctx context.Context, meta string, cseq int64) (bool, error) {
	v, err := remarkedScript.Run(ctx, l.rdb, []string{meta}, cseq).Result()
	if err != nil {
		return false, err
	}
	n, err := decodeCount(v)
	if err != nil || n > 1 {
		return false, replyError(Remarked, fmt.Errorf("reply %#v, want 0 or 1", v))
	}
	return n == 1, nil
}

// mustBuiltin returns the built-in source of the script name; the build
// embeds every file of lua/, so only a missing file, a bug, panics.
func mustBuiltin(name string) string {
	b, err := builtin.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}
