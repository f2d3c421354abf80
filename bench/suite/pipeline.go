package main

// The pipeline part: orders from the outbox to the last MySQL row, and from
// a pre-filled queue to the last row, with 1, 2 and 4 consumers, against the
// broker's own publish-with-confirms and consume rates.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// drainConsumers are the consumer counts the drain measurements compare.
var drainConsumers = []int{1, 2, 4}

// measurePipeline times orders from the outbox to the last MySQL row, and
// from a pre-filled queue to the last row, with 1, 2 and 4 consumers
// (-drain-runs rounds, each round every count once, so that a change in the
// machine's load falls on all of them; medians reported), and the broker's
// own publish-with-confirms and consume rates on the same broker.
func (s *suite) measurePipeline(ctx context.Context) error {
	orders, rounds := s.o.orders, max(s.o.drainRuns, 1)
	dsn, drop, err := s.scratchDB(ctx)
	if err != nil {
		return err
	}
	defer drop()
	if release, err := holdServices(ctx); err != nil {
		s.notes = append(s.notes, "consumer drains measured without the fault lock: "+err.Error())
	} else {
		defer release()
	}

	// runs[prefilled][consumers] are the rates of every round, in order.
	// Each run sells a sale of its own, and no row is deleted between
	// runs: a DELETE's purge would run into the next measurement.
	runs := map[bool]map[int][]float64{false: {}, true: {}}
	for r := range rounds {
		for _, consumers := range drainConsumers {
			for _, prefilled := range []bool{false, true} {
				sale := fmt.Sprintf("pipe-%d-%d-%t", r, consumers, prefilled)
				rate, err := s.drain(ctx, dsn, sale, consumers, orders, prefilled)
				if err != nil {
					return err
				}
				runs[prefilled][consumers] = append(runs[prefilled][consumers], rate)
			}
		}
	}
	const groupOutbox = "pipeline, 202 → MySQL row"
	rates := map[int]*row{}
	var detail []string
	for _, prefilled := range []bool{false, true} {
		var first *row
		for _, consumers := range drainConsumers {
			rs := runs[prefilled][consumers]
			r := row{group: groupOutbox, name: fmt.Sprintf("%d consumer(s): orders/s from the outbox to MySQL rows", consumers),
				value: medianOf(rs), unit: "orders/s", baseline: first}
			what := "outbox"
			if prefilled {
				r.group, what = "consumers, pre-filled queue → MySQL row", "pre-filled queue"
				r.name = fmt.Sprintf("%d consumer(s): orders/s from a pre-filled queue to MySQL rows", consumers)
				if first != nil {
					// The consumers' own target: more of them never
					// drain slower than one.
					r.target = 1
				}
			}
			added := s.add(r)
			if first == nil {
				first = added
			}
			if !prefilled {
				rates[consumers] = added
			}
			detail = append(detail, fmt.Sprintf("%s %d: %s", what, consumers, eachRun(rs, "%.0f")))
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("Consumer drains, %d orders each: every figure is the median of %d runs (orders/s, in the order run: %s). "+
		"From the outbox, the relay and the consumers run at once, so the relay's publishing bounds the figure; from a pre-filled queue the relay "+
		"has published everything and stopped, and the clock runs from the moment RabbitMQ has every consumer subscribed to the last row.",
		orders, rounds, strings.Join(detail, "; ")))

	pub, con, err := bench.BrokerRates(ctx, s.svc.amqp, orders, 1024)
	if err != nil {
		return fmt.Errorf("broker rates: %w", err)
	}
	pubRow := s.add(row{group: groupOutbox, name: "RabbitMQ alone: publish with confirms", value: pub, unit: "msg/s"})
	s.add(row{group: groupOutbox, name: "RabbitMQ alone: consume with acks", value: con, unit: "msg/s"})
	s.add(row{group: groupOutbox, name: "2 consumer(s) vs the broker's publish rate", value: rates[2].value, unit: "orders/s",
		baseline: pubRow, target: 0.5})
	return nil
}

// drain measures the pipeline downstream of the 202 with consumers
// consumers: a gateway whose relay cannot reach RabbitMQ sells orders of
// sale, which wait in the outbox; then a gateway with a working relay
// starts. From the outbox (prefilled false), the consumers run from the
// start, and the time from the relay's start to the last row in MySQL
// gives orders per second: relay and consumers together. From a pre-filled
// queue (prefilled true), the relay publishes the whole outbox first and
// stops; then the consumers start, and the rows written between the moment
// RabbitMQ has them all subscribed and the last row give the consumers'
// own rate. Relay and consumers run on every CPU, as `make run` starts
// them, not on the load's CPU, which they would inherit.
func (s *suite) drain(ctx context.Context, dsn, sale string, consumers, orders int, prefilled bool) (float64, error) {
	prefix := newPrefix("pipe")
	defer s.dropPrefix(prefix)
	defer s.dropQueue(prefix)
	env := []string{"FLASHGATE_MYSQL_DSN=" + dsn, "FLASHGATE_AMQP_EXCHANGE=" + prefix, "FLASHGATE_AMQP_QUEUE=" + prefix}
	mode := "outbox"
	if prefilled {
		mode = "queue"
	}
	logName := fmt.Sprintf("pipeline-%s-%d", mode, consumers)

	seller, err := s.launch(ctx, proc{log: logName + "-seller", args: []string{"gateway"}, cpu: cpuAny, prefix: prefix,
		env: append(slices.Clone(env), "FLASHGATE_AMQP_URL="+s.svc.noBroker)})
	var rep *bench.Report
	if err == nil {
		g := newGateway(seller)
		rep, err = bench.Run(ctx, bench.Options{URL: g.public, AdminURL: g.admin, NoMySQL: true, NoKeys: true,
			Sale: sale, Stock: int64(orders), Users: orders * 2, Conns: s.o.conns, UntilSoldOut: true, MaxDuration: 2 * time.Minute})
		seller.Stop()
	}
	if err != nil {
		return 0, err
	}
	if rep.Err() != nil || rep.Figures.AcceptedOrders != int64(orders) {
		return 0, fmt.Errorf("selling %d orders: %d accepted, %v", orders, rep.Figures.AcceptedOrders, rep.Err())
	}

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// The consumers, started by launch, stop when drain returns.
	var cons []*localstack.Process
	defer func() {
		for _, c := range cons {
			c.Stop()
		}
	}()
	launch := func() error {
		for i := range consumers {
			c, err := s.launch(ctx, proc{log: fmt.Sprintf("%s-consumer-%d", logName, i), args: []string{"consumer"}, cpu: cpuEvery, prefix: prefix, env: env})
			if err != nil {
				return err
			}
			cons = append(cons, c)
		}
		return nil
	}
	deadline := time.Now().Add(3 * time.Minute)
	if !prefilled {
		if err := launch(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	// Not waited for: the clock runs from the relay's start.
	relay, err := s.launch(ctx, proc{log: logName + "-relay", args: []string{"gateway"}, cpu: cpuEvery, prefix: prefix, env: env, unready: true})
	if err != nil {
		return 0, err
	}
	defer relay.Stop()
	var startRows int64
	if prefilled {
		if err := waitOutboxEmpty(ctx, "http://"+relay.Admin, sale, deadline); err != nil {
			return 0, err
		}
		relay.Stop()
		if err := launch(); err != nil {
			return 0, err
		}
		// The clock starts once RabbitMQ has every consumer subscribed;
		// what the first ones wrote before does not count.
		if start, err = waitSubscribed(ctx, s.svc.amqp, prefix, consumers, deadline); err != nil {
			return 0, err
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE sale_id = ?", sale).Scan(&startRows); err != nil {
			return 0, err
		}
		if startRows >= int64(orders)*9/10 {
			return 0, fmt.Errorf("%d of %d orders written before %d consumers were subscribed: too few orders to measure (-orders)", startRows, orders, consumers)
		}
	}
	for {
		var rows, units int64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE sale_id = ?", sale).Scan(&rows, &units); err != nil {
			return 0, err
		}
		if rows == int64(orders) && units == int64(orders) {
			return float64(int64(orders)-startRows) / time.Since(start).Seconds(), nil
		}
		if rows > int64(orders) {
			return 0, fmt.Errorf("%d rows for %d orders", rows, orders)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d orders in MySQL after 3 minutes", rows, orders)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOutboxEmpty waits until the sale's outbox is empty: the relay has
// published every order with confirms.
func waitOutboxEmpty(ctx context.Context, adminURL, sale string, deadline time.Time) error {
	c, err := adminapi.New(adminURL, "")
	if err != nil {
		return err
	}
	for {
		v, err := c.Sale(ctx, sale)
		if err == nil && v.OutboxPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay did not empty the outbox in time (last: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSubscribed waits until queue has n consumers and returns when it saw
// them.
func waitSubscribed(ctx context.Context, url, queue string, n int, deadline time.Time) (time.Time, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	for ctx.Err() == nil {
		ch, err := conn.Channel()
		if err != nil {
			return time.Time{}, err
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		ch.Close()
		if err != nil {
			return time.Time{}, fmt.Errorf("queue %s: %w", queue, err)
		}
		if q.Consumers >= n {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d consumers subscribed to %s in time", q.Consumers, n, queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, ctx.Err()
}
