package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/retry"
)

// A shop's scale (issue 18): thousands of sales through a Redis restart,
// with a large orders table and a sale selling meanwhile. A real gateway
// and two real consumers (whose repairers release and repair the held
// sales) run on the test's own redis-server; the test counts the sales
// still held over time. Held must reach 0, a sale sold out in Redis answers
// 410 while held, and no unit is sold twice: every sale with orders holds
// in Redis the units MySQL holds.

const (
	manySales    = 10000
	manyWithBuys = 40      // of those, sales given orders before the restart
	manyLost     = 10      // of those, sales whose last orders Redis loses
	manyFiller   = 300_000 // rows of other sales in orders, so reads that scan it show
	manyCreators = 16      // concurrent admin calls that create the sales
)

func TestManySalesRedisRestart(t *testing.T) {
	for _, mode := range []string{"clean", "lost"} {
		t.Run(mode, func(t *testing.T) { manySalesRestart(t, mode == "lost") })
	}
}

func manySalesRestart(t *testing.T, lose bool) {
	r, s, g := rollbackStack(t)
	fillOrders(t, s, manyFiller)

	start := time.Now()
	names := make([]string, manySales)
	for i := range names {
		names[i] = fmt.Sprintf("m%05d", i)
	}
	createMany(t, g, names, 5, 2)
	t.Logf("%d sales created through the admin API in %v", manySales, time.Since(start).Round(time.Millisecond))

	// Orders on the first manyWithBuys sales; the first one sold out.
	buy := func(sales []string, user string, qty int64) {
		t.Helper()
		c := &http.Client{Timeout: 5 * time.Second}
		for _, sale := range sales {
			q := buyReq{user: user, key: user + "-" + sale, qty: qty}
			if res := buyUntilAnswered(context.Background(), c, g, sale, q); res.code != http.StatusAccepted {
				t.Fatalf("buy on %s: %d %s %v", sale, res.code, res.raw, res.err)
			}
		}
	}
	buy(names[:manyWithBuys], "u1", 2)
	buy(names[:1], "u2", 2)
	buy(names[:1], "u3", 1) // 5 of 5
	for _, sale := range names[:manyWithBuys] {
		s.waitDrained(sale, time.Minute)
	}

	var snapshot string
	if lose {
		snapshot, _ = r.snapshot(t)
		// Written after the copy: lost with Redis, and in MySQL.
		buy(names[1:1+manyLost], "u9", 2)
		for _, sale := range names[1 : 1+manyLost] {
			s.waitDrained(sale, time.Minute)
		}
		s.rollBack(r, snapshot, names[1])
	} else {
		r.restart(t)
	}
	back := time.Now()

	// A sale made after the restart sells throughout the repair.
	stock := int64(100000)
	s.windowSale(g, "live", stock, 1000, 0)
	users := make([]string, 3000)
	for i := range users {
		users[i] = "l" + strconv.Itoa(i)
	}
	live := startRush(t, g, "live", buyReqs(users, "k-", 1), 16)

	// A held sale that Redis knows to be sold out answers 410 at once.
	c := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := postBuy(c, g, names[0], "", `{"user_id":"late","quantity":1}`)
	if err != nil || code != http.StatusGone {
		t.Errorf("a buy on sold-out sale %s after the restart: %d %s %v, want 410 sold_out at once", names[0], code, raw, err)
	}

	// The held sales, counted over time until none is.
	ctx := bg(t, 5*time.Minute)
	var curve []string
	first := int64(-1)
	heldBefore := scrapeURL(t, "http://"+g.admin+"/metrics")["flashgate_script_held_sales_total"]
	err = retry.Until(ctx, retry.Backoff{Min: 250 * time.Millisecond, Max: 250 * time.Millisecond}, func(ctx context.Context) error {
		n, err := s.rdb.SCard(ctx, s.keys.Held()).Result()
		if err != nil {
			return err
		}
		if first < 0 && n > 0 {
			first = n
		}
		curve = append(curve, fmt.Sprintf("%.1fs:%d", time.Since(back).Seconds(), n))
		if n > 0 || first < 0 && time.Since(back) < 2*time.Second {
			return fmt.Errorf("%d sales held", n)
		}
		return nil
	}, nil)
	t.Logf("sales held after Redis came back (time since: count): %v", curve)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(back).Round(time.Millisecond), err)
	}
	t.Logf("every sale released or repaired %v after Redis answered again (%d were held)", time.Since(back).Round(time.Millisecond), first)
	// Every sale was held once, by the gateway's hold pass when it met
	// the restarted Redis (before this test read the counter, or after).
	if held := scrapeURL(t, "http://"+g.admin+"/metrics")["flashgate_script_held_sales_total"]; max(held, heldBefore) < manySales {
		t.Errorf("the hold passes held %v sales (%v at first look), want at least all %d", held, heldBefore, manySales)
	}

	// Nothing sold twice: Redis holds the units MySQL holds, sale by sale.
	live.wait()
	for _, sale := range append(names[:manyWithBuys], "live") {
		s.waitDrained(sale, time.Minute)
		sold, _ := s.redisSold(ctx, sale)
		_, units := s.count(sale)
		if sold != units {
			t.Errorf("sale %s: Redis sold %d, MySQL holds %d units", sale, sold, units)
		}
	}
	if _, units := s.count(names[1]); lose && units != 4 {
		t.Errorf("sale %s: MySQL holds %d units, want 4 (2 before the copy, 2 lost with Redis)", names[1], units)
	}
}

// createMany creates the sales through the admin API, manyCreators at a
// time.
func createMany(t *testing.T, g *gatewayProc, names []string, stock, limit int) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: manyCreators}}
	defer c.CloseIdleConnections()
	next := make(chan string)
	errs := make(chan error, manyCreators)
	var wg sync.WaitGroup
	for range manyCreators {
		wg.Go(func() {
			for sale := range next {
				code, body, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale,
					fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, stock, limit))
				if err != nil || code != http.StatusCreated {
					errs <- fmt.Errorf("create %s: %d %s %v", sale, code, body, err)
					return
				}
			}
		})
	}
	for _, sale := range names {
		select {
		case next <- sale:
		case err := <-errs:
			close(next)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// fillOrders puts n rows of other sales into the stack's orders table.
func fillOrders(t *testing.T, s *stack, n int) {
	t.Helper()
	start := time.Now()
	if err := orderdbtest.Fill(bg(t, 5*time.Minute), s.db, n, 2000); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows of other sales put in orders in %v", n, time.Since(start).Round(time.Millisecond))
}
