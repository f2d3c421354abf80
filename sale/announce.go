package sale

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/retry"
)

// Listener hears the announcements of admin changes (Store.Listen): the
// admin script publishes a sale's id, atomically with every change of it,
// so that what a process remembers of the sale can be forgotten at once.
type Listener interface {
	// Changed is an announced change of sale.
	Changed(sale string)
	// Missed says that announcements may have been missed: the
	// subscription came up (up true: it hears from now on) or was lost
	// (up false: it hears nothing until it comes up again).
	Missed(up bool)
}

// Listen subscribes to the announcements and tells l of them until ctx is
// done. A failed subscription is retried after a backoff, reset once it is
// up again; the pause is kept short because l hears nothing meanwhile. It
// blocks; it must be called once per Listener.
func (s *Store) Listen(ctx context.Context, l Listener) {
	ps := s.rdb.Subscribe(ctx, s.keys.Events())
	defer ps.Close()
	// A blocked read does not see ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	backoff := retry.Backoff{Min: 200 * time.Millisecond, Max: time.Second}
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if ctx.Err() != nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			l.Changed(m.Payload)
		case *redis.Subscription:
			l.Missed(true)
			backoff.Reset()
		case *redis.Pong:
		default:
			if err != nil && !isTimeout(err) {
				l.Missed(false)
				d := backoff.Next()
				s.log.Debug("sale announcements: subscription lost; retrying", zap.Error(err), zap.Duration("in", d))
				if !retry.Sleep(ctx, d) {
					return
				}
			}
		}
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
