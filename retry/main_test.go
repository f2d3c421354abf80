package retry_test

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main). An external test file: localstack imports retry.
func TestMain(m *testing.M) { localstack.Main(m) }
