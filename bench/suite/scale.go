package main

// A shop's scale (issue 18): 10,000 sales on one Redis of the suite's own,
// two gateways and two consumers, a million rows of other sales in orders.
// It measures what an operator meets on such a day: how fast a few sales
// sell again after a clean Redis restart, how late a fresh order reaches
// MySQL while the 10,000 sales are created and once they sit idle, what
// the idle stack costs Redis in commands per second (scraped as Prometheus
// would), and how long every sale takes to be released or repaired after a
// clean restart and after a restart from an older AOF, each while another
// sale sells.

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// scaleStack is the part's processes and clients.
type scaleStack struct {
	s        *suite
	srv      *localstack.RedisServer
	rdb      *redis.Client
	db       *sql.DB
	prefix   string
	gateways [][2]string // public, admin
	client   *http.Client
}

// measureScale is the shop-scale part; its figures go to s.scale.
func (s *suite) measureScale(ctx context.Context) error {
	st, cleanup, err := s.scaleStack(ctx, shopShape{tag: "scale", filler: s.o.scaleFiller, gateways: 2, consumers: 2})
	defer cleanup()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## A shop's scale: %d sales through Redis restarts\n\n", s.o.scaleSales)
	fmt.Fprintf(&b, "One redis-server of its own (appendonly, everysec), two gateways, two consumers, %d rows of other sales in `orders`. `.run/bench/suite -only scale`.\n\n", s.o.scaleFiller)
	b.WriteString("| figure | value | target |\n| --- | ---: | --- |\n")
	rowf := func(name, value, target string) { fmt.Fprintf(&b, "| %s | %s | %s |\n", name, value, target) }

	// 1. A few sales through a clean restart.
	few := []string{"few-0", "few-1", "few-2"}
	for _, sale := range few {
		if err := st.create(sale, 100, 10); err != nil {
			return err
		}
		if _, err := st.buyUntil(ctx, sale, "before-"+sale, http.StatusAccepted, time.Minute); err != nil {
			return err
		}
	}
	if err := st.srv.Stop(); err != nil {
		return err
	}
	if err := st.srv.Start(ctx); err != nil {
		return err
	}
	back := time.Now()
	if _, err := st.buyUntil(ctx, few[0], "after", http.StatusAccepted, time.Minute); err != nil {
		return fmt.Errorf("few sales after a clean restart: %w", err)
	}
	took := time.Since(back)
	rowf("3 sales, clean restart: first 202 after Redis answered", took.Round(time.Millisecond).String(), "≤ 1 s "+verdict(took <= time.Second))

	// 2. 10,000 sales created while a probe buys every 50 ms; then idle.
	if err := st.create("probe", 1_000_000_000, 1_000_000); err != nil {
		return err
	}
	var probeMu sync.Mutex
	var creating, idle []string
	phase := &creating
	pctx, stopProbe := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() {
		for i := 0; pctx.Err() == nil; i++ {
			if id, err := st.buy("probe", "p"+strconv.Itoa(i)); err == nil && id != "" {
				probeMu.Lock()
				*phase = append(*phase, id)
				probeMu.Unlock()
			}
			select {
			case <-pctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	names := make([]string, s.o.scaleSales)
	for i := range names {
		names[i] = fmt.Sprintf("m%05d", i)
	}
	start := time.Now()
	err = st.createMany(ctx, names, `{"stock":5,"per_user_limit":2}`)
	created := time.Since(start)
	probeMu.Lock()
	phase = &idle
	probeMu.Unlock()
	if err == nil {
		err = sleepCtx(ctx, 5*time.Second)
	}
	stopProbe()
	pwg.Wait()
	if err != nil {
		return err
	}
	rowf(fmt.Sprintf("%d sales created through the admin API (16 at a time)", s.o.scaleSales), created.Round(time.Millisecond).String(), "")
	for _, p := range []struct {
		name string
		ids  []string
	}{{"while the sales were created", creating}, {"with the sales idle", idle}} {
		p50, p99, max, err := st.lags(ctx, p.ids)
		if err != nil {
			return err
		}
		rowf(fmt.Sprintf("a fresh order's lag to MySQL %s (%d orders): p50 / p99 / max", p.name, len(p.ids)),
			fmt.Sprintf("%v / %v / %v", p50, p99, max), "p99 ≤ 1 s "+verdict(p99 <= time.Second))
	}

	// 3. The idle stack's Redis commands, scraped every 15 s. A gateway's
	// first scrape reads every sale (its copy starts empty): done before
	// the window, as Prometheus would have long before.
	for _, g := range st.gateways {
		if _, err := st.get("http://" + g[1] + "/metrics"); err != nil {
			return err
		}
	}
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	if err := st.rdb.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	idleStart := time.Now()
	for time.Since(idleStart) < s.o.scaleIdle {
		for _, g := range st.gateways {
			if _, err := st.get("http://" + g[1] + "/metrics"); err != nil {
				return err
			}
		}
		if err := sleepCtx(ctx, min(15*time.Second, s.o.scaleIdle-time.Since(idleStart))); err != nil {
			return err
		}
	}
	info, err := st.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	secs := time.Since(idleStart).Seconds()
	total, top := commandRates(info, secs)
	rowf(fmt.Sprintf("idle Redis load, %d sales, 2 gateways scraped every 15 s, 2 consumers", s.o.scaleSales),
		fmt.Sprintf("%.0f commands/s (%s)", total, top), "≤ 1,000/s "+verdict(total <= 1000))

	// 4. Every sale through a clean restart, and through an older AOF,
	// while another sale sells.
	for _, lose := range []bool{false, true} {
		var snapshot string
		if lose {
			if snapshot, err = st.snapshot(ctx); err != nil {
				return err
			}
			for _, sale := range names[:20] {
				if _, err := st.buyUntil(ctx, sale, "lost-"+sale, http.StatusAccepted, time.Minute); err != nil {
					return err
				}
			}
			if err := st.waitRows(ctx, names[:20], 1); err != nil {
				return err
			}
			if err := st.srv.Kill(); err != nil {
				return err
			}
			err := st.srv.RestoreAOF(snapshot)
			os.RemoveAll(snapshot)
			if err != nil {
				return err
			}
		} else if err := st.srv.Stop(); err != nil {
			return err
		}
		if err := st.srv.Start(ctx); err != nil {
			return err
		}
		back := time.Now()
		seller := "seller-clean"
		if lose {
			seller = "seller-lost"
		}
		if err := st.create(seller, 1_000_000_000, 1_000_000); err != nil {
			return err
		}
		rctx, stopRush := context.WithCancel(ctx)
		var sold atomic.Int64
		var rwg sync.WaitGroup
		for w := range 8 {
			rwg.Go(func() {
				for i := 0; rctx.Err() == nil; i++ {
					if id, err := st.buy(seller, fmt.Sprintf("r%d-%d", w, i)); err == nil && id != "" {
						sold.Add(1)
					}
				}
			})
		}
		took, held, err := st.waitReleased(ctx, back, 5*time.Minute)
		stopRush()
		rwg.Wait()
		if err != nil {
			return err
		}
		what := "clean restart"
		if lose {
			what = "restart from an older AOF (20 sales lost an order MySQL holds)"
			if err := st.checkRepaired(ctx, names[:20]); err != nil {
				return err
			}
		}
		rowf(fmt.Sprintf("%d sales, %s, a sale selling meanwhile (%d orders): all %d held released or repaired", s.o.scaleSales, what, sold.Load(), held),
			took.Round(time.Millisecond).String(), "≤ 60 s "+verdict(took <= time.Minute))
	}
	b.WriteString("\nThe lag is MySQL's `created_at` less Redis's `reserved_at` of the probe's orders, one every 50 ms. The idle load is `INFO commandstats` over the window, after `CONFIG RESETSTAT`; the three busiest commands are named.\n")
	s.sections.scale = b.String()
	return nil
}
