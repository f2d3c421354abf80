package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// A promotion while a waiting room admits and while payments come due
// (DESIGN.md, invariants 8, 11 and 13), in replicated mode, on the Redis
// Cluster of make up-ha: the primary of a room's sale and of a sale with a
// payment window is killed -9 in the middle. The room's crowd (roomCrowd:
// every place given once, admissions in order and never before the clock,
// every poll and buy answered within the contract, a key's replay byte for
// byte) goes through both gateways; payers pay some orders before their
// pay_by and some after. Once settled: no position given twice, no buyer
// over the limit, every 202 once in MySQL; every pay answered 200 is paid
// in MySQL and every pay answered order_expired is expired there, so no
// order was both; no drift between Redis and MySQL.
func TestHAClusterPromotionRoomAndPayments(t *testing.T) {
	h := localstack.HA(t)
	t.Cleanup(func() { h.Heal(t) })
	s := newStack(t, "FLASHGATE_REDIS_MIN_REPLICAS=1", "FLASHGATE_LOG_LEVEL=warn")
	g1, g2 := s.startGateway(nil), s.startGateway(nil)
	gs := []*gatewayProc{g1, g2}
	s.startConsumers(1)

	const n, stock, rate = 300, 200, 40
	room := "har-" + s.id
	start := time.Now().UnixMilli()
	roomSale(t, g1, room, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d}`, stock, rate))
	victim := h.PrimaryOf(t, s.keys.Meta(room))
	// A sale with a payment window on the same primary: the first of a
	// few names whose slot it serves.
	paying := ""
	for i := 0; paying == "" && i < 64; i++ {
		if id := "hap-" + s.id + "-" + strconv.Itoa(i); h.PrimaryOf(t, s.keys.Meta(id)) == victim {
			paying = id
		}
	}
	if paying == "" {
		t.Fatalf("no sale name of 64 lands on %s", victim)
	}
	s.windowSale(g1, paying, 100000, 1, 2)
	t.Logf("victim %s serves %s (room) and %s (payment window 2 s)", victim, room, paying)

	crowd := startRoomCrowd(t, gs, room, start, rate, crowdtest.NewRoomBuyers(n))
	payers := startPayers(t, gs, paying, 8)

	time.Sleep(3 * time.Second)
	killedAt := time.Now()
	h.KillRedis(t, victim)
	localstack.WaitFor(t, 60*time.Second, "the replica promoted", func() bool {
		p := h.PrimaryOf(t, s.keys.Meta(room))
		return p != "" && p != victim
	})
	t.Logf("promoted %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	h.StartRedis(t, victim) // the new primary's replica: replicated mode waits for one

	crowd.Wait()
	time.Sleep(3 * time.Second) // payments on after the room is done
	payers.stop()
	crowd.Check()
	accepted := crowd.Accepted(room)
	if len(accepted) != stock {
		t.Errorf("%d buys of the room's sale accepted, want %d (the stock)", len(accepted), stock)
	}
	s.waitDrained(room, 2*time.Minute)
	s.checkExactlyOnce(room, accepted)
	checkRoomOrders(t, s, room, accepted)
	s.checkNoDrift(room)

	localstack.WaitFor(t, time.Minute, "no order of the paying sale awaiting payment", func() bool {
		var v struct {
			Pending int64 `json:"pending_payment"`
		}
		code, body, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "GET", "http://"+g1.admin+"/admin/v1/sales/"+paying, "")
		return err == nil && code == 200 && json.Unmarshal([]byte(body), &v) == nil && v.Pending == 0
	})
	s.checkNoDrift(paying) // every state in MySQL is Redis's: waits for what is on its way
	states := s.orderStates(paying)
	payers.mu.Lock()
	defer payers.mu.Unlock()
	for id, answer := range payers.paid {
		want := map[string]string{"paid": "paid", "order_expired": "expired"}[answer]
		if got := states[id]; got != want {
			t.Errorf("order %s: pay answered %s, MySQL has it %q", id, answer, got)
		}
	}
	for _, id := range payers.accepted {
		if _, ok := states[id]; !ok {
			t.Errorf("order %s of the paying sale was accepted (202) but is not in MySQL", id)
		}
	}
	t.Logf("paying sale: %d orders accepted, pays answered %v", len(payers.accepted), payers.count)
}

// payers buy a sale with a payment window and pay half of their orders, at
// a random moment up to 3 s after the 202 (a 2 s window: some too late),
// retrying a 503 and a 429 with the same request.
type payers struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	accepted []string
	paid     map[string]string // order id → the pay's final status
	count    map[string]int
}

func startPayers(t *testing.T, gs []*gatewayProc, sale string, workers int) *payers {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	p := &payers{cancel: cancel, paid: map[string]string{}, count: map[string]int{}}
	t.Cleanup(p.stop)
	for w := range workers {
		p.wg.Go(func() {
			c := &http.Client{Timeout: 5 * time.Second}
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := 0; ctx.Err() == nil; i++ {
				g := gs[rng.IntN(len(gs))]
				code, id, _, err := crowdtest.Buy(c, "http://"+g.public, sale, fmt.Sprintf("p%d-%d", w, i))
				if err != nil || code != 202 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				p.mu.Lock()
				p.accepted = append(p.accepted, id)
				p.mu.Unlock()
				if rng.IntN(2) == 0 {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
				p.pay(ctx, c, gs, rng, sale, id)
			}
		})
	}
	return p
}

// pay pays order id until an answer other than 503 and 429, and records it.
func (p *payers) pay(ctx context.Context, c *http.Client, gs []*gatewayProc, rng *rand.Rand, sale, id string) {
	for ctx.Err() == nil {
		g := gs[rng.IntN(len(gs))]
		code, body, err := httpDo(c, "POST", "http://"+g.admin+"/admin/v1/sales/"+sale+"/orders/"+id+"/pay", "")
		if err != nil || code == 503 || code == 429 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		status := statusOf(body)
		if code == 200 {
			status = "paid"
		}
		p.mu.Lock()
		p.paid[id] = status
		p.count[strconv.Itoa(code)+" "+status]++
		p.mu.Unlock()
		return
	}
}

func (p *payers) stop() { p.cancel(); p.wg.Wait() }

// orderStates reads MySQL's state of every order of sale.
func (s *stack) orderStates(sale string) map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for _, r := range s.orders(sale) {
		out[r.OrderID] = r.State
	}
	return out
}
