package broker_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
)

// TestClassify: a dead letter's reason and time, from the consumer's own
// header or the broker's x-death, in that order.
func TestClassify(t *testing.T) {
	sent := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	first := sent.Add(time.Minute)
	later := sent.Add(time.Hour)
	for _, tc := range []struct {
		name   string
		d      amqp.Delivery
		reason string
		at     time.Time
	}{
		{"an order dead-lettered alone by the consumer",
			amqp.Delivery{Timestamp: sent, Headers: amqp.Table{broker.ReasonHeader: "write orders: Data too long", "x-first-death-reason": "rejected"}},
			"write orders: Data too long", sent},
		{"rejected whole: x-first-death-reason and the earliest x-death",
			amqp.Delivery{Timestamp: sent, Headers: amqp.Table{"x-first-death-reason": "rejected", "x-death": []any{
				amqp.Table{"reason": "delivery_limit", "time": later}, amqp.Table{"reason": "rejected", "time": first}}}},
			"rejected", first},
		{"x-death alone", amqp.Delivery{Headers: amqp.Table{"x-death": []any{amqp.Table{"reason": "delivery_limit", "time": first}}}},
			"delivery_limit", first},
		{"no header: unknown, the message's timestamp", amqp.Delivery{Timestamp: sent}, "unknown", sent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := broker.Classify(tc.d)
			if got.Reason != tc.reason || !got.At.Equal(tc.at) {
				t.Fatalf("Classify: %q at %v, want %q at %v", got.Reason, got.At, tc.reason, tc.at)
			}
		})
	}
}

// TestMatches: no filter selects all, a filter the reasons that contain it.
func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		name, reason, filter string
		want                 bool
	}{
		{"no filter", "rejected", "", true},
		{"the whole reason", "rejected", "rejected", true},
		{"part of it", "write orders: Error 1406: Data too long", "Data too long", true},
		{"another reason", "delivery_limit", "rejected", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := broker.Matches(tc.reason, tc.filter); got != tc.want {
				t.Fatalf("Matches(%q, %q) = %v", tc.reason, tc.filter, got)
			}
		})
	}
}
