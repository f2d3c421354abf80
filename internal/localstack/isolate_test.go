package localstack

import (
	"testing"

	"github.com/flashgate/flashgate/broker"
)

// Isolated deletes the dead-letter queue and exchange that broker declares
// beside a test's own.
func TestDeadLetterIsBrokers(t *testing.T) {
	for _, name := range []string{"orders", "test.orders.0123456789"} {
		if got, want := deadLetter(name), broker.DeadLetter(name); got != want {
			t.Errorf("deadLetter(%q) = %q, broker.DeadLetter says %q", name, got, want)
		}
	}
}
