package nemesis

// A sale day: many small sales opening one after the other, a crowd of
// buyers, and for each sale an admin who locks, restocks, and a payment
// system that pays and cancels its orders.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/retry"
)

// DayOptions shape a sale day.
type DayOptions struct {
	Seed uint64
	// Buyers is the number of buyers' goroutines, each sending one request
	// at a time.
	Buyers int
	// Open is how many sales sell at once; each sells for SaleLife, then
	// the next opens.
	Open     int
	SaleLife time.Duration
	// Stale is the gateways' cache.closed_ttl plus a margin (SaleSpec).
	Stale time.Duration
	// Seq, when set, reads a sale's event number from Redis directly (the
	// test's instrument, past every fault): the watcher records it as a
	// Probe with each view.
	Seq func(ctx context.Context, sale string) (int64, error)
}

// DaySale is one sale of the day: its spec, its buyers, the orders its
// 202s named (for pays and cancels).
type DaySale struct {
	Spec   SaleSpec
	Users  []string
	Window int // payment_window, seconds (0: none)

	mu     sync.Mutex
	orders []string
}

func (s *DaySale) addOrder(id string) {
	s.mu.Lock()
	s.orders = append(s.orders, id)
	s.mu.Unlock()
}

func (s *DaySale) pickOrder(rng *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.orders) == 0 {
		return ""
	}
	return s.orders[rng.IntN(len(s.orders))]
}

// Day runs a sale day against a Stack, recording into a Client's history.
type Day struct {
	o      DayOptions
	stack  *Stack
	client *Client
	run    string // a prefix that names this run's sales

	mu    sync.Mutex
	sales []*DaySale // every sale opened, in order
	open  []*DaySale // those selling now
}

// NewDay is a day of o on stack; its sales are named with prefix run.
func NewDay(o DayOptions, stack *Stack, client *Client, run string) *Day {
	return &Day{o: o, stack: stack, client: client, run: run}
}

// Sales is every sale the day opened.
func (d *Day) Sales() []*DaySale {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sales)
}

// Run runs the day until ctx is done, then lets every admin finish (a
// locked sale is unlocked) and returns. It blocks.
func (d *Day) Run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(d.o.Seed, 1))
	var wg sync.WaitGroup
	for i := range d.o.Buyers {
		brng := rand.New(rand.NewPCG(d.o.Seed, uint64(100+i)))
		wg.Go(func() { d.buyer(ctx, i, brng) })
	}
	var admins sync.WaitGroup
	defer admins.Wait()
	defer wg.Wait()
	n := 0
	for ctx.Err() == nil {
		d.mu.Lock()
		open := len(d.open)
		d.mu.Unlock()
		if open >= d.o.Open {
			if !retry.Sleep(ctx, 100*time.Millisecond) {
				break
			}
			continue
		}
		n++
		s, err := d.openSale(ctx, rng, n)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		arng := rand.New(rand.NewPCG(d.o.Seed, uint64(10_000+n)))
		client := d.o.Buyers + n
		admins.Go(func() { d.admin(ctx, s, client, arng) })
	}
	return nil
}

// openSale creates the n-th sale: 5–30 units, a limit of 1–3, 10–40
// buyers, half of them with a payment window of 2–4 s. The creation is
// retried until it is answered, since a fault may be in the way; it is not
// part of the history (the model starts from the created sale).
func (d *Day) openSale(ctx context.Context, rng *rand.Rand, n int) (*DaySale, error) {
	stock := 5 + rng.IntN(26)
	limit := 1 + rng.IntN(3)
	users := 10 + rng.IntN(31)
	window := 0
	if rng.IntN(2) == 0 {
		window = 2 + rng.IntN(3)
	}
	id := fmt.Sprintf("%s-%d", d.run, n)
	s := &DaySale{Spec: SaleSpec{ID: id, Stock: stock, Limit: limit, Window: window > 0, Stale: int64(d.o.Stale), Skew: int64(skew)},
		Window: window}
	for u := range users {
		s.Users = append(s.Users, fmt.Sprintf("u%d", u))
	}
	st, lim, win := int64(stock), int64(limit), int64(window)
	tries := 0
	err := retryUntil(ctx, 2*time.Minute, func(ctx context.Context) error {
		tries++
		gw := d.stack.Gateways[rng.IntN(len(d.stack.Gateways))]
		c, err := admin.New(admin.ListenerURL(gw.Admin), "")
		if err != nil {
			return err
		}
		defer c.CloseIdleConnections()
		_, err = c.Upsert(ctx, id, admin.SaleUpdate{Stock: &st, Limit: &lim, PaymentWindow: &win})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create sale %s: %w", id, err)
	}
	if tries > 1 {
		// A PUT without an answer may land later and set the stock back:
		// let it land before the sale sells and restocks.
		retry.Sleep(ctx, staleAdmin)
	}
	d.mu.Lock()
	d.sales = append(d.sales, s)
	d.open = append(d.open, s)
	d.mu.Unlock()
	return s, nil
}

// skew is the clock skew the model tolerates between the test and Redis,
// both on this machine.
const skew = 20 * time.Millisecond

// buyer sends buys until ctx is done, one every 30–150 ms (a crowd large
// enough to sell out small sales, small enough that each sale's history
// stays checkable in seconds): a random buyer of a random open sale, 1–3
// units, half of them with an Idempotency-Key (retried with the
// same key after an ambiguous answer, and one in ten sent twice at once, a
// double click).
func (d *Day) buyer(ctx context.Context, client int, rng *rand.Rand) {
	n := 0
	for retry.Sleep(ctx, time.Duration(30+rng.IntN(120))*time.Millisecond) {
		d.mu.Lock()
		if len(d.open) == 0 {
			d.mu.Unlock()
			continue
		}
		s := d.open[rng.IntN(len(d.open))]
		d.mu.Unlock()
		user := s.Users[rng.IntN(len(s.Users))]
		qty := 1 + rng.IntN(3)
		gw := func() *Proc { return d.stack.Gateways[rng.IntN(len(d.stack.Gateways))] }
		if rng.IntN(2) == 0 {
			d.buyUnkeyed(ctx, client, gw(), s, user, qty)
			continue
		}
		n++
		key := fmt.Sprintf("b%d-%d", client, n)
		if rng.IntN(10) == 0 {
			var wg sync.WaitGroup
			for _, g := range []*Proc{gw(), gw()} {
				wg.Go(func() { d.buyKeyed(ctx, client, g, s, user, qty, key) })
			}
			wg.Wait()
			continue
		}
		for range 4 {
			if !d.buyKeyed(ctx, client, gw(), s, user, qty, key) || !retry.Sleep(ctx, 200*time.Millisecond) {
				break
			}
		}
	}
}

func (d *Day) buyUnkeyed(ctx context.Context, client int, gw *Proc, s *DaySale, user string, qty int) {
	rec := d.client.Buy(ctx, client, gw, s.Spec.ID, user, qty, "")
	if !rec.Ambiguous && rec.Out.Code == 202 {
		s.addOrder(rec.Out.Order)
	}
}

// buyKeyed sends one keyed buy and reports whether it had no definite
// answer (a retry is due).
func (d *Day) buyKeyed(ctx context.Context, client int, gw *Proc, s *DaySale, user string, qty int, key string) bool {
	rec := d.client.Buy(ctx, client, gw, s.Spec.ID, user, qty, key)
	if !rec.Ambiguous && rec.Out.Code == 202 {
		s.addOrder(rec.Out.Order)
	}
	return rec.Ambiguous
}

// admin drives one sale for its life, then ends it unlocked: every
// 0.2–1 s a lock (held, then unlocked), a restock (at most three, of 1, 2
// and 4 units: the stock added tells which happened), a read of the admin
// view, a pay or a cancel of one of its orders.
func (d *Day) admin(ctx context.Context, s *DaySale, client int, rng *rand.Rand) {
	life, cancel := context.WithTimeout(ctx, d.o.SaleLife)
	defer cancel()
	var watch sync.WaitGroup
	wrng := rand.New(rand.NewPCG(d.o.Seed, uint64(client)<<20))
	watch.Go(func() { d.watch(life, s, client+1_000_000, wrng) })
	defer func() {
		// The sale closes to buyers (the next one opens) while its last
		// orders run out their payment window under the watcher's eye.
		d.mu.Lock()
		d.open = slices.DeleteFunc(d.open, func(o *DaySale) bool { return o == s })
		d.mu.Unlock()
		watch.Wait()
	}()
	restocks := 0
	gw := func() *Proc { return d.stack.Gateways[rng.IntN(len(d.stack.Gateways))] }
	for retry.Sleep(life, time.Duration(200+rng.IntN(800))*time.Millisecond) {
		switch r := rng.IntN(20); {
		case r < 3:
			if !d.sureSale(s, client, KindLock, gw) {
				return
			}
			retry.Sleep(life, time.Duration(200+rng.IntN(600))*time.Millisecond)
			if !d.sureSale(s, client, KindUnlock, gw) {
				return
			}
		case r < 5 && restocks < 3:
			rec := d.client.Sale(life, client, gw(), KindRestock, s.Spec.ID, 1<<restocks)
			restocks++
			d.client.History.Add(rec)
			if rec.Ambiguous {
				// A call without an answer may still land later: give it
				// time to land before the sale's next admin change.
				retry.Sleep(life, staleAdmin)
			}
		case r < 6:
			d.client.View(life, client, gw(), s.Spec.ID)
		default:
			kind := KindPay
			if rng.IntN(3) == 0 {
				kind = KindCancel
			}
			if id := s.pickOrder(rng); id != "" {
				d.client.Order(life, client, gw(), kind, s.Spec.ID, id)
			}
		}
	}
}

// watch reads the sale's admin view every 0.3–0.6 s for its life, then
// until no order of it awaits payment (up to 15 s more): each view pins the
// expiries it shows, which the checker would otherwise have to try at
// every later point of the history.
func (d *Day) watch(life context.Context, s *DaySale, client int, rng *rand.Rand) {
	gw := func() *Proc { return d.stack.Gateways[rng.IntN(len(d.stack.Gateways))] }
	for retry.Sleep(life, time.Duration(300+rng.IntN(300))*time.Millisecond) {
		d.client.View(life, client, gw(), s.Spec.ID)
		d.probe(life, s)
	}
	if s.Window == 0 {
		return
	}
	after, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for retry.Sleep(after, time.Duration(300+rng.IntN(300))*time.Millisecond) {
		rec := d.client.View(after, client, gw(), s.Spec.ID)
		d.probe(after, s)
		if !rec.Ambiguous && rec.Out.Code == 200 && rec.Out.View.Pending == 0 {
			return
		}
	}
}

// probe reads the sale's event number, when the day can (DayOptions.Seq).
func (d *Day) probe(ctx context.Context, s *DaySale) {
	if d.o.Seq == nil {
		return
	}
	h := d.client.History
	call := h.Now()
	seq, err := d.o.Seq(ctx, s.Spec.ID)
	if err == nil {
		d.client.History.AddProbe(Probe{Sale: s.Spec.ID, Seq: seq, Call: call, Return: h.Now()})
	}
}

// staleAdmin is how long an admin call without an answer is given to land
// before the sale's next admin change: longer than the worst delay a
// fault puts on a request (requestTimeout, with the toxics' latency).
const staleAdmin = 4 * time.Second

// sureSale locks or unlocks (kind) the sale, retrying until an answer
// comes, for up to two minutes whatever the day's context says (a locked
// sale must end unlocked), and records the attempts as one operation: the
// change happened between the first call and the answer. It reports
// whether an answer came.
func (d *Day) sureSale(s *DaySale, client int, kind string, gw func() *Proc) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var first *Record
	for {
		rec := d.client.Sale(ctx, client, gw(), kind, s.Spec.ID, 0)
		if first == nil {
			first = &rec
		}
		if !rec.Ambiguous {
			rec.In.Call = first.In.Call
			d.client.History.Add(rec)
			if first != &rec && first.Ambiguous {
				retry.Sleep(ctx, staleAdmin)
			}
			return true
		}
		if !retry.Sleep(ctx, 300*time.Millisecond) {
			rec.In.Call = first.In.Call
			d.client.History.Add(rec)
			return false
		}
	}
}

// retryUntil calls f until it succeeds, every 300 ms, for up to wait.
func retryUntil(ctx context.Context, wait time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var err error
	for {
		cctx, ccancel := context.WithTimeout(ctx, requestTimeout)
		err = f(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		if !retry.Sleep(ctx, 300*time.Millisecond) {
			return errors.Join(err, ctx.Err())
		}
	}
}
