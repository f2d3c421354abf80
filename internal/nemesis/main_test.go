package nemesis

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
	localstack.Main(m, localstack.UsesServices(), localstack.AfterTests(removeBinary),
		// A toxiproxy link whose toxic was swapped while its far side
		// closed can stay blocked on a channel after its proxy stopped: a
		// goroutine per such link, left by the library, not by the run.
		localstack.IgnoreGoroutine("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		localstack.IgnoreGoroutine("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"))
}

// quiet is a go-redis logger that says nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// flashgateBinary builds cmd/flashgate once per test binary, with the race
// detector when the tests have it, and returns its path.
func flashgateBinary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "flashgate-nemesis-"); binErr != nil {
			return
		}
		root, err := localstack.Root()
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(binDir, "flashgate")
		var flags []string
		if raceEnabled {
			flags = append(flags, "-race")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binErr = localstack.Build(ctx, binPath, filepath.Join(root, "cmd", "flashgate"), flags...)
	})
	if binErr != nil {
		tb.Fatal(binErr)
	}
	return binPath
}

func removeBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}
