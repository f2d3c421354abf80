package sale

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// TestSaleMetricsReadWhatChanged: with many sales, the first scrape reads
// every sale's record; later ones read those this process wrote to, whose
// new figures show at once, and walk the registry at its pace, so that a
// sale only another process changed shows its new figures once the walk
// has passed it.
func TestSaleMetricsReadWhatChanged(t *testing.T) {
	const n = 1200
	rdb := localstack.Redis(t)
	h := &localstack.Calls{Match: func(_ context.Context, cmd redis.Cmder) bool { return cmd.Name() == "hmget" }}
	rdb.AddHook(h)
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
	p := newSampler(rdb, keys, 5*time.Second)
	// scrape scrapes as if the last scrape were ago: the walk reads its
	// share of that.
	scrape := func(ago time.Duration) (string, int64) {
		p.last, p.owed = time.Now().Add(-ago), 0
		before := h.N()
		var b bytes.Buffer
		p.write(&b)
		return b.String(), h.N() - before
	}
	if out, read := scrape(0); read != n || !strings.Contains(out, "flashgate_sales "+strconv.Itoa(n)+"\n") {
		t.Fatalf("first scrape read %d records, want every one of %d:\n%.300s", read, n, out)
	}

	// s5 changed by this process (touched), s1199 by another (not).
	if err := rdb.HSet(ctx, keys.Meta("s5"), "sold", 9).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys.Meta("s1199"), "sold", 10).Err(); err != nil {
		t.Fatal(err)
	}
	p.touch("s5")
	out, read := scrape(0)
	if read != 1 {
		t.Errorf("a scrape after one sale was written read %d records, want 1", read)
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s5"} 9`+"\n") {
		t.Errorf("the touched sale's new sold is not shown:\n%s", grepLines(out, `"s5"`))
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s1199"} 9`+"\n") {
		t.Errorf("the untouched sale does not show its last figures read:\n%s", grepLines(out, `"s1199"`))
	}
	if _, read := scrape(0); read != 0 {
		t.Errorf("a scrape with nothing written read %d records, want none", read)
	}

	// Scrapes a quarter of saleFullEvery apart walk the whole registry in
	// about four, each reading about its quarter.
	var total int64
	scrapes := 0
	for {
		out, read = scrape(saleFullEvery / 4)
		total += read
		scrapes++
		if read < n/4 && p.cursor != 0 { // the last one reads what is left
			t.Errorf("scrape %d of the walk read %d records, want at least a quarter of %d", scrapes, read, n)
		}
		if p.cursor == 0 || scrapes == 8 {
			break
		}
	}
	if p.cursor != 0 || total < n || total > 2*n {
		t.Errorf("the walk: %d scrapes read %d records (cursor %d), want every one of %d once or so", scrapes, total, p.cursor, n)
	}
	if !strings.Contains(out, `flashgate_sale_sold{sale="s1199"} 10`+"\n") {
		t.Errorf("after the walk the sale changed elsewhere shows:\n%s", grepLines(out, `"s1199"`))
	}
}

// A scrape while Redis cannot answer shows no sale series, and what was
// touched meanwhile is read by the next scrape that can.
func TestSaleMetricsWithoutRedis(t *testing.T) {
	addrs, err := localstack.FreeAddrs(1) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	addr := addrs[0]
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	p := newSampler(rdb, scripts.Keys{Prefix: "x"}, time.Second)
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
