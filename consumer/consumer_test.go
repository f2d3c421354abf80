package consumer

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/order"
)

func TestWriteOrdersIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := orders("a", 10)
	b := orders("b", 4)
	unitsOf := func(os ...[]order.Order) (u int64) {
		for _, l := range os {
			for _, o := range l {
				u += int64(o.Quantity)
			}
		}
		return u
	}
	more := orders("a", 5)
	tests := []struct {
		name                 string
		batch                []order.Order
		inserted, duplicates int
		rowsA, unitsA, ordsA int64
	}{
		{"new orders", a, 10, 0, 10, unitsOf(a), 10},
		{"the same again", a, 0, 10, 10, unitsOf(a), 10},
		{"half old, half new", append(append([]order.Order{}, a[:5]...), more...), 5, 5, 15, unitsOf(a, more), 15},
		{"repeated inside one batch", []order.Order{a[0], a[0], more[0]}, 0, 3, 15, unitsOf(a, more), 15},
		{"two sales at once", append(append([]order.Order{}, b...), a[9]), 4, 1, 15, unitsOf(a, more), 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := WriteOrders(ctx, e.db, tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			if w.Inserted != tt.inserted || w.Duplicates != tt.duplicates {
				t.Fatalf("wrote %+v, want %d inserted, %d duplicates", w, tt.inserted, tt.duplicates)
			}
			rows, units, lu, lo := e.totals("a")
			if rows != tt.rowsA || units != tt.unitsA || lu != units || lo != rows || lo != tt.ordsA {
				t.Fatalf("sale a: rows %d units %d, ledger %d units %d orders; want rows %d units %d", rows, units, lu, lo, tt.rowsA, tt.unitsA)
			}
		})
	}
	rows, units, lu, lo := e.totals("b")
	if rows != 4 || units != unitsOf(b) || lu != units || lo != 4 {
		t.Fatalf("sale b: rows %d units %d, ledger %d/%d", rows, units, lu, lo)
	}
}

// TestWriteOrdersConcurrent has writers race on overlapping batches, as
// duplicates on the broker and redeliveries make consumers do.
func TestWriteOrdersConcurrent(t *testing.T) {
	e := newEnv(t)
	all := orders("s", 2000)
	var want int64
	for _, o := range all {
		want += int64(o.Quantity)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			mine := append([]order.Order(nil), all...)
			r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for i := 0; i < len(mine); i += 100 {
				for {
					_, err := WriteOrders(context.Background(), e.db, mine[i:i+100])
					if err == nil {
						break
					}
					if !strings.Contains(err.Error(), "Deadlock") {
						errs <- err
						return
					}
					// A deadlock is an ordinary, retried failure.
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows, units, lu, lo := e.totals("s")
	if rows != 2000 || units != want || lu != want || lo != 2000 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 2000 rows, %d units", rows, units, lu, lo, want)
	}
}

func TestConsumerIdempotentAndMarks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	os := orders("s", 3)
	for _, o := range os {
		e.rdb.HSet(ctx, e.keys.Orders("s"), o.OrderID, "q:"+strconv.Itoa(o.Quantity)+":"+o.UserID)
	}
	bs := bodies(t, os)
	e.publish(append(bs, bs...)...) // every message twice
	c, _ := e.startConsumer(nil)
	waitFor(t, 20*time.Second, "six deliveries not handled", func() bool { s := c.Stats(); return s.Inserted+s.Duplicates == 6 })
	rows, units, lu, lo := e.totals("s")
	if rows != 3 || units != 6 || lu != 6 || lo != 3 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 3 rows, 6 units, counted once", rows, units, lu, lo)
	}
	if s := c.Stats(); s.Inserted != 3 || s.Duplicates != 3 {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, 10*time.Second, "orders not marked created", func() bool {
		for _, o := range os {
			if v := e.rdb.HGet(ctx, e.keys.Orders("s"), o.OrderID).Val(); !strings.HasPrefix(v, "c:") {
				return false
			}
		}
		return true
	})
}

func TestPoisonMessageIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	good := orders("s", 4)
	gb := bodies(t, good)
	poison := [][]byte{[]byte("not json"), []byte(`{"order_id":"x"}`)}
	e.publish(gb[0], poison[0], gb[1], poison[1])
	c, _ := e.startConsumer(nil)
	waitFor(t, 20*time.Second, "poison not dead-lettered", func() bool { return c.Stats().DeadLettered == 2 })
	e.publish(gb[2], gb[3]) // and it keeps going
	waitFor(t, 20*time.Second, "good orders not written", func() bool { r, _, _, _ := e.totals("s"); return r == 4 })

	var dead []string
	waitFor(t, 10*time.Second, "dead-letter queue does not hold the poison", func() bool {
		d, ok, err := e.ch.Get(broker.DeadLetter(e.cfg.AMQP.Queue), true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dead = append(dead, string(d.Body))
		}
		return len(dead) == 2
	})
	if dead[0] != string(poison[0]) || dead[1] != string(poison[1]) {
		t.Fatalf("dead-letter queue holds %q", dead)
	}
}

// TestShutdownFinishesBatchInHand cancels a consumer that holds deliveries
// it has not written yet: it must write and acknowledge them before Run
// returns, leaving nothing to redeliver.
func TestShutdownFinishesBatchInHand(t *testing.T) {
	e := newEnv(t)
	cfg := *e.cfg
	cfg.Consumer.BatchSize = 1000
	cfg.Consumer.Prefetch = 1000
	cfg.Consumer.BatchWait = time.Minute // only the shutdown ends this batch
	e.publish(bodies(t, orders("s", 200))...)
	c, stop := e.startConsumer(&cfg)
	waitFor(t, 20*time.Second, "consumer did not take the deliveries", func() bool {
		q, err := e.ch.QueueDeclarePassive(e.cfg.AMQP.Queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && c.Stats().Connected
	})
	if rows, _, _, _ := e.totals("s"); rows != 0 {
		t.Fatalf("%d rows before the batch was due", rows)
	}
	stop()
	if rows, _, _, lo := e.totals("s"); rows != 200 || lo != 200 {
		t.Fatalf("after shutdown: %d rows, ledger %d orders; want 200", rows, lo)
	}
	// Everything was acknowledged: nothing comes back to the queue.
	waitFor(t, 5*time.Second, "queue not empty", func() bool {
		q, err := e.ch.QueueDeclarePassive(e.cfg.AMQP.Queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && q.Consumers == 0
	})
}

// TestDataErrorIsolatesTheOrder makes MySQL refuse one order as data (a
// column too narrow for it): only that one is dead-lettered.
func TestDataErrorIsolatesTheOrder(t *testing.T) {
	e := newEnv(t)
	if _, err := e.db.Exec(`ALTER TABLE orders MODIFY quantity TINYINT NOT NULL`); err != nil {
		t.Fatal(err)
	}
	os := orders("s", 3)
	os[1].Quantity = 200 // out of TINYINT's range
	e.publish(bodies(t, os)...)
	c, _ := e.startConsumer(nil)
	waitFor(t, 20*time.Second, "refused order not dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	waitFor(t, 10*time.Second, "other orders not written", func() bool { r, _, _, _ := e.totals("s"); return r == 2 })
	_, units, lu, _ := e.totals("s")
	if units != int64(os[0].Quantity+os[2].Quantity) || lu != units {
		t.Fatalf("units %d ledger %d", units, lu)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	e := newEnv(t) // migrated once already
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs <- Migrate(ctx, e.db)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var v, n int
	if err := e.db.QueryRow(`SELECT MAX(version), COUNT(*) FROM schema_version`).Scan(&v, &n); err != nil {
		t.Fatal(err)
	}
	if v != SchemaVersion() || n != SchemaVersion() {
		t.Fatalf("schema_version max %d, %d rows; want %d", v, n, SchemaVersion())
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	e := newEnv(t)
	if _, err := e.db.Exec(`INSERT INTO schema_version (version) VALUES (?)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(context.Background(), e.db); !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Migrate = %v, want ErrSchemaNewer", err)
	}
}
