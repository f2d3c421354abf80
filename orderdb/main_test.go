package orderdb_test

import (
	"os"
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

func TestMain(m *testing.M) { os.Exit(localstack.Run(m, false)) }
