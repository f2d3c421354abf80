package orderdb_test

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain runs the tests under the fault lock (shared: they use
// RabbitMQ or MariaDB, and stop neither) and fails the package when a
// goroutine outlives them: every client, session and server a test starts
// must be stopped and waited for by its cleanup.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }
