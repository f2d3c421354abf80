package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/flashgate/flashgate/sale"
)

// A random room's lottery can be checked: its commitment from the room's
// creation, its seed and pre-queue once the sale starts (not before), and
// every place recomputed from them and the join number the queue view
// gives. The first poll after the start has its place (the gateway seals
// the room for it rather than wait for its periodic read), and every queue
// view says the units left.
func TestRoomProof(t *testing.T) {
	a := startGateway(t)
	b := startGateway(t, shareRedis(a))
	const n, stock = 12, 7
	start := time.Now().Add(3 * time.Second)
	a.mustSale("lot", `{"stock":7,"waiting_room":"random","admit_per_second":1000,"starts_at":"`+start.UTC().Format(time.RFC3339Nano)+`"}`)
	if r := a.do("GET", a.base+"/v1/sales/lot/queue/proof", "", nil); r.code != 200 {
		t.Fatalf("proof: %d %s", r.code, r.raw)
	}
	tickets := make([]string, n)
	for i := range n {
		r := a.join("lot", "p"+itoa(i))
		if r.code != 200 || r.body["position"] != nil || r.num("remaining") != stock || r.body["join"] != nil {
			t.Fatalf("join before the start: %d %s", r.code, r.raw)
		}
		tickets[i] = r.str("ticket")
	}
	// b holds the room, unsealed, from before the start.
	if r := b.poll("lot", tickets[0]); r.code != 200 || r.body["position"] != nil || r.num("remaining") != stock {
		t.Fatalf("poll before the start: %d %s", r.code, r.raw)
	}
	before := b.do("GET", b.base+"/v1/sales/lot/queue/proof", "", nil)
	commitment := before.str("commitment")
	if before.code != 200 || len(commitment) != 64 || before.body["seed"] != nil || before.body["prequeue"] != nil {
		t.Fatalf("proof before the start: %d %s", before.code, before.raw)
	}
	if time.Now().After(start) {
		t.Fatalf("the pre-queue was not joined before the start")
	}
	time.Sleep(time.Until(start)) // not an assertion: the start itself is the event under test
	if r := b.poll("lot", tickets[1]); r.code != 200 || r.body["position"] == nil || r.body["join"] == nil {
		t.Fatalf("the first poll after the start: %d %s; want its place", r.code, r.raw)
	}
	proof := b.do("GET", b.base+"/v1/sales/lot/queue/proof", "", nil)
	seed := proof.str("seed")
	raw, err := hex.DecodeString(seed)
	sum := sha256.Sum256(raw)
	if proof.code != 200 || err != nil || proof.str("commitment") != commitment || hex.EncodeToString(sum[:]) != commitment || proof.num("prequeue") != n {
		t.Fatalf("proof after the start: %d %s; the commitment was %s", proof.code, proof.raw, commitment)
	}
	for i, tk := range tickets {
		r := a.poll("lot", tk)
		pos, join := r.num("position"), r.num("join")
		place, err := sale.LotteryPlace(seed, n, join)
		if r.code != 200 || err != nil || place != pos || r.num("remaining") != stock {
			t.Errorf("buyer %d: %d %s; the seed places join %d at %d (%v)", i, r.code, r.raw, join, place, err)
		}
	}
	if r := a.do("GET", a.base+"/v1/sales/nosuch/queue/proof", "", nil); r.code != 404 {
		t.Errorf("proof of no sale: %d", r.code)
	}
	a.mustSale("fifo", `{"stock":1,"waiting_room":"fifo"}`)
	if r := a.do("GET", a.base+"/v1/sales/fifo/queue/proof", "", nil); r.code != 409 || r.status() != "conflict" {
		t.Errorf("proof of a fifo room: %d %s", r.code, r.raw)
	}
}
