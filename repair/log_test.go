package repair

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A step that fails at every poll (Redis or MySQL down: every 100 ms) is
// counted each time but said once, and its recovery once; a failure seen
// while stopping is neither counted nor said.
func TestFailureSaidOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r := &Repairer{d: Deps{Log: zap.New(core)}}
	ctx := context.Background()
	down := errors.New("connection refused")
	failing := false
	for range 5 {
		failing = r.failed(ctx, down, failing, "repair of held sales")
	}
	if !failing || r.errs.Load() != 5 {
		t.Fatalf("after 5 failures: failing %v, %d counted; want true, 5", failing, r.errs.Load())
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings for 5 failures in a row, want 1", n)
	}
	failing = r.failed(ctx, nil, failing, "repair of held sales")
	failing = r.failed(ctx, nil, failing, "repair of held sales")
	if failing || logs.FilterMessage("repair of held sales works again").Len() != 1 {
		t.Errorf("recovery: failing %v, logs %v; want one 'works again'", failing, logs.All())
	}
	failing = r.failed(ctx, down, failing, "repair of held sales")
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); !failing || n != 2 {
		t.Errorf("a new run of failures: failing %v, %d warnings; want true, 2", failing, n)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if r.failed(stopped, down, false, "hold pass") || r.errs.Load() != 6 {
		t.Errorf("a failure while stopping was counted or marked failing (%d counted)", r.errs.Load())
	}
}
