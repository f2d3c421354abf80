package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed remove.lua
var removeSrc string

// RemoveEntries is the relay's removal of confirmed outbox entries
// (remove.lua): KEYS outbox and meta of one sale, ARGV the group, then each
// entry's id and number of orders. It is not one of the set Loader loads:
// it sells nothing, so Redis may cache it without the hold pass, and
// go-redis's Script.Run loads it where it is missing.
var RemoveEntries = redis.NewScript(removeSrc)
