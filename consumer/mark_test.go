package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// The orders of a sale of several buckets are in their buckets' keys (the
// ".i" of their ids): each is marked in its bucket's created set, where
// the view of it looks, and reads queued until the consumer has written it.
func TestMarkBucketOrders(t *testing.T) {
	e := newEnv(t)
	const sale = "bs"
	lanes := []string{"bs#0.0", "bs#1.0"}
	if err := e.rdb.HSet(context.Background(), e.keys.Meta(sale), "buckets", 2, "names", lanes[0]+","+lanes[1]).Err(); err != nil {
		t.Fatal(err)
	}
	os := orderdbtest.Orders(sale, 6)
	for i := range os {
		os[i].OrderID += []string{".0", ".1"}[i%2]
	}
	for i, lane := range lanes {
		e.seedRecords(lane, []order.Order{os[i], os[i+2], os[i+4]})
		e.wantQueued(lane, []order.Order{os[i], os[i+2], os[i+4]})
	}
	e.publish(bodies(t, os)...)
	c, _ := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "six orders written", func() bool { return c.Stats().Inserted == 6 })
	for i, lane := range lanes {
		e.waitMarked(lane, []order.Order{os[i], os[i+2], os[i+4]})
	}
	if n, _ := e.rdb.Exists(context.Background(), e.keys.Created(sale)).Result(); n != 0 {
		t.Errorf("the home of a sale of buckets has a created set: its orders are in the buckets")
	}
}

// A batch that finds markPending ids gathered waits until the marker takes
// them, and is then gathered; one whose wait ends first hands nothing over
// and says how many ids it could not.
func TestMarksWaitForRoom(t *testing.T) {
	m := newMarks()
	full := make([]string, markPending)
	if lost := m.add(context.Background(), map[string][]string{"a": full}, len(full)); lost != 0 {
		t.Fatalf("the first add lost %d", lost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if lost := m.add(ctx, map[string][]string{"b": {"x"}}, 1); lost != 1 {
		t.Fatalf("an add past the bound with its wait over lost %d, want 1", lost)
	}
	done := make(chan int)
	go func() { done <- m.add(context.Background(), map[string][]string{"b": {"y"}}, 1) }()
	select {
	case lost := <-done:
		t.Fatalf("an add past the bound returned (lost %d) before the marker took anything", lost)
	case <-time.After(50 * time.Millisecond):
	}
	if bySale, n, closed := m.take(); n != markPending || len(bySale["a"]) != markPending || closed {
		t.Fatalf("take: %d ids, closed %v", n, closed)
	}
	if lost := <-done; lost != 0 {
		t.Fatalf("the waiting add lost %d once the marker took", lost)
	}
	m.close()
	if bySale, n, closed := m.take(); n != 1 || bySale["b"][0] != "y" || !closed {
		t.Fatalf("take after close: %v, %d, closed %v; want y", bySale, n, closed)
	}
}
