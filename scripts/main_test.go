package scripts_test

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main); an external test file, since localstack imports
// scripts. The tests use Redis only (the shared one, or a redis-server of
// their own), not the services the fault lock guards.
func TestMain(m *testing.M) { localstack.Main(m) }
