package main

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestMeasureDrainRate measures how fast one consumer, then two, move orders
// from a pre-filled queue into MySQL. It is a measurement, not a test: it
// asserts no speed and runs only when asked:
//
//	FLASHGATE_MEASURE=1 go test -run TestMeasureDrainRate -v ./cmd/flashgate/
//
// FLASHGATE_MEASURE_ORDERS sets the number of orders (default 100000). The
// consumers run the binary built without the race detector, with the
// default settings; run it without -race.
func TestMeasureDrainRate(t *testing.T) {
	if os.Getenv("FLASHGATE_MEASURE") == "" {
		t.Skip("set FLASHGATE_MEASURE=1 to measure the drain rate")
	}
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("FLASHGATE_MEASURE_ORDERS")); err == nil && v > 0 {
		n = v
	}
	if localstack.Race {
		t.Skip("measure without -race: the consumers run the binary the tests build, with the race detector under -race")
	}
	for _, k := range []int{1, 2} {
		t.Run(strconv.Itoa(k)+"consumers", func(t *testing.T) {
			s := newStack(t)
			s.publishOrders("rate", n)
			start := time.Now()
			s.startConsumers(k)
			localstack.WaitFor(t, 20*time.Minute, "all orders in MySQL", func() bool { r, _ := s.count("rate"); return r >= int64(n) })
			wall := time.Since(start)
			var us int64
			if err := s.db.QueryRow(`SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), MAX(created_at)) FROM orders`).Scan(&us); err != nil {
				t.Fatal(err)
			}
			inserting := time.Duration(us) * time.Microsecond
			t.Logf("%d consumer(s), %d orders: %.0f orders/s from first to last insert (%v); %.0f orders/s wall clock including start-up (%v)",
				k, n, float64(n)/inserting.Seconds(), inserting.Round(time.Millisecond), float64(n)/wall.Seconds(), wall.Round(time.Millisecond))
		})
	}
}
