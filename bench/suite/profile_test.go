package main

import (
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
