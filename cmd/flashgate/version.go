package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

func runVersion(_ context.Context, _ []string, stdout io.Writer) error {
	_, err := fmt.Fprintf(stdout, "flashgate %s (commit %s, %s %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
