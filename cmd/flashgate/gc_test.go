package main

import (
	"runtime/debug"
	"testing"
)

// Without GOGC the processes collect at gcPercent; with it, the runtime's
// own reading of GOGC stands.
func TestSetGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	if got := setGC(func(string) string { return "" }); got != gcPercent {
		t.Fatalf("setGC without GOGC = %d, want %d", got, gcPercent)
	}
	if now := debug.SetGCPercent(100); now != gcPercent {
		t.Fatalf("the runtime's GC percent after setGC without GOGC: %d, want %d", now, gcPercent)
	}
	env := map[string]string{"GOGC": "150"}
	if got := setGC(func(k string) string { return env[k] }); got != 0 {
		t.Fatalf("setGC with GOGC=150 = %d, want 0 (left alone)", got)
	}
	if now := debug.SetGCPercent(100); now != 100 {
		t.Fatalf("the runtime's GC percent after setGC with GOGC set: %d, want it untouched (100)", now)
	}
}
