package consumer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	"go.uber.org/zap"
)

// newMetrics builds the consumer's series: two histograms that count is fed
// with, and the counters of Stats, read when the series are written.
func (c *Consumer) newMetrics() {
	set := metrics.NewSet()
	c.metrics = set
	c.batchSize = set.NewPrometheusHistogramExt("flashgate_consumer_batch_size",
		[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096})
	c.insert = set.NewPrometheusHistogramExt("flashgate_consumer_insert_duration_seconds",
		[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5})
	set.RegisterMetricsWriter(func(w io.Writer) {
		s := c.Stats()
		metrics.WriteCounterUint64(w, "flashgate_consumer_deliveries_total", s.Deliveries)
		metrics.WriteCounterUint64(w, "flashgate_consumer_redeliveries_total", s.Redelivered)
		metrics.WriteCounterUint64(w, "flashgate_consumer_orders_total", s.Orders)
		metrics.WriteCounterUint64(w, "flashgate_consumer_inserted_total", s.Inserted)
		metrics.WriteCounterUint64(w, "flashgate_consumer_duplicates_total", s.Duplicates)
		metrics.WriteCounterUint64(w, "flashgate_consumer_state_updates_total", s.Updated)
		metrics.WriteCounterUint64(w, "flashgate_consumer_batches_total", s.Batches)
		metrics.WriteCounterUint64(w, "flashgate_consumer_dead_lettered_total", s.DeadLettered)
		metrics.WriteCounterUint64(w, "flashgate_consumer_db_errors_total", s.DBErrors)
		metrics.WriteCounterUint64(w, "flashgate_consumer_ack_errors_total", s.AckErrors)
		metrics.WriteCounterUint64(w, "flashgate_consumer_reconnects_total", s.Reconnects)
		metrics.WriteCounterUint64(w, "flashgate_consumer_marked_total", s.Marked)
		metrics.WriteCounterUint64(w, "flashgate_consumer_mark_errors_total", s.MarkErrors)
		metrics.WriteGaugeUint64(w, "flashgate_consumer_connected", gauge(s.Connected))
	})
}

// WriteMetrics writes the consumer's series in the Prometheus text format:
// the batch size and insert duration histograms and the counters of Stats.
// It is safe for concurrent use and does no I/O but the writes to w.
func (c *Consumer) WriteMetrics(w io.Writer) { c.metrics.WritePrometheus(w) }

func gauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// ServeMetrics serves the consumer process's own listener on addr until ctx
// ends: /metrics (WriteMetrics, then each of more, e.g. the process's
// repairer, then the process's series) and /healthz (and /livez), which
// answers as long as the process does. It blocks; it returns
// an error at once when it cannot listen, else once the listener is closed
// (nil after a clean shutdown). The consumer has no other HTTP surface (the
// gateway serves its series on its admin listener), so the listener lives
// with the series it serves.
func (c *Consumer) ServeMetrics(ctx context.Context, addr string, more ...func(w io.Writer)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &fasthttp.Server{
		Handler: func(rc *fasthttp.RequestCtx) {
			switch string(rc.Path()) {
			case "/metrics":
				rc.SetContentType("text/plain; version=0.0.4; charset=utf-8")
				c.WriteMetrics(rc)
				for _, write := range more {
					write(rc)
				}
				metrics.WriteProcessMetrics(rc)
			case "/healthz", "/livez":
				rc.SetContentType("application/json")
				rc.SetBodyString(`{"status":"ok"}`)
			default:
				if bytes.HasPrefix(rc.Path(), []byte("/debug/pprof/")) {
					// The consumer's profiles (net/http/pprof's handlers), as
					// the gateway's admin listener serves its own.
					pprofhandler.PprofHandler(rc)
					return
				}
				rc.SetStatusCode(fasthttp.StatusNotFound)
				rc.SetContentType("application/json")
				rc.SetBodyString(`{"status":"not_found"}`)
			}
		},
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		IdleTimeout:           time.Minute,
		NoDefaultServerHeader: true,
	}
	c.log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = srv.ShutdownWithContext(sctx)
	ln.Close()
	if serr := <-done; err == nil && serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = serr
	}
	return err
}
