package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BrokerRates measures what RabbitMQ alone does on this machine, as the
// baseline of the pipeline's figures: n persistent messages of an order's
// size published to a fresh quorum queue with publisher confirms (up to
// window unconfirmed at once), then consumed with manual acks. It returns
// messages per second of each, and deletes its queue.
func BrokerRates(ctx context.Context, url string, n, window int) (publish, consume float64, err error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, err
	}
	var r [6]byte
	rand.Read(r[:])
	queue := "flashgate.bench." + hex.EncodeToString(r[:])
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return 0, 0, err
	}
	defer func() {
		if c, err := conn.Channel(); err == nil {
			c.QueueDelete(queue, false, false, false)
			c.Close()
		}
	}()
	if err := ch.Confirm(false); err != nil {
		return 0, 0, err
	}
	body := []byte(`{"order_id":"0123456789abcdef000000000001","sale_id":"bench","user_id":"u1234567890-12345","quantity":1,"reserved_at":1796054914000}`)
	sem := make(chan struct{}, window)
	start := time.Now()
	var pending []*amqp.DeferredConfirmation
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			return 0, 0, err
		}
		pending = append(pending, dc)
		if len(pending) >= window/2 {
			for _, d := range pending {
				if ok, err := d.WaitContext(ctx); err != nil || !ok {
					return 0, 0, fmt.Errorf("publish not confirmed: %v", err)
				}
				<-sem
			}
			pending = pending[:0]
		}
	}
	for _, d := range pending {
		if ok, err := d.WaitContext(ctx); err != nil || !ok {
			return 0, 0, fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	publish = float64(n) / time.Since(start).Seconds()

	if err := ch.Qos(512, 0, false); err != nil {
		return 0, 0, err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return 0, 0, err
	}
	start = time.Now()
	for got := 0; got < n; {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return 0, 0, fmt.Errorf("deliveries closed after %d of %d", got, n)
			}
			got++
			if got%64 == 0 || got == n {
				if err := d.Ack(true); err != nil {
					return 0, 0, err
				}
			}
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(30 * time.Second):
			return 0, 0, fmt.Errorf("no delivery for 30s after %d of %d", got, n)
		}
	}
	consume = float64(n) / time.Since(start).Seconds()
	return publish, consume, nil
}
