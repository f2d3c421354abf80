package config_test

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main). The tests use none of the services.
func TestMain(m *testing.M) { localstack.Main(m) }
