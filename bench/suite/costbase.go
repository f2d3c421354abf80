package main

// The cost part's baselines (cost.go): what the same kind of work costs
// each server when nothing else is in the way, measured after each sale.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/flashgate/flashgate/bench"
)

// costBaselines measures the bare handler after a run's sale, placed as
// its gateway was: as fast as it answers, and at the sale's request rate.
func (s *suite) costBaselines(ctx context.Context, r *costRun) error {
	var err error
	if r.bare, r.bareClient, err = s.costBare(ctx, 0, r.place.server); err != nil {
		return fmt.Errorf("bare handler: %w", err)
	}
	if r.bareAtRate, _, err = s.costBare(ctx, r.loadRate, r.place.server); err != nil {
		return fmt.Errorf("bare handler at the sale's rate: %w", err)
	}
	return nil
}

// costShared measures the shared servers' baselines of one round.
func (s *suite) costShared(ctx context.Context, b *sharedBase) error {
	var err error
	if b.broker, b.brokerPub, err = s.costBroker(ctx); err != nil {
		return fmt.Errorf("RabbitMQ alone: %w", err)
	}
	if b.mariadb, err = s.costMariaDB(ctx); err != nil {
		return fmt.Errorf("MariaDB alone: %w", err)
	}
	if b.lean, err = s.costLean(ctx); err != nil {
		return fmt.Errorf("lean reserve script: %w", err)
	}
	return nil
}

// costBareDur is how long each bare baseline of the cost part loads the
// handler: -duration, at most 3 s (a few hundred thousand requests
// closed loop, a hundred thousand at a sale's pace: the clock tick is
// well under 1% of either).
func costBareDur(dur time.Duration) time.Duration { return min(dur, 3*time.Second) }

// costBare is the bare fasthttp handler's CPU per request, and the load
// client's against it, on cpu as the sale's gateway was: as fast as it
// answers (rate 0, closed loop), or at rate requests/s on a fixed schedule,
// the sale's own pace. At a sale's pace a server idles between requests
// and pays a wake-up per request (epoll, the scheduler, the reply's
// write waking an idle client), which a server kept busy shares among many:
// the same handler then costs twice or more per request.
func (s *suite) costBare(ctx context.Context, rate float64, cpu string) (server, client float64, err error) {
	p, url, err := s.startBare(ctx, "accepted", cpu, "cost-bare")
	if err != nil {
		return 0, 0, err
	}
	defer p.Stop()
	procs := []cpuProc{{"bare", p.Pid()}, {procClient, os.Getpid()}}
	before, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	rep, err := bench.Run(ctx, bench.Options{URL: url, Raw: true, Conns: s.o.conns, Duration: costBareDur(s.o.dur),
		Users: 1_000_000_000, Stock: 1, NoKeys: true, Rate: rate})
	if err != nil {
		return 0, 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	return perUnit(before, after, "bare", rep.Requests), perUnit(before, after, procClient, rep.Requests), nil
}

// costBroker is RabbitMQ's CPU per message of bench.BrokerRates (persistent
// messages of an order's size to a fresh quorum queue, as the relay's:
// published with confirms, then consumed with acks), and its publish rate.
func (s *suite) costBroker(ctx context.Context) (perMsg, publish float64, err error) {
	procs, err := s.stackProcs()
	if err != nil {
		return 0, 0, err
	}
	procs = named(procs, procRabbit)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	publish, _, err = bench.BrokerRates(ctx, s.svc.amqp, brokerMessages, brokerWindow)
	if err != nil {
		return 0, 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, 0, err
	}
	return perUnit(before, after, procRabbit, brokerMessages), publish, nil
}

// costMariaDB is MariaDB's CPU per row of multi-row INSERTs of mariaBatch
// orders (each its own transaction) into flashgate's orders table, in a
// scratch database, from mariaConns connections.
func (s *suite) costMariaDB(ctx context.Context) (float64, error) {
	dsn, drop, err := s.scratchDB(ctx)
	if err != nil {
		return 0, err
	}
	defer drop()
	// Values in the statement's text: one round trip per INSERT, no
	// prepare and close around it.
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return 0, err
	}
	dc.InterpolateParams = true
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(mariaConns)
	db.SetMaxIdleConns(mariaConns)
	if err := db.PingContext(ctx); err != nil {
		return 0, err
	}
	query := "INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at, state, pay_by) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,?),", mariaBatch), ",")
	procs, err := s.stackProcs()
	if err != nil {
		return 0, err
	}
	procs = named(procs, procMariaDB)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	batches := (mariaRows + mariaBatch - 1) / mariaBatch
	var (
		next  atomic.Int64
		conns errgroup.Group // the first error of any connection
	)
	at := time.Now().UTC().Truncate(time.Millisecond)
	for range mariaConns {
		conns.Go(func() error {
			args := make([]any, 0, 7*mariaBatch)
			for {
				i := int(next.Add(1) - 1)
				if i >= batches {
					return nil
				}
				args = args[:0]
				for j := range mariaBatch {
					n := i*mariaBatch + j
					args = append(args, fmt.Sprintf("%028x", n), "costrows", fmt.Sprintf("u%010d-%05d", n, n%100000), 1, at, "confirmed", nil)
				}
				if _, err := db.ExecContext(ctx, query, args...); err != nil {
					return err
				}
			}
		})
	}
	if err := conns.Wait(); err != nil {
		return 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	rows := int64(batches * mariaBatch)
	var got int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&got); err != nil {
		return 0, err
	}
	if got != rows {
		return 0, fmt.Errorf("%d rows inserted of %d", got, rows)
	}
	return perUnit(before, after, procMariaDB, rows), nil
}

// leanScript is the least a reservation must do in Redis, batched: check
// the stock, count the unit against the buyer's limit, record the order,
// and count the units sold once per call. redis.calls per call: 2 + 2 per
// reservation (the real reserve script makes about six per reservation).
//
// KEYS[1] meta hash (stock, sold, limit), KEYS[2] users hash, KEYS[3]
// orders hash; ARGV[1] now (ms), then order id and user id per
// reservation of one unit. Returns a code per reservation: 0 accepted,
// 5 limit reached, 6 sold out (scripts/codes.go's values).
const leanScript = `
local m = redis.call('HMGET', KEYS[1], 'stock', 'sold', 'limit')
local left = (tonumber(m[1]) or 0) - (tonumber(m[2]) or 0)
local limit = tonumber(m[3]) or 0
local now = ARGV[1]
local n = 0
local out = {}
for i = 2, #ARGV, 2 do
  local oid, user = ARGV[i], ARGV[i + 1]
  if left <= 0 then
    out[#out + 1] = 6
  elseif redis.call('HINCRBY', KEYS[2], user, 1) > limit then
    redis.call('HINCRBY', KEYS[2], user, -1)
    out[#out + 1] = 5
  else
    left = left - 1
    n = n + 1
    redis.call('HSET', KEYS[3], oid, 'q:C:0:' .. now .. ':1:' .. user)
    out[#out + 1] = 0
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'sold', n)
end
return out
`

// costLean is Redis's CPU per reservation of leanScript, leanPerCall
// reservations per call, from leanConns connections, on keys of its own.
func (s *suite) costLean(ctx context.Context) (float64, error) {
	rdb := redis.NewClient(&redis.Options{Addr: s.svc.redis, PoolSize: leanConns})
	defer rdb.Close()
	var b [6]byte
	rand.Read(b[:])
	tag := "{costlean" + hex.EncodeToString(b[:]) + "}"
	keys := []string{tag + ":meta", tag + ":users", tag + ":orders"}
	defer rdb.Unlink(context.WithoutCancel(ctx), keys...)
	total := int64(leanPerCall * leanCalls)
	if err := rdb.HSet(ctx, keys[0], "stock", total, "sold", 0, "limit", 1).Err(); err != nil {
		return 0, err
	}
	sha, err := rdb.ScriptLoad(ctx, leanScript).Result()
	if err != nil {
		return 0, err
	}
	procs, err := s.stackProcs()
	if err != nil {
		return 0, err
	}
	procs = named(procs, procRedis)
	before, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var (
		next  atomic.Int64
		conns errgroup.Group // the first error of any connection
	)
	for range leanConns {
		conns.Go(func() error {
			args := make([]any, 1+2*leanPerCall)
			args[0] = now
			for {
				c := next.Add(1) - 1
				if c >= leanCalls {
					return nil
				}
				for j := range leanPerCall {
					n := c*leanPerCall + int64(j)
					args[1+2*j], args[2+2*j] = fmt.Sprintf("%028x", n), fmt.Sprintf("u%010d-%05d", n, n%100000)
				}
				codes, err := rdb.EvalSha(ctx, sha, keys, args...).Int64Slice()
				if err == nil && slices.ContainsFunc(codes, func(c int64) bool { return c != 0 }) {
					err = fmt.Errorf("a reservation was refused: %v", codes)
				}
				if err != nil {
					return err
				}
			}
		})
	}
	if err := conns.Wait(); err != nil {
		return 0, err
	}
	after, err := cpuOf(procs)
	if err != nil {
		return 0, err
	}
	sold, err := rdb.HGet(ctx, keys[0], "sold").Int64()
	if err != nil {
		return 0, err
	}
	if sold != total {
		return 0, fmt.Errorf("sold %d of %d", sold, total)
	}
	return perUnit(before, after, procRedis, total), nil
}
