package gateway

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
)

// buyStatuses are the statuses a buy can answer, each with its counter.
var buyStatuses = []string{"accepted", "bad_request", "not_found", "not_started", "ended", "locked",
	"limit_reached", "sold_out", "insufficient_stock", "idempotency_conflict", "rate_limited", "unavailable", "too_large",
	"unauthorized", "forbidden"}

// gatewayMetrics are the gateway's own series. Counters on the hot path are
// plain atomics; figures that other parts keep (scripts, batcher, Redis) are
// read when /metrics is scraped.
type gatewayMetrics struct {
	set          *metrics.Set
	buys         map[string]*metrics.Counter
	other        *metrics.Counter
	latency      *metrics.PrometheusHistogram
	batchSize    *metrics.PrometheusHistogram
	shortCircuit *metrics.Counter
}

func newGatewayMetrics(s *Server) *gatewayMetrics {
	set := metrics.NewSet()
	m := &gatewayMetrics{set: set, buys: map[string]*metrics.Counter{}}
	for _, st := range buyStatuses {
		m.buys[st] = set.NewCounter(`flashgate_buys_total{status="` + st + `"}`)
	}
	m.other = set.NewCounter(`flashgate_buys_total{status="other"}`)
	m.latency = set.NewPrometheusHistogramExt("flashgate_buy_duration_seconds",
		[]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5})
	m.batchSize = set.NewPrometheusHistogramExt("flashgate_reserve_batch_size",
		[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024})
	m.shortCircuit = set.NewCounter("flashgate_buys_short_circuit_total")
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := s.loader.Stats()
		metrics.WriteCounterUint64(w, "flashgate_script_calls_total", st.Calls)
		metrics.WriteCounterUint64(w, "flashgate_script_errors_total", st.Errors)
		metrics.WriteCounterUint64(w, "flashgate_script_noscript_total", st.NoScript)
		metrics.WriteCounterUint64(w, "flashgate_script_reloads_total", st.Reloads)
		metrics.WriteCounterUint64(w, "flashgate_script_held_sales_total", st.Held)
		metrics.WriteCounterUint64(w, "flashgate_reserve_calls_total", s.batch.calls.Load())
		metrics.WriteCounterUint64(w, "flashgate_reserve_reservations_total", s.batch.reservations.Load())
		draining := 0.0
		if s.draining.Load() {
			draining = 1
		}
		metrics.WriteGaugeFloat64(w, "flashgate_draining", draining)
		s.writeSaleMetrics(w)
	})
	return m
}

func (m *gatewayMetrics) observeBuy(status string, start time.Time) {
	if c := m.buys[status]; c != nil {
		c.Inc()
	} else {
		m.other.Inc()
	}
	m.latency.UpdateDuration(start)
}

// maxSaleSeries bounds the per-sale series of one scrape.
const maxSaleSeries = 500

// saleChunk is how many sales one pipeline of a scrape asks about, so that
// a Redis holding many thousands of sales answers in pieces it can
// interleave with buyers.
const saleChunk = 500

// saleRow is one sale as a scrape sees it.
type saleRow struct {
	id          string
	stock, sold int64
}

// writeSaleMetrics writes the sale totals over the whole registry
// (flashgate_sales: sales that exist; flashgate_sales_live: those not
// over; flashgate_sale_series_omitted: live sales left without per-sale
// series by the bound) and the remaining and sold units of at most
// maxSaleSeries live sales, in sale order. The sales shown are those that
// sold most, then by sale id: the same sales scrape after scrape while
// nothing changes, and the busiest ones (a Prometheus series that comes and
// goes with a random pick is no series to alert on).
//
// It reads every sale's record, in pipelines of saleChunk sales, all
// bounded together by the Redis timeout. A scrape that cannot read them
// all in time (Redis down or slow) has no sale series at all, rather than
// totals over part of the sales. The outbox series of each sale are the
// relay's (relay.WriteMetrics, through Deps.Metrics): it samples every
// outbox anyway, and one sampler keeps the two from disagreeing.
func (s *Server) writeSaleMetrics(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	sales, err := s.rdb.SMembers(ctx, s.store.keys.Sales()).Result()
	if err != nil {
		return
	}
	metas := make([]*redis.SliceCmd, len(sales))
	for lo := 0; lo < len(sales); lo += saleChunk {
		pipe := s.rdb.Pipeline()
		for i := lo; i < min(len(sales), lo+saleChunk); i++ {
			metas[i] = pipe.HMGet(ctx, s.store.keys.Meta(sales[i]), "stock", "sold", "ends")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return
		}
	}
	now := time.Now().UnixMilli()
	var (
		exist, live int
		rows        []saleRow
	)
	// A bucket of a sale of several (buckets.go) is not a sale: its sold
	// is its sale's, whose home keeps the stock and sells nothing itself.
	laneSold := map[string]int64{}
	for i, lane := range sales {
		if sale, _, ok := laneSale(lane); ok {
			if vals := metas[i].Val(); len(vals) == 3 {
				laneSold[sale] += num(vals[1])
			}
		}
	}
	for i, sale := range sales {
		vals := metas[i].Val()
		if len(vals) != 3 || vals[0] == nil {
			continue // an id without a sale (see Store.Upsert)
		}
		if _, _, ok := laneSale(sale); ok {
			continue
		}
		exist++
		if ends := num(vals[2]); ends > 0 && now >= ends {
			continue
		}
		live++
		// An id outside the id rule (never made by the admin API) could
		// break the exposition format; it is in the totals all the same.
		if order.ValidID(sale) {
			rows = append(rows, saleRow{id: sale, stock: num(vals[0]), sold: num(vals[1]) + laneSold[sale]})
		}
	}
	if len(rows) > maxSaleSeries {
		slices.SortFunc(rows, func(a, b saleRow) int {
			return cmp.Or(cmp.Compare(b.sold, a.sold), strings.Compare(a.id, b.id))
		})
		rows = rows[:maxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b saleRow) int { return strings.Compare(a.id, b.id) })
	metrics.WriteGaugeUint64(w, "flashgate_sales", uint64(exist))
	metrics.WriteGaugeUint64(w, "flashgate_sales_live", uint64(live))
	metrics.WriteGaugeUint64(w, "flashgate_sale_series_omitted", uint64(live-len(rows)))
	if len(rows) == 0 {
		return
	}
	b := []byte("# TYPE flashgate_sale_remaining gauge\n")
	for _, r := range rows {
		b = appendSaleSeries(b, "flashgate_sale_remaining", r.id, r.stock-r.sold)
	}
	b = append(b, "# TYPE flashgate_sale_sold gauge\n"...)
	for _, r := range rows {
		b = appendSaleSeries(b, "flashgate_sale_sold", r.id, r.sold)
	}
	_, _ = w.Write(b)
}

// appendSaleSeries appends `name{sale="SALE"} v` and a newline. A valid
// sale id needs no escaping: the id rule allows no quote or backslash.
func appendSaleSeries(b []byte, name, sale string, v int64) []byte {
	b = append(b, name...)
	b = append(b, `{sale="`...)
	b = append(b, sale...)
	b = append(b, `"} `...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}

func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
