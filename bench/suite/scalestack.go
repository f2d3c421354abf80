package main

// The stack of a shop of many sales (the scale part's, scale.go, and the
// trickle part's, trickle.go): its Redis, database, gateways and consumers,
// and what it asks of them.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// shopShape is what a part's shop stack holds: its name (of the key
// prefix, the logs and the folder), the rows of other sales put in orders
// first, its gateways and its consumers.
type shopShape struct {
	tag                 string
	filler              int
	gateways, consumers int
}

// scaleStack starts a shop of shape sh: a redis-server of its own, a
// scratch database, its gateways and consumers; cleanup undoes what was
// done, in reverse.
func (s *suite) scaleStack(ctx context.Context, sh shopShape) (*scaleStack, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	dir, err := os.MkdirTemp(".run/bench", sh.tag+"-")
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	srv, err := s.startRedis(ctx, localstack.RedisOptions{Dir: dir, Args: aofEverysec})
	if err != nil {
		return nil, cleanup, fmt.Errorf("the suite's redis-server: %w", err)
	}
	st := &scaleStack{s: s, srv: srv, rdb: redis.NewClient(&redis.Options{Addr: srv.Addr}),
		prefix: newPrefix(sh.tag),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	undo = append(undo, func() { st.rdb.Close() })
	dsn, drop, err := s.scratchDB(ctx)
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, drop)
	if st.db, err = sql.Open("mysql", dsn); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { st.db.Close() })
	if err := orderdbtest.Fill(ctx, st.db, sh.filler, 5000); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { s.dropQueue(st.prefix) })
	env := []string{"FLASHGATE_REDIS_ADDRS=" + srv.Addr, "FLASHGATE_MYSQL_DSN=" + dsn,
		"FLASHGATE_AMQP_EXCHANGE=" + st.prefix, "FLASHGATE_AMQP_QUEUE=" + st.prefix}
	for i := range sh.gateways {
		g, err := s.launch(ctx, proc{log: sh.tag + "-gateway-" + strconv.Itoa(i), args: []string{"gateway"}, cpu: cpuAny, prefix: st.prefix, env: env})
		if err != nil {
			return nil, cleanup, err
		}
		st.gateways = append(st.gateways, [2]string{g.Public, g.Admin})
	}
	for i := range sh.consumers {
		if _, err := s.launch(ctx, proc{log: sh.tag + "-consumer-" + strconv.Itoa(i), args: []string{"consumer"}, cpu: cpuAny, prefix: st.prefix, env: env}); err != nil {
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

// createMany creates the sales through every gateway, 16 at a time, each
// with the body (its stock and limit).
func (st *scaleStack) createMany(ctx context.Context, names []string, body string) error {
	next := make(chan int)
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				code, reply, err := st.do("PUT", "http://"+st.gw(i)[1]+"/admin/v1/sales/"+names[i], body)
				if err != nil || code != http.StatusCreated {
					mu.Lock()
					firstErr = cmpErr(firstErr, fmt.Errorf("create %s: %d %s %v", names[i], code, reply, err))
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
