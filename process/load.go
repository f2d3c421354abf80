package process

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// loadScripts runs load, each try bounded by 5 s, until it succeeds, ctx
// ends, or the scripts do not compile (logged with hint: only a fix can
// help). Redis may not be up yet: failures are logged and tried again with
// backoff. It blocks until then; the gateway and the consumer run it at
// start.
func loadScripts(ctx context.Context, load func(ctx context.Context) error, log *zap.Logger, hint string) {
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		func(ctx context.Context) error {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := load(lctx)
			if errors.Is(err, scripts.ErrCompile) {
				return retry.Stop(err)
			}
			return err
		},
		func(err error, next time.Duration) {
			log.Warn("cannot load scripts yet; retrying", zap.Error(err), zap.Duration("in", next))
		})
	if errors.Is(err, scripts.ErrCompile) {
		log.Error("scripts do not compile; "+hint, zap.Error(err))
	}
}
