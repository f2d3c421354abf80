package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// The consumers under faults: a pre-filled queue drained into MySQL while
// a consumer is killed or stopped, or MariaDB restarts.

// drainThrough publishes n orders of sale, starts consumers, and calls
// fault once at least at orders are in MySQL; then it waits until all n
// are, and checks that MySQL holds each once, ledger included.
func (s *stack) drainThrough(sale string, n, consumers, at int, fault func(ps []*proc)) {
	s.t.Helper()
	want := s.publishOrders(sale, n)
	ps := s.startConsumers(consumers)
	localstack.WaitFor(s.t, 2*time.Minute, fmt.Sprintf("%d of %d orders in MySQL", at, n), func() bool { r, _ := s.count(sale); return r >= int64(at) })
	fault(ps)
	r, _ := s.count(sale)
	s.t.Logf("%d of %d rows written at the fault", r, n)
	localstack.WaitFor(s.t, 3*time.Minute, "all orders in MySQL", func() bool { r, _ := s.count(sale); return r >= int64(n) })
	s.checkRows(sale, want)
}

// TestConsumerKill9 guards invariant 6: "a crash (kill -9) of any ...
// consumer ... loses no confirmed order and duplicates none". One of three
// consumer processes dies (SIGKILL) with deliveries in hand, a fifth into
// the drain; the others finish: nothing lost, nothing doubled.
func TestConsumerKill9(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	s.drainThrough("k9", 30000, 3, 6000, func(ps []*proc) { ps[1].kill9(t) })
}

// TestConsumerMariaDBRestart guards invariant 6: "a restart of ... MySQL
// loses no confirmed order and duplicates none". MariaDB restarts a fifth
// into the drain by two consumers: they retry without acknowledging, and
// finish once it is back.
func TestConsumerMariaDBRestart(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	s.drainThrough("mdb", 30000, 2, 6000, func([]*proc) { localstack.Control(t, "restart", "mariadb") })
}

// TestConsumerSIGTERM guards invariant 3 ("every 202 becomes exactly one
// MySQL row") across a clean stop: the one consumer, stopped with SIGTERM
// a tenth into the drain, exits 0 within its shutdown deadline, having
// committed and acknowledged what it held; a second consumer finishes, and
// every order is in MySQL once.
func TestConsumerSIGTERM(t *testing.T) {
	s := newStack(t, "FLASHGATE_CONSUMER_BATCH_SIZE=100", "FLASHGATE_CONSUMER_PREFETCH=200")
	s.drainThrough("term", 20000, 1, 2000, func(ps []*proc) {
		ps[0].signal(t, syscall.SIGTERM)
		if code := ps[0].waitExit(t, s.cfg.Shutdown.Timeout+10*time.Second); code != 0 {
			t.Fatalf("consumer exit after SIGTERM: %v\n%s", ps[0].err, ps[0].out)
		}
		s.startConsumers(1)
	})
}
