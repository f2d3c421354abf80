package relay

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// page returns what the relay's WriteMetrics writes.
func page(r *Relay) string {
	var b bytes.Buffer
	r.WriteMetrics(&b)
	return b.String()
}

// value finds the line `series VALUE` in a Prometheus text page.
func value(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func TestWriteOutboxes(t *testing.T) {
	now := time.Now()
	on := saleSample{SaleStats: SaleStats{Sale: "on"}, live: true}
	over := saleSample{SaleStats: SaleStats{Sale: "over"}}
	backlog := saleSample{SaleStats: SaleStats{Sale: "backlog", Pending: 3, OldestAge: 1500 * time.Millisecond}}
	bad := saleSample{SaleStats: SaleStats{Sale: `x"} 1`, Pending: 1}, live: true}
	tests := []struct {
		name string
		smp  *sample
		want string
	}{
		{"nothing to show", &sample{at: now, sales: []saleSample{over}}, ""},
		{"a sale on at zero, an ended one while it has entries, in sale order", &sample{at: now, sales: []saleSample{on, over, backlog}},
			"# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="backlog"} 3` + "\n" +
				`flashgate_outbox_pending{sale="on"} 0` + "\n" +
				"# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="backlog"} 1.500` + "\n" +
				`flashgate_outbox_oldest_age_seconds{sale="on"} 0.000` + "\n"},
		{"an id outside the id rule is left out", &sample{at: now, sales: []saleSample{bad}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeOutboxes(&b, tc.smp)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// Past maxSaleSeries sales, the ones with the most pending entries show.
func TestWriteOutboxesBound(t *testing.T) {
	smp := &sample{at: time.Now()}
	for i := range maxSaleSeries {
		smp.sales = append(smp.sales, saleSample{SaleStats: SaleStats{Sale: "s" + strconv.Itoa(i), Pending: 2}, live: true})
	}
	smp.sales = append(smp.sales, saleSample{SaleStats: SaleStats{Sale: "quiet"}, live: true})
	var b bytes.Buffer
	writeOutboxes(&b, smp)
	if n := strings.Count(b.String(), "flashgate_outbox_pending{"); n != maxSaleSeries {
		t.Fatalf("%d pending series, want %d", n, maxSaleSeries)
	}
	if strings.Contains(b.String(), `"quiet"`) {
		t.Fatal("the sale with nothing pending shows, one with a backlog does not")
	}
}

// TestOutboxMetricsWithoutRabbitMQ runs a relay that cannot reach RabbitMQ:
// its outbox series (the only ones: the gateway samples no outbox) show the
// backlog as it grows, with the series names and labels the dashboards use.
func TestOutboxMetricsWithoutRabbitMQ(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// A copy: the test's cleanup drops its topology on the real broker.
	away := *e.cfg
	away.AMQP.URL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	e.cfg = &away
	meta := func(sale string, ends int64) {
		if err := e.rdb.HSet(ctx, e.keys.Meta(sale), "stock", 5, "sold", 0, "ends", ends).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
			t.Fatal(err)
		}
	}
	meta("on", 0)
	meta("over", time.Now().Add(-time.Hour).UnixMilli())
	e.addOrders("backlog", 10) // no meta: shown for its entries alone
	r, _ := e.startRelay("r1")

	var p string
	waitFor(t, 10*time.Second, "no failed connection, or the outbox series do not show the backlog", func() bool {
		p = page(r)
		n, _ := value(p, `flashgate_outbox_pending{sale="backlog"}`)
		age, _ := value(p, `flashgate_outbox_oldest_age_seconds{sale="backlog"}`)
		errs, _ := value(p, "flashgate_relay_errors_total")
		return n == 10 && age > 0 && errs > 0
	})
	if v, ok := value(p, `flashgate_outbox_pending{sale="on"}`); !ok || v != 0 {
		t.Errorf("sale on: pending %v (shown %v), want 0 shown", v, ok)
	}
	if _, ok := value(p, `flashgate_outbox_oldest_age_seconds{sale="on"}`); !ok {
		t.Error("sale on: no oldest age series")
	}
	if strings.Contains(p, `"over"`) {
		t.Errorf("an ended sale with an empty outbox shows:\n%s", p)
	}
	if c, _ := value(p, "flashgate_relay_connected"); c != 0 {
		t.Errorf("connected %v without a broker", c)
	}

	// A scrape samples: it shows the outbox as it is now.
	e.addOrders("backlog", 5)
	if n, _ := value(page(r), `flashgate_outbox_pending{sale="backlog"}`); n != 15 {
		t.Errorf("pending %v right after 5 more entries, want 15", n)
	}
}
