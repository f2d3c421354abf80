package main

// A shop's trickle (issue 30): many sales each selling now and then, one
// order every few seconds each at a fixed rate in all, against one hot sale
// at the same rate, in Redis commands per order. Pay per batch makes the
// hot sale cheaper per order; what the trickle must not pay is work that
// grows with the sales that sell (a relay polling every outbox written to
// lately), so the ratio stays near 1.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// trickleWarm is how long the load runs before a window's count starts:
// every sale of the trickle takes an order meanwhile (its consumer group
// is created, as it is once in a sale's life), and the stack is in its
// steady state.
const trickleWarm = 6 * time.Second

// quietRate is the Redis commands a second under which the stack counts as
// idle between two windows (the scan of 10,000 sales and the gateway's
// timers are a few hundred): a window must not pay for the one before
// (a relay still busy with the sales that sold a moment ago).
const quietRate = 1000

// trickleWindow is one window of paced buys, as counted.
type trickleWindow struct {
	orders   int64   // 202s within the window
	rate     float64 // of them, a second
	missed   int64   // buys the pacer could not send in time (the load fell behind)
	commands float64 // Redis commands per order, every command but the suite's own
	each     string  // every command of 0.01 or more per order, busiest first
}

// trickleRound is one round: the trickle and the hot sale, each one window.
type trickleRound struct{ many, hot trickleWindow }

// measureTrickle is the trickle part: a row of the main table (the
// trickle's commands per order held to the hot sale's) and a section.
func (s *suite) measureTrickle(ctx context.Context) error {
	st, cleanup, err := s.scaleStack(ctx, shopShape{tag: "trickle", gateways: 1, consumers: 1})
	defer cleanup()
	if err != nil {
		return err
	}
	names := make([]string, s.o.trickleSales)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
	}
	// Each sale's stock outlasts every round, with room to spare.
	window := s.o.dur
	perSale := int64(float64(s.o.trickleRuns)*(trickleWarm+window).Seconds()*float64(s.o.trickleRate)/float64(len(names))) + 100
	if err := st.createMany(ctx, names, fmt.Sprintf(`{"stock":%d,"per_user_limit":1}`, perSale)); err != nil {
		return err
	}
	if err := st.create("hot", 1_000_000_000, 1); err != nil {
		return err
	}
	var rounds []trickleRound
	for i := range s.o.trickleRuns {
		var r trickleRound
		many := func() (err error) {
			r.many, err = st.trickle(ctx, names, fmt.Sprintf("m%d", i), s.o.trickleRate, window)
			return
		}
		hot := func() (err error) {
			r.hot, err = st.trickle(ctx, []string{"hot"}, fmt.Sprintf("h%d", i), s.o.trickleRate, window)
			return
		}
		order := []func() error{many, hot}
		if i%2 == 1 {
			order = []func() error{hot, many}
		}
		for _, f := range order {
			if err := f(); err != nil {
				return err
			}
		}
		rounds = append(rounds, r)
	}

	mc, ml, mh := medianOfRuns(rounds, func(r trickleRound) float64 { return r.many.commands })
	hc, hl, hh := medianOfRuns(rounds, func(r trickleRound) float64 { return r.hot.commands })
	ratio := func(r trickleRound) float64 { return r.many.commands / r.hot.commands }
	rc, rl, rh := medianOfRuns(rounds, ratio)
	const group = "a shop's trickle, Redis commands per order"
	base := s.add(row{group: group, name: "one hot sale, paced: Redis commands per order", value: hc, unit: "commands/order", prec: 2})
	s.add(row{group: group, name: fmt.Sprintf("%d sales, each an order every %.0f s, the same rate: Redis commands per order", len(names), float64(len(names))/float64(s.o.trickleRate)),
		value: mc, unit: "commands/order", prec: 2, baseline: base, atMost: 1.5})

	var b strings.Builder
	fmt.Fprintf(&b, "## A shop's trickle: %d sales each selling now and then\n\n", len(names))
	fmt.Fprintf(&b, "One redis-server of its own (appendonly, everysec), one gateway (its relay), one consumer, MariaDB. Paced buys, %d a second in all, one unit each by a buyer of its own: "+
		"round-robin over %d sales (each an order every %.0f s), or all into one hot sale. Each window counts the 202s and Redis's commands (`CONFIG RESETSTAT` after %v of load, `INFO commandstats` %v later, every command but the suite's `CONFIG` and `INFO`: the scripts' `redis.call`s count), "+
		"each window once Redis is quiet again (under %d commands in a second), the trickle and the hot sale in alternating order, %d round(s), medians with the range in brackets. `.run/bench/suite -only trickle`.\n\n",
		s.o.trickleRate, len(names), float64(len(names))/float64(s.o.trickleRate), trickleWarm, window, quietRate, len(rounds))
	b.WriteString("| figure | value | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&b, "| one hot sale: Redis commands per order | %s |  |\n", spread(hc, hl, hh, "%.2f"))
	fmt.Fprintf(&b, "| %d sales trickling: Redis commands per order | %s |  |\n", len(names), spread(mc, ml, mh, "%.2f"))
	fmt.Fprintf(&b, "| trickle ÷ hot sale | %s | ≤ 1.5× %s |\n", spread(rc, rl, rh, "%.2f×"), verdict(rc <= 1.5))
	b.WriteString("\nEach round (orders/s reached; commands per order; each command of 0.01 or more per order, busiest first):\n\n")
	for i, r := range rounds {
		for _, w := range []struct {
			name string
			w    trickleWindow
		}{{"trickle", r.many}, {"hot sale", r.hot}} {
			missed := ""
			if w.w.missed > 0 {
				missed = fmt.Sprintf(", %d buys the pacer could not send in time", w.w.missed)
			}
			fmt.Fprintf(&b, "- round %d, %s: %.0f orders/s%s; %.2f commands per order (%s)\n", i+1, w.name, w.w.rate, missed, w.w.commands, w.w.each)
		}
	}
	s.sections.trickle = b.String()
	return nil
}

// trickle buys into sales round-robin at rate a second (users prefix-N,
// one each) for trickleWarm, then counts the 202s and Redis's commands
// over window, then stops.
func (st *scaleStack) trickle(ctx context.Context, sales []string, prefix string, rate int, window time.Duration) (trickleWindow, error) {
	const (
		tick    = 10 * time.Millisecond
		workers = 64
	)
	var w trickleWindow
	if err := st.quiet(ctx, time.Minute); err != nil {
		return w, err
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	// The pacer hands each worker one buy at a time: a buy it cannot hand
	// over within its tick is missed (counted), never queued.
	buys := make(chan int)
	var accepted, missed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range buys {
				if id, err := st.buy(sales[i%len(sales)], fmt.Sprintf("%s-%d", prefix, i)); err == nil && id != "" {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		defer close(buys)
		t := time.NewTicker(tick)
		defer t.Stop()
		start, sent := time.Now(), 0
		for {
			select {
			case <-lctx.Done():
				return
			case now := <-t.C:
				due := int(now.Sub(start).Seconds() * float64(rate))
				late := time.NewTimer(tick)
			send:
				for ; sent < due; sent++ {
					select {
					case buys <- sent:
					case <-late.C:
						missed.Add(int64(due - sent))
						sent = due
						break send
					case <-lctx.Done():
						late.Stop()
						return
					}
				}
				late.Stop()
			}
		}
	})
	err := sleepCtx(ctx, trickleWarm)
	if err == nil {
		err = st.rdb.ConfigResetStat(ctx).Err()
	}
	if err != nil {
		stop()
		wg.Wait()
		return w, err
	}
	accepted.Store(0)
	missed.Store(0)
	began := time.Now()
	err = sleepCtx(ctx, window)
	info, ierr := st.rdb.Info(ctx, "commandstats").Result()
	w.orders, w.missed = accepted.Load(), missed.Load()
	took := time.Since(began)
	stop()
	wg.Wait()
	if err = cmpErr(err, ierr); err != nil {
		return w, err
	}
	if w.orders == 0 {
		return w, fmt.Errorf("no 202 in %v of buys into %d sale(s)", window, len(sales))
	}
	w.rate = float64(w.orders) / took.Seconds()
	type cmd struct {
		name  string
		calls float64
	}
	var cmds []cmd
	for name, c := range parseCommandStats(info, w.orders) {
		if name == "CONFIG" || name == "INFO" {
			continue // the suite's own
		}
		w.commands += c.calls
		cmds = append(cmds, cmd{name, c.calls})
	}
	slices.SortFunc(cmds, func(a, b cmd) int {
		return cmp.Or(cmp.Compare(b.calls, a.calls), strings.Compare(a.name, b.name)) // most first
	})
	var each []string
	for _, c := range cmds {
		if c.calls >= 0.005 {
			each = append(each, fmt.Sprintf("%s %.2f", c.name, c.calls))
		}
	}
	w.each = strings.Join(each, ", ")
	return w, nil
}

// quiet waits until Redis runs fewer than quietRate commands in a second
// (the suite's own aside), for at most bound.
func (st *scaleStack) quiet(ctx context.Context, bound time.Duration) error {
	total := func() (float64, error) {
		info, err := st.rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, err
		}
		n := 0.0
		for name, c := range parseCommandStats(info, 1) {
			if name != "CONFIG" && name != "INFO" {
				n += c.calls
			}
		}
		return n, nil
	}
	deadline := time.Now().Add(bound)
	last, err := total()
	for err == nil {
		if err = sleepCtx(ctx, time.Second); err != nil {
			break
		}
		var now float64
		if now, err = total(); err == nil {
			if now-last < quietRate {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the stack's Redis still ran %.0f commands a second %v after the last window", now-last, bound)
			}
			last = now
		}
	}
	return err
}
