package main

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main). The tests start redis-servers of their own; they use none of the shared services.
func TestMain(m *testing.M) { localstack.Main(m) }
