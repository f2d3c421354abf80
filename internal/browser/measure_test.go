package browser_test

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/browser"
)

// BenchmarkBrowser measures what a page test pays for its browser, per
// browser: the start (process to first tab), a tab's open, the first
// navigation to a page served on loopback (load event and the page's
// script run), a stop, and chromium's memory after that navigation,
// summed over its processes (RSS, and PSS: shared pages divided among
// their sharers).
//
//	go test -run '^$' -bench Browser -benchtime 5x ./internal/browser/
func BenchmarkBrowser(bm *testing.B) {
	srv := site(bm)
	var start, open, nav, stop time.Duration
	var rss, pss, procs int64
	for bm.Loop() {
		b := browser.Start(bm)
		start += b.StartTime()
		t0 := time.Now()
		tab := b.NewTab(bm)
		open += time.Since(t0)
		t0 = time.Now()
		tab.Navigate(srv.URL + "/?buyer=bench")
		tab.WaitText("#buyer", "buyer bench")
		nav += time.Since(t0)
		m := b.Memory()
		rss, pss, procs = rss+m.RSS, pss+m.PSS, procs+int64(m.Processes)
		t0 = time.Now()
		b.Stop()
		stop += time.Since(t0)
	}
	n := float64(bm.N)
	bm.ReportMetric(float64(start.Milliseconds())/n, "start-ms")
	bm.ReportMetric(float64(open.Milliseconds())/n, "tab-ms")
	bm.ReportMetric(float64(nav.Milliseconds())/n, "navigate-ms")
	bm.ReportMetric(float64(stop.Milliseconds())/n, "stop-ms")
	bm.ReportMetric(float64(rss)/n/(1<<20), "rss-MB")
	bm.ReportMetric(float64(pss)/n/(1<<20), "pss-MB")
	bm.ReportMetric(float64(procs)/n, "processes")
}
