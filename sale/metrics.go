package sale

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/promtext"
	"github.com/flashgate/flashgate/scripts"
)

// MaxSaleSeries bounds the per-sale series of one scrape: the sales that
// sold most are shown (WriteMetrics).
const MaxSaleSeries = 500

// saleChunk is how many sales one pipeline of a scrape asks about, so that
// a Redis holding many thousands of sales answers in pieces it can
// interleave with buyers.
const saleChunk = 500

// saleFullEvery is how long the scrapes take to read every sale's record
// again: each reads its share of the registry (the time since the last
// scrape over saleFullEvery), besides the sales this process wrote to
// since (Store.Touch and the store's own writes), whose new figures show at once.
const saleFullEvery = 2 * time.Minute

// saleRow is one sale as a scrape sees it.
type saleRow struct {
	id          string
	stock, sold int64
}

// saleRecord is what the scrape keeps of one registry id's meta hash.
type saleRecord struct {
	exists           bool // the hash holds a sale (stock is set)
	stock, sold, end int64
}

// sampler keeps the scrape's copy of every sale's stock, sold and end,
// so that a scrape costs Redis what changed rather than what exists: the
// first scrape reads every sale; later ones read the sales this process
// wrote to (touch) and walk the registry with a cursor, so that every sale
// is read again within saleFullEvery of scrapes. A sale changed by another
// gateway alone shows its new figures within saleFullEvery. It is safe for
// concurrent use; scrapes are serialised.
type sampler struct {
	rdb     redis.UniversalClient
	keys    scripts.Keys
	timeout time.Duration

	tmu     sync.Mutex
	touched map[string]struct{} // ids written since the last scrape

	mu     sync.Mutex // one scrape at a time; guards the fields below
	last   time.Time  // the last scrape that read Redis
	cursor uint64     // where the walk of the registry goes on (SSCAN)
	owed   float64    // the walk's share not read yet, in sales
	recs   map[string]saleRecord
}

func newSampler(rdb redis.UniversalClient, keys scripts.Keys, timeout time.Duration) *sampler {
	return &sampler{rdb: rdb, keys: keys, timeout: timeout, touched: map[string]struct{}{}}
}

// touch records that id's meta hash changed (a sale, or a bucket of one):
// the next scrape reads it again. It does no I/O.
func (p *sampler) touch(id string) {
	p.tmu.Lock()
	p.touched[id] = struct{}{}
	p.tmu.Unlock()
}

// refresh brings recs up to date: every sale on the first scrape, else the
// touched ones and the walk's share. It returns false when Redis could not
// answer in time: the scrape then shows no sale series rather than figures
// over part of the sales.
func (p *sampler) refresh(ctx context.Context) bool {
	p.tmu.Lock()
	touched := p.touched
	p.touched = map[string]struct{}{}
	p.tmu.Unlock()
	ids, err := p.due(ctx, touched)
	if err != nil {
		p.retouch(touched)
		return false
	}
	metas := make([]*redis.SliceCmd, len(ids))
	for lo := 0; lo < len(ids); lo += saleChunk {
		pipe := p.rdb.Pipeline()
		for i := lo; i < min(len(ids), lo+saleChunk); i++ {
			metas[i] = pipe.HMGet(ctx, p.keys.Meta(ids[i]), "stock", "sold", "ends")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			p.retouch(touched)
			return false
		}
	}
	if p.recs == nil {
		p.recs = make(map[string]saleRecord, len(ids))
	}
	for i, id := range ids {
		v := metas[i].Val()
		if len(v) != 3 {
			continue
		}
		p.recs[id] = saleRecord{exists: v[0] != nil, stock: num(v[0]), sold: num(v[1]), end: num(v[2])}
	}
	p.last = time.Now()
	return true
}

// due returns the ids a scrape reads: every sale the first time; then the
// touched ones and the next stretch of the registry's walk.
func (p *sampler) due(ctx context.Context, touched map[string]struct{}) ([]string, error) {
	if p.recs == nil {
		return p.rdb.SMembers(ctx, p.keys.Sales()).Result()
	}
	ids := make([]string, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	n, err := p.rdb.SCard(ctx, p.keys.Sales()).Result()
	if err != nil {
		return nil, err
	}
	p.owed = min(float64(n), p.owed+float64(n)*time.Since(p.last).Seconds()/saleFullEvery.Seconds())
	for p.owed >= 1 {
		want := int64(p.owed)
		got, next, err := p.rdb.SScan(ctx, p.keys.Sales(), p.cursor, "", want).Result()
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
		p.owed -= float64(len(got))
		p.cursor = next
		if next == 0 || len(got) == 0 {
			break // one stretch per scrape ends at the walk's end
		}
	}
	p.owed = max(p.owed, 0)
	return ids, nil
}

// retouch puts back what a failed refresh took, for the next one.
func (p *sampler) retouch(ids map[string]struct{}) {
	p.tmu.Lock()
	for id := range ids {
		p.touched[id] = struct{}{}
	}
	p.tmu.Unlock()
}

// write writes the sale totals over the whole registry (flashgate_sales:
// sales that exist; flashgate_sales_live: those not over;
// flashgate_sale_series_omitted: live sales left without per-sale series by
// the bound) and the remaining and sold units of at most MaxSaleSeries live
// sales, in sale order. The sales shown are those that sold most, then by
// sale id: the same sales scrape after scrape while nothing changes, and
// the busiest ones (a Prometheus series that comes and goes with a random
// pick is no series to alert on).
//
// The figures are the sampler's copy (see sampler), brought up to date
// first within the Redis timeout. The outbox series of each sale are the
// relay's (relay.WriteMetrics, through Deps.Metrics).
func (p *sampler) write(w io.Writer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if !p.refresh(ctx) {
		return
	}
	now := time.Now().UnixMilli()
	var (
		exist, live int
		rows        []saleRow
	)
	// A bucket of a sale of several (buckets.go) is not a sale: its sold
	// is its sale's, whose home keeps the stock and sells nothing itself.
	laneSold := map[string]int64{}
	for id, r := range p.recs {
		if sale, _, ok := scripts.SplitBucket(id); ok {
			laneSold[sale] += r.sold
		}
	}
	for id, r := range p.recs {
		if !r.exists {
			continue // an id without a sale (see Store.Upsert)
		}
		if _, _, ok := scripts.SplitBucket(id); ok {
			continue
		}
		exist++
		if r.end > 0 && now >= r.end {
			continue
		}
		live++
		// An id outside the id rule (never made by the admin API) could
		// break the exposition format; it is in the totals all the same.
		if order.ValidID(id) {
			rows = append(rows, saleRow{id: id, stock: r.stock, sold: r.sold + laneSold[id]})
		}
	}
	if len(rows) > MaxSaleSeries {
		slices.SortFunc(rows, func(a, b saleRow) int {
			return cmp.Or(cmp.Compare(b.sold, a.sold), strings.Compare(a.id, b.id))
		})
		rows = rows[:MaxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b saleRow) int { return strings.Compare(a.id, b.id) })
	metrics.WriteGaugeUint64(w, "flashgate_sales", uint64(exist))
	metrics.WriteGaugeUint64(w, "flashgate_sales_live", uint64(live))
	metrics.WriteGaugeUint64(w, "flashgate_sale_series_omitted", uint64(live-len(rows)))
	if len(rows) == 0 {
		return
	}
	b := promtext.AppendMetadata(nil, "flashgate_sale_remaining", "gauge")
	for _, r := range rows {
		b = appendSaleSeries(b, "flashgate_sale_remaining", r.id, r.stock-r.sold)
	}
	b = promtext.AppendMetadata(b, "flashgate_sale_sold", "gauge")
	for _, r := range rows {
		b = appendSaleSeries(b, "flashgate_sale_sold", r.id, r.sold)
	}
	_, _ = w.Write(b)
}

// appendSaleSeries appends `name{sale="SALE"} v` and a newline.
func appendSaleSeries(b []byte, name, sale string, v int64) []byte {
	b = promtext.AppendSale(b, name, sale)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}

// num reads an integer field of an HMGET reply; a missing one is 0.
func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
