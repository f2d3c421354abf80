package localstack

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The flashgate binary of this tree, built once per test binary by Binary
// and removed by Main after the tests.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildTimeout bounds the build of the binary (a cold cache under -race
// takes about a minute on two cores).
const buildTimeout = 5 * time.Minute

// Binary builds cmd/flashgate once per test binary, with the race detector
// when the tests have it (Race), into a temporary folder that Main removes
// after the tests, and returns its path. It fails tb when the build fails.
func Binary(tb testing.TB) string {
	tb.Helper()
	b := &binary
	b.once.Do(func() {
		root, err := Root()
		if err != nil {
			b.err = err
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "flashgate-test-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "flashgate")
		var flags []string
		if Race {
			flags = append(flags, "-race")
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		b.err = Build(ctx, b.path, filepath.Join(root, "cmd", "flashgate"), flags...)
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// removeBinary removes what Binary built, if it built anything.
func removeBinary() {
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
}
