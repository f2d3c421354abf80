package promtext

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// A family written by hand gets the metadata the library gives its own
// series, under the same switch: HELP and TYPE when metadata is exposed,
// nothing when it is not. (The switch is global: the test leaves it off,
// as a test binary starts.)
func TestAppendMetadata(t *testing.T) {
	t.Cleanup(func() { metrics.ExposeMetadata(false) })
	// libraryMeta is what the library writes before a series of its own.
	libraryMeta := func(name, typ string) string {
		var buf bytes.Buffer
		switch typ {
		case "gauge":
			metrics.WriteGaugeUint64(&buf, name, 1)
		case "counter":
			metrics.WriteCounterUint64(&buf, name, 1)
		}
		return strings.TrimSuffix(buf.String(), name+" 1\n")
	}
	tests := []struct {
		name   string
		expose bool
		family string
		typ    string
		want   string // after the prefix, and what the library writes
	}{
		{"a gauge, metadata exposed", true, "flashgate_sale_sold", "gauge",
			"# HELP flashgate_sale_sold\n# TYPE flashgate_sale_sold gauge\n"},
		{"a counter, metadata exposed", true, "flashgate_x_total", "counter",
			"# HELP flashgate_x_total\n# TYPE flashgate_x_total counter\n"},
		{"metadata not exposed", false, "flashgate_sale_sold", "gauge", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			metrics.ExposeMetadata(tc.expose)
			prefix := []byte("flashgate_before 1\n")
			got := AppendMetadata(prefix, tc.family, tc.typ)
			if string(got) != string(prefix)+tc.want {
				t.Errorf("AppendMetadata = %q, want %q after the prefix", got, tc.want)
			}
			if lib := libraryMeta(tc.family, tc.typ); lib != tc.want {
				t.Errorf("the library writes %q before its own series, AppendMetadata %q", lib, tc.want)
			}
		})
	}
}

// A series labelled by sale, as Prometheus's text format reads it: the
// family, the one label, a space before the value.
func TestAppendSale(t *testing.T) {
	got := string(strconv.AppendInt(AppendSale([]byte("x\n"), "flashgate_sale_sold", "s-1"), 7, 10))
	if want := "x\n" + `flashgate_sale_sold{sale="s-1"} 7`; got != want {
		t.Errorf("AppendSale: %q, want %q", got, want)
	}
}
