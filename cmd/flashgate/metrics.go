package main

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/consumer"
)

func boolGauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// consumerMetrics are the consumer process's series.
type consumerMetrics struct {
	set       *metrics.Set
	batchSize *metrics.PrometheusHistogram
	insert    *metrics.PrometheusHistogram
}

func newConsumerMetrics(c func() consumer.Stats) *consumerMetrics {
	set := metrics.NewSet()
	m := &consumerMetrics{
		set: set,
		batchSize: set.NewPrometheusHistogramExt("flashgate_consumer_batch_size",
			[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}),
		insert: set.NewPrometheusHistogramExt("flashgate_consumer_insert_duration_seconds",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}),
	}
	set.RegisterMetricsWriter(func(w io.Writer) {
		s := c()
		metrics.WriteCounterUint64(w, "flashgate_consumer_deliveries_total", s.Deliveries)
		metrics.WriteCounterUint64(w, "flashgate_consumer_redeliveries_total", s.Redelivered)
		metrics.WriteCounterUint64(w, "flashgate_consumer_inserted_total", s.Inserted)
		metrics.WriteCounterUint64(w, "flashgate_consumer_duplicates_total", s.Duplicates)
		metrics.WriteCounterUint64(w, "flashgate_consumer_batches_total", s.Batches)
		metrics.WriteCounterUint64(w, "flashgate_consumer_dead_lettered_total", s.DeadLettered)
		metrics.WriteCounterUint64(w, "flashgate_consumer_db_errors_total", s.DBErrors)
		metrics.WriteCounterUint64(w, "flashgate_consumer_ack_errors_total", s.AckErrors)
		metrics.WriteCounterUint64(w, "flashgate_consumer_reconnects_total", s.Reconnects)
		metrics.WriteCounterUint64(w, "flashgate_consumer_marked_total", s.Marked)
		metrics.WriteCounterUint64(w, "flashgate_consumer_mark_errors_total", s.MarkErrors)
		metrics.WriteGaugeUint64(w, "flashgate_consumer_connected", boolGauge(s.Connected))
	})
	return m
}

func (m *consumerMetrics) observe(orders int, took time.Duration) {
	m.batchSize.Update(float64(orders))
	m.insert.Update(took.Seconds())
}

// serveMetrics serves /metrics and /healthz on addr until ctx ends. It
// returns once the listener is closed.
func serveMetrics(ctx context.Context, addr string, write func(w io.Writer), log *zap.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &fasthttp.Server{
		Handler: func(c *fasthttp.RequestCtx) {
			switch string(c.Path()) {
			case "/metrics":
				c.SetContentType("text/plain; version=0.0.4; charset=utf-8")
				write(c)
				metrics.WriteProcessMetrics(c)
			case "/healthz", "/livez":
				c.SetContentType("application/json")
				c.SetBodyString(`{"status":"ok"}`)
			default:
				c.SetStatusCode(404)
				c.SetContentType("application/json")
				c.SetBodyString(`{"status":"not_found"}`)
			}
		},
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		IdleTimeout:           time.Minute,
		NoDefaultServerHeader: true,
	}
	log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
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
