package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
)

// pprof's -top text becomes rows, its header and summary lines are not
// rows, and the section turns a share into µs per order.
func TestParseTopAndSection(t *testing.T) {
	out := []byte(`File: fg
Type: cpu
Duration: 5s, Total samples = 1.90s (37.99%)
Showing nodes accounting for 1.20s, 63.16% of 1.90s total
      flat  flat%   sum%        cum   cum%
     0.52s 27.37% 27.37%      0.52s 27.37%  internal/runtime/syscall/linux.Syscall6
     0.06s  3.16% 30.53%      0.07s  3.68%  github.com/flashgate/flashgate/order.ValidID[go.shape.string]
         0     0% 30.53%      1.23s 64.74%  github.com/valyala/fasthttp.(*Server).serveConn
`)
	rows := parseTop(out)
	if len(rows) != 3 || rows[0].flat != 27.37 || rows[0].cum != 27.37 || rows[1].name != "github.com/flashgate/flashgate/order.ValidID[go.shape.string]" ||
		rows[2].flat != 0 || rows[2].cum != 64.74 {
		t.Fatalf("rows: %+v", rows)
	}
	s := profileSection([]profileTop{{proc: procGateway, file: "x/cost-gateway.pprof", rows: rows}}, map[string]float64{procGateway: 20}, []string{"no consumer profile: down"})
	for _, want := range []string{"gateway", "20.0 µs per order", "`cost-gateway.pprof`", "| `internal/runtime/syscall/linux.Syscall6` | 27.4% | 5.47 | 27.4% |", "no consumer profile: down"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if profileSection(nil, nil, nil) != "" {
		t.Error("a section without profiles")
	}
}

// A call graph is linked under its process's table when it was drawn, and
// why not when it was not.
func TestSectionLinksCallGraph(t *testing.T) {
	tops := []profileTop{
		{proc: procGateway, file: "x/cost-gateway.pprof", svg: "x/cost-gateway.svg"},
		{proc: procConsumer, file: "x/cost-consumer.pprof", svgErr: errors.New("no Graphviz dot on PATH")},
	}
	s := profileSection(tops, map[string]float64{procGateway: 20, procConsumer: 5}, nil)
	for _, want := range []string{"](bench-profile-gateway-relay.svg)", "No call graph drawn: no Graphviz dot on PATH."} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "bench-profile-consumer.svg") {
		t.Errorf("section links a call graph that was not drawn:\n%s", s)
	}
}

// drawProfile draws a real CPU profile (of this test's own busy loop) with
// Graphviz into an SVG that names the loop; without dot on PATH it says
// where dot comes from.
func TestDrawProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pprof")
	f, err := os.Create(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	busySink = busyLoop(300_000_000)
	pprof.StopCPUProfile()
	f.Close()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "cpu.svg")

	t.Run("without dot", func(t *testing.T) {
		t.Setenv("PATH", filepath.Dir(mustLook(t, "go")))
		if _, err := exec.LookPath("dot"); err == nil {
			t.Skip("dot is in go's folder")
		}
		if err := drawProfile(context.Background(), bin, prof, svg); err == nil || !strings.Contains(err.Error(), "graphviz.sh") {
			t.Fatalf("drawProfile without dot: %v", err)
		}
	})
	if _, err := exec.LookPath("dot"); err != nil {
		t.Skip("no Graphviz dot here (deploy/local/graphviz.sh installs it; make bench runs it)")
	}
	if err := drawProfile(context.Background(), bin, prof, svg); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("<svg")) || !bytes.Contains(data, []byte("busyLoop")) {
		t.Fatalf("the call graph (%d bytes) is not an SVG naming busyLoop", len(data))
	}
}

// busySink keeps busyLoop's result, so that the loop is not dropped.
var busySink uint64

//go:noinline
func busyLoop(n int) uint64 {
	var x uint64 = 1
	for i := range n {
		x = x*6364136223846793005 + uint64(i)
	}
	return x
}

func mustLook(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}
