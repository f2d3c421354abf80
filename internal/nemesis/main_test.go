package nemesis

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain: the run uses RabbitMQ and MariaDB without stopping them (its
// faults are its own proxies, processes and Redis), so it holds the fault
// lock shared; the binary built for it is removed after the tests.
func TestMain(m *testing.M) {
	// The probes' client (runDay) dials the run's Redis while the nemesis
	// has it down; go-redis would log each failed dial.
	redis.SetLogger(quiet{})
	localstack.Main(m, localstack.UsesServices(),
		// A toxiproxy link whose toxic was swapped while its far side
		// closed can stay blocked on a channel after its proxy stopped: a
		// goroutine per such link, left by the library, not by the run.
		localstack.IgnoreGoroutine("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		localstack.IgnoreGoroutine("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"))
}

// quiet is a go-redis logger that says nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
