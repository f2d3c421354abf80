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
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

var (
	skipScale   = flag.Bool("skip-scale", false, "skip the shop-scale measurement (10,000 sales through Redis restarts)")
	scaleSales  = flag.Int("scale-sales", 10000, "sales of the shop-scale measurement")
	scaleFiller = flag.Int("scale-filler", 1_000_000, "rows of other sales put in orders before the shop-scale measurement")
	scaleIdle   = flag.Duration("scale-idle", 30*time.Second, "idle window of the shop-scale measurement")
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
	if *skipScale {
		s.notes = append(s.notes, "shop scale skipped (-skip-scale)")
		return nil
	}
	st, cleanup, err := s.scaleStack(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## A shop's scale: %d sales through Redis restarts\n\n", *scaleSales)
	fmt.Fprintf(&b, "One redis-server of its own (appendonly, everysec), two gateways, two consumers, %d rows of other sales in `orders`. `.run/bench/suite -only scale`.\n\n", *scaleFiller)
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
	names := make([]string, *scaleSales)
	for i := range names {
		names[i] = fmt.Sprintf("m%05d", i)
	}
	start := time.Now()
	err = st.createMany(ctx, names)
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
	rowf(fmt.Sprintf("%d sales created through the admin API (16 at a time)", *scaleSales), created.Round(time.Millisecond).String(), "")
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
	for time.Since(idleStart) < *scaleIdle {
		for _, g := range st.gateways {
			if _, err := st.get("http://" + g[1] + "/metrics"); err != nil {
				return err
			}
		}
		if err := sleepCtx(ctx, min(15*time.Second, *scaleIdle-time.Since(idleStart))); err != nil {
			return err
		}
	}
	info, err := st.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	secs := time.Since(idleStart).Seconds()
	total, top := commandRates(info, secs)
	rowf(fmt.Sprintf("idle Redis load, %d sales, 2 gateways scraped every 15 s, 2 consumers", *scaleSales),
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
		rowf(fmt.Sprintf("%d sales, %s, a sale selling meanwhile (%d orders): all %d held released or repaired", *scaleSales, what, sold.Load(), held),
			took.Round(time.Millisecond).String(), "≤ 60 s "+verdict(took <= time.Minute))
	}
	b.WriteString("\nThe lag is MySQL's `created_at` less Redis's `reserved_at` of the probe's orders, one every 50 ms. The idle load is `INFO commandstats` over the window, after `CONFIG RESETSTAT`; the three busiest commands are named.\n")
	s.scale = b.String()
	return nil
}

func (s *suite) scaleStack(ctx context.Context) (*scaleStack, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	dir, err := os.MkdirTemp(".run/bench", "scale-")
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	srv, err := s.startRedis(ctx, localstack.RedisOptions{Dir: dir, Args: []string{
		"--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0", "--save", ""}})
	if err != nil {
		return nil, cleanup, fmt.Errorf("the suite's redis-server: %w", err)
	}
	st := &scaleStack{s: s, srv: srv, rdb: redis.NewClient(&redis.Options{Addr: srv.Addr}),
		prefix: fmt.Sprintf("scale%d", time.Now().UnixNano()%1e9),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	undo = append(undo, func() { st.rdb.Close() })
	dsn, drop, err := s.scratchDB(ctx, "scale")
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, drop)
	if st.db, err = sql.Open("mysql", dsn); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { st.db.Close() })
	if err := orderdbtest.Fill(ctx, st.db, *scaleFiller, 5000); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { dropQueue(st.prefix) })
	env := []string{"FLASHGATE_REDIS_ADDRS=" + srv.Addr, "FLASHGATE_MYSQL_DSN=" + dsn,
		"FLASHGATE_AMQP_EXCHANGE=" + st.prefix, "FLASHGATE_AMQP_QUEUE=" + st.prefix}
	for i := range 2 {
		public, admin := freePair()
		g := exec.Command(s.bin, "gateway")
		g.Env = gatewayEnv(public, admin, st.prefix, env)
		if err := s.start(g, "scale-gateway-"+strconv.Itoa(i)); err != nil {
			return nil, cleanup, err
		}
		if err := waitHTTP(ctx, "http://"+public+"/readyz"); err != nil {
			return nil, cleanup, err
		}
		st.gateways = append(st.gateways, [2]string{public, admin})
	}
	for i := range 2 {
		c := exec.Command(s.bin, "consumer")
		c.Env = gatewayEnv(freeAddr(), freeAddr(), st.prefix, env)
		if err := s.start(c, "scale-consumer-"+strconv.Itoa(i)); err != nil {
			return nil, cleanup, err
		}
	}
	return st, cleanup, nil
}

func (st *scaleStack) gw(i int) [2]string { return st.gateways[i%len(st.gateways)] }

// create creates a sale, sending it again for up to 30 s while the
// gateway answers 503 (just after a Redis restart, the first script call
// reloads the scripts, hold pass first, and may pass redis.timeout).
func (st *scaleStack) create(sale string, stock, limit int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := st.do("PUT", "http://"+st.gw(0)[1]+"/admin/v1/sales/"+sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, stock, limit))
		if err == nil && (code == http.StatusCreated || code == http.StatusOK) {
			return nil
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return fmt.Errorf("create sale %s: %d %s %v", sale, code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createMany creates the sales through both gateways, 16 at a time.
func (st *scaleStack) createMany(ctx context.Context, names []string) error {
	next := make(chan int)
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				code, body, err := st.do("PUT", "http://"+st.gw(i)[1]+"/admin/v1/sales/"+names[i], `{"stock":5,"per_user_limit":2}`)
				if err != nil || code != http.StatusCreated {
					mu.Lock()
					firstErr = cmpErr(firstErr, fmt.Errorf("create %s: %d %s %v", names[i], code, body, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range names {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return cmpErr(firstErr, ctx.Err())
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (st *scaleStack) do(method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	res, err := st.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func (st *scaleStack) get(url string) (string, error) {
	code, body, err := st.do("GET", url, "")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s: %d", url, code)
	}
	return body, err
}

// buy sends one buy of one unit and returns the order id of a 202 ("" for
// another answer).
func (st *scaleStack) buy(sale, user string) (string, error) {
	code, body, err := st.do("POST", "http://"+st.gw(len(user))[0]+"/v1/sales/"+sale+"/orders", `{"user_id":"`+user+`","quantity":1}`)
	if err != nil || code != http.StatusAccepted {
		return "", err
	}
	_, rest, ok := strings.Cut(body, `"order_id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	if !ok || id == "" {
		return "", fmt.Errorf("202 without an order id: %s", body)
	}
	return id, nil
}

// buyUntil buys until the answer is want, and returns how long that took.
func (st *scaleStack) buyUntil(ctx context.Context, sale, user string, want int, bound time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		code, body, err := st.do("POST", "http://"+st.gw(0)[0]+"/v1/sales/"+sale+"/orders", `{"user_id":"`+user+`","quantity":1}`)
		if err == nil && code == want {
			return time.Since(start), nil
		}
		if time.Since(start) > bound {
			return 0, fmt.Errorf("buy on %s: no %d within %v (last %d %s %v)", sale, want, bound, code, body, err)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// lags waits until the orders are in MySQL and returns the quantiles of
// created_at less reserved_at.
func (st *scaleStack) lags(ctx context.Context, ids []string) (p50, p99, max time.Duration, err error) {
	if len(ids) == 0 {
		return 0, 0, 0, errors.New("no probe order accepted")
	}
	deadline := time.Now().Add(2 * time.Minute)
	var lags []time.Duration
	for {
		lags = lags[:0]
		for lo := 0; lo < len(ids); lo += 500 {
			part := ids[lo:min(len(ids), lo+500)]
			args := make([]any, len(part))
			for i, id := range part {
				args[i] = id
			}
			rows, err := st.db.QueryContext(ctx, "SELECT TIMESTAMPDIFF(MICROSECOND, reserved_at, created_at) FROM orders WHERE order_id IN (?"+strings.Repeat(",?", len(part)-1)+")", args...)
			if err != nil {
				return 0, 0, 0, err
			}
			for rows.Next() {
				var us int64
				if err := rows.Scan(&us); err != nil {
					rows.Close()
					return 0, 0, 0, err
				}
				lags = append(lags, time.Duration(us)*time.Microsecond)
			}
			rows.Close()
		}
		if len(lags) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("%d of %d probe orders in MySQL after 2 minutes", len(lags), len(ids))
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return 0, 0, 0, err
		}
	}
	slices.Sort(lags)
	q := func(f float64) time.Duration {
		return lags[min(len(lags)-1, int(f*float64(len(lags))))].Round(time.Millisecond)
	}
	return q(0.5), q(0.99), lags[len(lags)-1].Round(time.Millisecond), nil
}

// commandRates reads INFO commandstats: the calls per second of all
// commands over secs, and the three busiest.
func commandRates(info string, secs float64) (float64, string) {
	type cmd struct {
		name  string
		calls int64
	}
	var cmds []cmd
	var total int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls, _ := strconv.ParseInt(n, 10, 64)
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "config" || name == "info" {
			continue // the suite's own
		}
		cmds = append(cmds, cmd{name, calls})
		total += calls
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].calls > cmds[j].calls })
	var top []string
	for _, c := range cmds[:min(3, len(cmds))] {
		top = append(top, fmt.Sprintf("%s %.0f/s", c.name, float64(c.calls)/secs))
	}
	return float64(total) / secs, strings.Join(top, ", ")
}

// snapshot copies the server's append-only folder (SnapshotAOF) into a
// folder of its own.
func (st *scaleStack) snapshot(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp(".run/bench", "scale-aof-")
	if err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = st.srv.SnapshotAOF(sctx, dir)
	return dir, err
}

// waitRows waits until each sale has n rows in MySQL.
func (st *scaleStack) waitRows(ctx context.Context, sales []string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for _, sale := range sales {
		for {
			var rows int
			if err := st.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sale_id = ?", sale).Scan(&rows); err != nil {
				return err
			}
			if rows >= n {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("sale %s: %d rows in MySQL, want %d", sale, rows, n)
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitReleased waits until some sales have been held and then none is,
// and returns the time since back and how many were held at most.
func (st *scaleStack) waitReleased(ctx context.Context, back time.Time, bound time.Duration) (time.Duration, int64, error) {
	held := st.prefix + ":held"
	var most int64
	for {
		n, err := st.rdb.SCard(ctx, held).Result()
		if err == nil {
			most = max(most, n)
			if most > 0 && n == 0 {
				return time.Since(back), most, nil
			}
		}
		if time.Since(back) > bound {
			return 0, most, fmt.Errorf("%d sales still held %v after the restart", n, bound)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return 0, most, err
		}
	}
}

// checkRepaired checks that each sale holds in Redis the units MySQL holds.
func (st *scaleStack) checkRepaired(ctx context.Context, sales []string) error {
	for _, sale := range sales {
		sold, err := st.rdb.HGet(ctx, st.prefix+":{"+sale+"}:meta", "sold").Int64()
		if err != nil {
			return fmt.Errorf("sale %s: %w", sale, err)
		}
		var units int64
		if err := st.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE sale_id = ?", sale).Scan(&units); err != nil {
			return err
		}
		if sold != units {
			return fmt.Errorf("sale %s: Redis sold %d, MySQL holds %d units after the repair", sale, sold, units)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
