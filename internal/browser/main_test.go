package browser_test

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main): chromedp's goroutines (the browser's and each tab's
// reader, the pipe's, the process's waiter, the closers of tabs) all end
// when Stop returns, so none is ignored. The tests use none of the
// services.
func TestMain(m *testing.M) { localstack.Main(m) }
