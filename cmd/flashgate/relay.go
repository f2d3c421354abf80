package main

import (
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/relay"
)

// newRelay builds the outbox relay that runs inside the gateway, on the
// gateway's Redis client. The caller runs it with Run(ctx) next to the HTTP
// server and cancels that ctx once the server has stopped taking buys, so
// that the last orders are relayed before the process exits (or stay in
// Redis for another relay).
func newRelay(cfg *config.Config, log *zap.Logger, rdb redis.UniversalClient) (*relay.Relay, error) {
	return relay.New(cfg, relay.Deps{Redis: rdb, Log: log.Named("relay")})
}
