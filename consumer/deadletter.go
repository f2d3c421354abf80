package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
)

const (
	// deadLetterWait bounds the wait for the broker's confirm of one order
	// published to the dead-letter queue; a confirm that takes longer
	// counts as a failed publish.
	deadLetterWait = 30 * time.Second
	// maxReason bounds the reason header of an order dead-lettered alone.
	maxReason = 512
)

// The headers of an order dead-lettered alone: why, and where it came from
// (the batch message's id and the order's index in it).
const (
	headerReason    = "x-flashgate-reason"
	headerMessageID = "x-flashgate-message-id"
	headerIndex     = "x-flashgate-index"
)

// deadLetterPart publishes one order of m's batch to the dead-letter queue
// alone, its bytes as the batch carried them, and waits for the broker's
// confirm.
func (c *Consumer) deadLetterPart(ctx context.Context, dl *deadLetters, m *message, o deadOrder) error {
	c.log.Error("an order of a batch can never be processed; it goes to the dead-letter queue alone",
		zap.String("message_id", m.d.MessageId), zap.Uint64("delivery_tag", m.d.DeliveryTag),
		zap.Int("index", o.part), zap.Error(o.why))
	err := dl.publish(ctx, amqp.Publishing{
		ContentType:  order.ContentType,
		DeliveryMode: amqp.Persistent,
		Type:         order.TypeOrder,
		Timestamp:    time.Now(),
		AppId:        "flashgate",
		Headers: amqp.Table{
			headerReason:    clipReason(o.why.Error()),
			headerMessageID: m.d.MessageId,
			headerIndex:     int32(o.part),
		},
		Body: m.parts[o.part],
	})
	if err != nil {
		return err
	}
	c.deadLettered.Add(1)
	return nil
}

// clipReason returns why cut to maxReason bytes, on a character boundary.
func clipReason(why string) string {
	if len(why) <= maxReason {
		return why
	}
	return strings.ToValidUTF8(why[:maxReason], "")
}

// deadLetters publishes orders to the dead-letter exchange, one message
// each, on a channel of its own in confirm mode, so that the channel that
// consumes stays as it is: not in confirm mode, and not closed by a publish
// the broker refuses (a missing exchange closes the channel). The channel
// is opened on first use and closed with the session. It is not safe for
// concurrent use (the session's goroutine owns it).
type deadLetters struct {
	conn     *amqp.Connection
	exchange string
	ch       *amqp.Channel
	returns  chan amqp.Return
}

// publish publishes msg to the dead-letter exchange, mandatory, and blocks
// until the broker confirms it, ctx ends, or deadLetterWait has passed. It
// returns nil only for a publish the broker has confirmed and not returned
// as unroutable. After an error the channel is not to be used again (the
// caller ends the session).
func (dl *deadLetters) publish(ctx context.Context, msg amqp.Publishing) error {
	if dl.ch == nil {
		ch, err := dl.conn.Channel()
		if err != nil {
			return fmt.Errorf("dead letter: open channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("dead letter: confirm mode: %w", err)
		}
		// One publish is in flight at a time and its return, if any,
		// comes before its confirm: one slot is enough.
		dl.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
		dl.ch = ch
	}
	ctx, cancel := context.WithTimeout(ctx, deadLetterWait)
	defer cancel()
	dc, err := dl.ch.PublishWithDeferredConfirmWithContext(ctx, dl.exchange, "", true, false, msg)
	if err != nil {
		return fmt.Errorf("dead letter: publish to %s: %w", dl.exchange, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("dead letter: wait for the confirm: %w", err)
	}
	select {
	case r, ok := <-dl.returns:
		if ok {
			return fmt.Errorf("dead letter: %s returned it as unroutable: %d %s", dl.exchange, r.ReplyCode, r.ReplyText)
		}
	default:
	}
	if !acked {
		return fmt.Errorf("dead letter: %s did not confirm it (nack, or the channel closed)", dl.exchange)
	}
	return nil
}

// close closes the channel, if it was opened. The session's watchdog
// bounds it: once the connection is closed, it returns at once.
func (dl *deadLetters) close() {
	if dl.ch != nil {
		_ = dl.ch.Close()
	}
}
