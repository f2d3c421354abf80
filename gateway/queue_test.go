package gateway

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale"
)

// The waiting room (API.md "Waiting room", DESIGN.md invariant 11) against
// the real Redis of `make up` (or the cluster of `make test-cluster`).

func (g *testGateway) join(sale, user string) response {
	return g.do("POST", g.base+"/v1/sales/"+sale+"/queue", `{"user_id":"`+user+`"}`, nil)
}

func (g *testGateway) poll(sale, ticket string) response {
	return g.do("GET", g.base+"/v1/sales/"+sale+"/queue", "", map[string]string{ticketHeader: ticket})
}

func (g *testGateway) buyWith(sale, user, ticket string) response {
	return g.do("POST", g.base+"/v1/sales/"+sale+"/orders", `{"user_id":"`+user+`"}`, map[string]string{ticketHeader: ticket})
}

// shareRedis makes a second gateway on the first one's keys.
func shareRedis(a *testGateway) gwOption {
	return func(c *config.Config) { c.Redis.KeyPrefix = a.cfg.Redis.KeyPrefix }
}

// startsIn is a starts_at d from now, as the admin API takes it.
func startsIn(d time.Duration) string {
	return time.Now().Add(d).UTC().Format(time.RFC3339Nano)
}

// fifo: places follow the joins, a second join and a second gateway find
// the same place, nobody buys without an admitted ticket of their own, the
// admissions are a prefix of the places, and the units go to the first
// places.
func TestRoomFIFO(t *testing.T) {
	// A buyer joins at a, polls at b and buys at c.
	a := startGateway(t)
	b := startGateway(t, shareRedis(a))
	c := startGateway(t, shareRedis(a))
	const n = 6
	a.mustSale("wr", `{"stock":2,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":4,"starts_at":"`+startsIn(1500*time.Millisecond)+`"}`)
	tickets := make([]string, n)
	for i := range n {
		r := a.join("wr", "u"+itoa(i))
		if r.code != 200 || r.status() != "waiting" || r.num("position") != int64(i+1) || r.num("ahead") != int64(i) ||
			r.body["pass_until"] != nil || r.num("poll_after_ms") < sale.MinPollAfter || r.num("poll_after_ms") > sale.MaxPollAfter {
			t.Fatalf("join %d: %d %s", i, r.code, r.raw)
		}
		tickets[i] = r.str("ticket")
	}
	// Joining again, at either gateway, is the same place.
	for _, g := range []*testGateway{a, b} {
		if r := g.join("wr", "u3"); r.code != 200 || r.num("position") != 4 {
			t.Fatalf("second join of u3: %d %s", r.code, r.raw)
		}
	}
	if v := a.view("wr"); v.str("waiting_room") != "fifo" || v.num("joined") != n || v.num("admitted") != 0 ||
		v.num("admit_per_second") != 4 || v.num("pass_seconds") != 120 {
		t.Fatalf("admin view: %s", v.raw)
	}
	if v := a.do("GET", a.base+"/v1/sales/wr", "", nil); v.str("waiting_room") != "fifo" {
		t.Fatalf("public view: %s", v.raw)
	}
	other := startsIn(time.Hour)
	a.mustSale("wr2", `{"stock":2,"waiting_room":"fifo","starts_at":"`+other+`"}`)
	foreign := a.join("wr2", "u0").str("ticket")
	forged := []byte(tickets[0])
	forged[len(forged)/2] ^= 1
	for name, tk := range map[string]string{"none": "", "forged": string(forged), "another buyer's": tickets[1],
		"another sale's": foreign, "not base64": "!!", "long": strings.Repeat("A", 300)} {
		for _, g := range []*testGateway{a, b} {
			if r := g.buyWith("wr", "u0", tk); r.code != 403 || r.status() != "not_admitted" {
				t.Errorf("buy with %s ticket: %d %s", name, r.code, r.raw)
			}
		}
		if name != "another buyer's" {
			if r := b.poll("wr", tk); r.code != 403 || r.status() != "not_admitted" {
				t.Errorf("poll with %s ticket: %d %s", name, r.code, r.raw)
			}
		}
	}
	// Before the start nobody is admitted, not even the first.
	if r := b.buyWith("wr", "u0", tickets[0]); r.code != 403 || r.status() != "not_admitted" {
		t.Fatalf("buy before admission: %d %s", r.code, r.raw)
	}
	// Polled at both gateways, from the last place to the first: the head
	// only grows meanwhile, so once a place is seen admitted every place
	// before it must be too (the admitted are a prefix), and each waiting
	// place has at least one buyer fewer ahead than the place after it.
	admitted := func(g *testGateway) int {
		k, prevAhead := 0, int64(-1)
		for i := len(tickets) - 1; i >= 0; i-- {
			r := g.poll("wr", tickets[i])
			if r.code != 200 || r.num("position") != int64(i+1) {
				t.Fatalf("poll %d: %d %s", i, r.code, r.raw)
			}
			if r.status() == "admitted" {
				if r.body["pass_until"] == nil || r.num("eta_seconds") != 0 || r.num("ahead") != 0 {
					t.Fatalf("admitted view: %s", r.raw)
				}
				k++
				continue
			}
			if k > 0 {
				t.Fatalf("position %d waits after position %d was admitted: %s", i+1, i+2, r.raw)
			}
			ahead := r.num("ahead")
			if ahead < 0 || ahead > int64(i) || prevAhead >= 0 && ahead > prevAhead-1 {
				t.Fatalf("position %d with %d ahead (the place after it: %d): %s", i+1, ahead, prevAhead, r.raw)
			}
			prevAhead = ahead
		}
		return k
	}
	localstack.WaitFor(t, 10*time.Second, "the first three admitted", func() bool {
		ka := admitted(a)
		kb := admitted(b)
		return ka >= 3 && kb >= 3
	})
	m := b.scrape()
	if m[`flashgate_room_joined{sale="wr"}`] != n || m[`flashgate_room_admitted{sale="wr"}`] < 3 ||
		m[`flashgate_room_waiting{sale="wr"}`] != n-m[`flashgate_room_admitted{sale="wr"}`] ||
		m[`flashgate_room_polls_total{sale="wr"}`] < n || m[`flashgate_room_not_admitted_total{sale="wr"}`] < 5 ||
		m[`flashgate_buys_total{status="not_admitted"}`] < 6 {
		t.Errorf("the room's series at the second gateway: %v", m)
	}
	// The units go to the first places: u0 and u1 buy the two; u2 is
	// admitted to a sale that is sold out.
	for i := range 2 {
		if r := [2]*testGateway{c, b}[i].buyWith("wr", "u"+itoa(i), tickets[i]); r.code != 202 {
			t.Fatalf("admitted u%d buys: %d %s", i, r.code, r.raw)
		}
	}
	if r := a.buyWith("wr", "u2", tickets[2]); r.code != 410 {
		t.Fatalf("admitted u2 after the last unit: %d %s", r.code, r.raw)
	}
	// Sold out: polls and joins hear it at once (a buy at this gateway
	// said it), the other within its next read of the room.
	if r := a.poll("wr", tickets[5]); r.code != 410 || r.status() != "sold_out" {
		t.Fatalf("poll of a sold-out sale: %d %s", r.code, r.raw)
	}
	if r := b.join("wr", "late"); r.code != 410 {
		t.Fatalf("join of a sold-out sale: %d %s", r.code, r.raw)
	}
	localstack.WaitFor(t, 5*time.Second, "the other gateway hears sold out", func() bool {
		return b.poll("wr", tickets[5]).code == 410
	})
	a.checkLedger("wr")
}

// The admin side: bounds, the room fixed once started, joins refused
// where there is no room or the sale is over.
func TestRoomAdmin(t *testing.T) {
	g := startGateway(t)
	for _, body := range []string{`{"stock":1,"waiting_room":"lifo"}`, `{"stock":1,"waiting_room":1}`,
		`{"stock":1,"admit_per_second":0}`, `{"stock":1,"admit_per_second":1000001}`, `{"stock":1,"pass_seconds":9}`,
		`{"stock":1,"pass_seconds":3601}`, `{"stock":1,"pass_seconds":12.5}`} {
		if r := g.put("bad", body); r.code != 400 || r.status() != "bad_request" || r.str("error") == "" {
			t.Errorf("PUT %s: %d %s", body, r.code, r.raw)
		}
	}
	if r := g.view("bad"); r.code != 404 {
		t.Fatalf("a refused PUT created the sale: %s", r.raw)
	}
	g.mustSale("open", `{"stock":5}`)
	if r := g.join("open", "u"); r.code != 409 || r.status() != "conflict" {
		t.Fatalf("join of a sale without a room: %d %s", r.code, r.raw)
	}
	if r := g.put("open", `{"waiting_room":"fifo"}`); r.code != 409 || !strings.Contains(r.str("error"), "waiting_room") {
		t.Fatalf("room added to a started sale: %d %s", r.code, r.raw)
	}
	if r := g.put("open", `{"waiting_room":"off","admit_per_second":7}`); r.code != 200 || r.str("waiting_room") != "off" {
		t.Fatalf("the same room again: %d %s", r.code, r.raw)
	}
	g.mustSale("later", `{"stock":5,"starts_at":"`+startsIn(time.Hour)+`"}`)
	if r := g.put("later", `{"waiting_room":"random","pass_seconds":30}`); r.code != 200 || r.str("waiting_room") != "random" || r.num("pass_seconds") != 30 {
		t.Fatalf("room given before the start: %d %s", r.code, r.raw)
	}
	if r := g.join("later", "u"); r.code != 200 || r.body["position"] != nil || r.body["ahead"] != nil || r.num("eta_seconds") < 3000 {
		t.Fatalf("random join before the start: %d %s", r.code, r.raw)
	}
	if r := g.join("nosuch", "u"); r.code != 404 {
		t.Fatalf("join of no sale: %d %s", r.code, r.raw)
	}
	if r := g.poll("nosuch", "x"); r.code != 404 {
		t.Fatalf("poll of no sale: %d %s", r.code, r.raw)
	}
	if r := g.poll("open", "x"); r.code != 409 {
		t.Fatalf("poll of a sale without a room: %d %s", r.code, r.raw)
	}
	if r := g.do("POST", g.base+"/v1/sales/later/queue", `{"user_id":"bad id"}`, nil); r.code != 400 {
		t.Fatalf("join with a bad user id: %d %s", r.code, r.raw)
	}
	g.mustSale("over", `{"stock":5,"waiting_room":"fifo","starts_at":"`+startsIn(-time.Hour)+`","ends_at":"`+startsIn(-time.Minute)+`"}`)
	if r := g.join("over", "u"); r.code != 403 || r.status() != "ended" {
		t.Fatalf("join of an ended sale: %d %s", r.code, r.raw)
	}
	g.mustSale("gone", `{"stock":0,"waiting_room":"fifo"}`)
	if r := g.join("gone", "u"); r.code != 410 {
		t.Fatalf("join of a sold-out sale: %d %s", r.code, r.raw)
	}
}

// A new admit_per_second applies at every gateway within a second, and
// who was admitted stays admitted.
func TestRoomRateChange(t *testing.T) {
	a := startGateway(t)
	b := startGateway(t, shareRedis(a))
	a.mustSale("rate", `{"stock":100,"waiting_room":"fifo","admit_per_second":1}`)
	var tickets []string
	for i := range 40 {
		tickets = append(tickets, a.join("rate", "u"+itoa(i)).str("ticket"))
	}
	last := tickets[len(tickets)-1]
	if r := b.poll("rate", last); r.status() != "waiting" || r.num("eta_seconds") < 30 {
		t.Fatalf("the last of 40 at 1/s: %s", r.raw)
	}
	if r := a.put("rate", `{"admit_per_second":1000}`); r.code != 200 {
		t.Fatalf("rate change: %d %s", r.code, r.raw)
	}
	localstack.WaitFor(t, 5*time.Second, "the other gateway admits the last at the new rate", func() bool {
		return b.poll("rate", last).status() == "admitted"
	})
	if r := b.buyWith("rate", "u39", last); r.code != 202 {
		t.Fatalf("buy after the rate change: %d %s", r.code, r.raw)
	}
	if r := a.poll("rate", tickets[0]); r.status() != "admitted" {
		t.Fatalf("the first is no longer admitted: %s", r.raw)
	}
	if v := a.view("rate"); v.num("admitted") != 40 || v.num("joined") != 40 {
		t.Fatalf("admin view: %s", v.raw)
	}
}

// A room nobody waited in is not credit: buyers who come long after the
// start still enter at the rate, one after another.
func TestRoomIdleIsNoCredit(t *testing.T) {
	g := startGateway(t)
	g.mustSale("idle", `{"stock":100,"waiting_room":"fifo","admit_per_second":1,"starts_at":"`+startsIn(-time.Hour)+`"}`)
	first := g.join("idle", "a")
	second := g.join("idle", "b")
	if first.num("position") != 1 || second.num("position") != 2 {
		t.Fatalf("joins: %s %s", first.raw, second.raw)
	}
	// An hour of an empty room at 1/s would have let 3,600 in at once.
	if second.status() != "waiting" || second.num("ahead") > 1 {
		t.Fatalf("the second joiner after an hour of an empty room: %s", second.raw)
	}
}

// random: the pre-queue's places are a permutation of 1..n drawn
// independently of the join order, and the late joiners queue behind it
// in the order they joined.
func TestRoomRandom(t *testing.T) {
	a := startGateway(t)
	b := startGateway(t, shareRedis(a))
	const n, late = 300, 20
	start := time.Now().Add(6 * time.Second)
	a.mustSale("rnd", `{"stock":1000,"waiting_room":"random","admit_per_second":1000,"starts_at":"`+start.UTC().Format(time.RFC3339Nano)+`"}`)
	tickets := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r := a.join("rnd", "p"+itoa(i))
				if r.code != 200 || r.body["position"] != nil {
					t.Errorf("pre-queue join: %d %s", r.code, r.raw)
				}
				tickets[i] = r.str("ticket")
			}
		})
	}
	wg.Wait()
	if t.Failed() || time.Now().After(start) {
		t.Fatalf("the pre-queue was not joined before the start (%v)", time.Until(start))
	}
	// The join order as Redis saw it is the join number: ask the queue hash.
	order := make([]int, n)
	for i := range n {
		j, err := a.rdb.HGet(t.Context(), a.keys.Queue("rnd"), "p"+itoa(i)).Int()
		if err != nil {
			t.Fatal(err)
		}
		order[i] = j
	}
	localstack.WaitFor(t, 10*time.Second, "the pre-queue drawn", func() bool {
		return b.poll("rnd", tickets[0]).body["position"] != nil
	})
	pos := make([]int, n)
	for i, tk := range tickets {
		r := b.poll("rnd", tk)
		if r.code != 200 || r.body["position"] == nil {
			t.Fatalf("poll after the start: %d %s", r.code, r.raw)
		}
		pos[i] = int(r.num("position"))
		if p := a.poll("rnd", tk).num("position"); p != int64(pos[i]) {
			t.Fatalf("the gateways disagree on a place: %d and %d", pos[i], p)
		}
	}
	sorted := slices.Sorted(slices.Values(pos))
	for i, p := range sorted {
		if p != i+1 {
			t.Fatalf("the pre-queue's places are not 1..%d: %v", n, sorted)
		}
	}
	// Spearman's rank correlation of join number and place. Under a
	// uniform draw it is about normal with variance 1/(n-1); |z| > 4.9
	// happens with probability under 1e-6.
	rho := spearman(order, pos)
	if z := rho * math.Sqrt(n-1); math.Abs(z) > 4.9 {
		t.Fatalf("the places follow the join order: rho %.3f (z %.1f)", rho, z)
	}
	t.Logf("rank correlation of join order and place over %d buyers: %.3f", n, rho)
	prev := int64(n)
	for i := range late {
		r := a.join("rnd", "late"+itoa(i))
		if r.code != 200 || r.num("position") != prev+1 {
			t.Fatalf("late join %d after %d: %d %s", i, prev, r.code, r.raw)
		}
		prev = r.num("position")
	}
}

// spearman is the rank correlation of two permutations of 1..n.
func spearman(x, y []int) float64 {
	n := float64(len(x))
	var d2 float64
	for i := range x {
		d := float64(x[i] - y[i])
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}
