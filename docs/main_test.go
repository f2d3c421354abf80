package docs

import (
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMain fails the package when a goroutine outlives its tests
// (localstack.Main). The tests read files; they use none of the services.
func TestMain(m *testing.M) { localstack.Main(m) }
