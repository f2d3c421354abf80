package bench

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// With Options.Timeline, every request of the run is in exactly one
// second, and the outbox is read at the start and the end at least;
// without it there is no timeline.
func TestRunTimeline(t *testing.T) {
	for _, timeline := range []bool{true, false} {
		t.Run(fmt.Sprint("timeline=", timeline), func(t *testing.T) {
			base := startFake(t, 1_000_000, 0, func(i int64, w http.ResponseWriter, _ *http.Request) {
				if i%3 == 0 {
					w.WriteHeader(409)
					fmt.Fprint(w, `{"status":"limit_reached"}`)
					return
				}
				w.WriteHeader(202)
				fmt.Fprintf(w, `{"status":"accepted","order_id":"o%d"}`, i)
			})
			rep, err := Run(context.Background(), Options{URL: base, AdminURL: base, NoMySQL: true, NoKeys: true,
				Stock: 1_000_000, Users: 1_000_000, Conns: 4, Duration: 1200 * time.Millisecond, Timeline: timeline})
			if err != nil {
				t.Fatal(err)
			}
			if !timeline {
				if rep.Timeline != nil {
					t.Error("a timeline, not asked for")
				}
				return
			}
			tl := rep.Timeline
			if tl == nil {
				t.Fatal("no timeline")
			}
			var acc, ref, fail int64
			for i, s := range tl.Seconds {
				if s.At != i {
					t.Errorf("second %d at %d", i, s.At)
				}
				acc, ref, fail = acc+s.Accepted, ref+s.Refused, fail+s.Failed
			}
			if acc+ref+fail != rep.Requests || acc != rep.Figures.AcceptedOrders {
				t.Errorf("seconds add up to %d accepted, %d refused, %d failed; the run: %d requests, %d accepted",
					acc, ref, fail, rep.Requests, rep.Figures.AcceptedOrders)
			}
			if len(tl.Outbox) < 2 || len(tl.Rows) != 0 {
				t.Errorf("%d outbox readings (want the start and the end at least), %d of MySQL (want none)", len(tl.Outbox), len(tl.Rows))
			}
			for i := 1; i < len(tl.Outbox); i++ {
				if tl.Outbox[i].At < tl.Outbox[i-1].At {
					t.Errorf("outbox readings out of order: %v", tl.Outbox)
					break
				}
			}
		})
	}
}
