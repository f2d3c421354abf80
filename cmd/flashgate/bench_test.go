package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashgate/flashgate/bench"
)

// --svg into a folder that does not exist is a usage error found before
// any load is sent.
func TestBenchSVGFolderChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "sale.svg")
	err := runBench(context.Background(), []string{"--svg", path, "--no-mysql", "--url", "http://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1"}, io.Discard)
	if !errors.Is(err, errUsage) {
		t.Fatalf("runBench: %v, want a usage error", err)
	}
}

// writeSVG leaves a whole, well-formed picture and no temporary file.
func TestBenchWriteSVG(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sale.svg")
	rep := &bench.Report{Sale: "s", Timeline: &bench.Timeline{Seconds: []bench.Second{{At: 0, Accepted: 1}}}}
	if err := writeSVG(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Errorf("not XML: %v", err)
	}
	if !bytes.Contains(b, []byte("<svg")) {
		t.Error("no <svg> element")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the folder, want the picture alone", len(entries))
	}
	if err := writeSVG(path, &bench.Report{}); !errors.Is(err, bench.ErrNoTimeline) {
		t.Errorf("a report without a timeline: %v, want ErrNoTimeline", err)
	}
}

// The waiting room's flags are checked before any load is sent.
func TestBenchRoomFlagsChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--waiting-room", "lottery"},
		{"--waiting-room", "fifo", "--admit-per-second", "1000001"},
		{"--waiting-room", "fifo", "--pass-seconds", "5"},
		{"--waiting-room", "fifo", "--room-start-in", "3s"},
		{"--waiting-room", "random", "--rate", "100"},
		{"--pass-seconds", "60"},
	} {
		all := append([]string{"--no-mysql", "--url", "http://127.0.0.1:1", "--admin-url", "http://127.0.0.1:1"}, args...)
		if err := runBench(context.Background(), all, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
