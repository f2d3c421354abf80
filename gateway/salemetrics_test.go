package gateway

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// hmgets counts the HMGET commands a client sends, pipelined or not.
type hmgets struct{ n atomic.Int64 }

func (h *hmgets) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hmgets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *hmgets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}
func (h *hmgets) count(cmds []redis.Cmder) {
	for _, c := range cmds {
		if c.Name() == "hmget" {
			h.n.Add(1)
		}
	}
}

var _ redis.Hook = (*hmgets)(nil)

// TestSaleMetricsReadWhatChanged: with many sales, a scrape reads every
// sale's record once per saleFullEvery and, in between, only those this
// process wrote to, whose new figures it shows at once; a sale that only
// another process changed keeps its last figures until the next full read.
func TestSaleMetricsReadWhatChanged(t *testing.T) {
	const n = 1200
	rdb := localstack.Redis(t)
	var h hmgets
	rdb.AddHook(&h)
	keys := scripts.Keys{Prefix: "t" + localstack.RandomHex(5)}
	localstack.DropKeys(t, rdb, keys.Prefix)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range n {
		sale := "s" + strconv.Itoa(i)
		pipe.HSet(ctx, keys.Meta(sale), "stock", 10, "sold", i%10, "ends", 0)
		pipe.SAdd(ctx, keys.Sales(), sale)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	p := newSaleSampler(rdb, keys, 5*time.Second)
	scrape := func() string {
		var b bytes.Buffer
		p.write(&b)
		return b.String()
	}
	before := h.n.Load()
	if out := scrape(); !strings.Contains(out, "flashgate_sales "+strconv.Itoa(n)+"\n") {
		t.Fatalf("first scrape:\n%.300s", out)
	}
	if got := h.n.Load() - before; got != n {
		t.Errorf("first scrape read %d records, want every one of %d", got, n)
	}

	// s5 changed by this process (touched), s6 by another (not).
	if err := rdb.HSet(ctx, keys.Meta("s5"), "sold", 9).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys.Meta("s1199"), "sold", 10).Err(); err != nil {
		t.Fatal(err)
	}
	p.touch("s5")
	before = h.n.Load()
	out := scrape()
	if got := h.n.Load() - before; got != 1 {
		t.Errorf("a scrape after one sale was written read %d records, want 1", got)
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s5"} 9`+"\n") {
		t.Errorf("the touched sale's new sold is not shown:\n%s", grepLines(out, `"s5"`))
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s1199"} 9`+"\n") {
		t.Errorf("the untouched sale does not show its last figures read:\n%s", grepLines(out, `"s1199"`))
	}
	before = h.n.Load()
	scrape()
	if got := h.n.Load() - before; got != 0 {
		t.Errorf("a scrape with nothing written read %d records, want none", got)
	}

	// Past saleFullEvery, everything again.
	p.full = p.full.Add(-saleFullEvery)
	before = h.n.Load()
	out = scrape()
	if got := h.n.Load() - before; got != n {
		t.Errorf("the full read after saleFullEvery read %d records, want %d", got, n)
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s1199"} 10`+"\n") {
		t.Errorf("after the full read the sale changed elsewhere shows:\n%s", grepLines(out, `"s1199"`))
	}
}

// A scrape while Redis cannot answer shows no sale series, and what was
// touched meanwhile is read by the next scrape that can.
func TestSaleMetricsWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	p := newSaleSampler(rdb, scripts.Keys{Prefix: "x"}, time.Second)
	p.touch("a")
	var b bytes.Buffer
	p.write(&b)
	if b.Len() != 0 {
		t.Errorf("a scrape without Redis wrote:\n%s", b.String())
	}
	if _, ok := p.touched["a"]; !ok {
		t.Errorf("a touched sale was forgotten by a failed scrape")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
