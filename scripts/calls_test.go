package scripts_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// Each typed call reads what the shipped script answers, on the Redis of
// the tests (one, or a cluster: every call is on one sale's slot).
func TestTypedCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rdb := localstack.Redis(t)
	k := scripts.Keys{Prefix: "t" + localstack.RandomHex(5)}
	t.Cleanup(func() { localstack.DropKeys(t, rdb, k.Prefix) })
	l := scripts.New(rdb, "", k)

	const sale = "calls"
	saleKeys := []string{k.Meta(sale), k.Users(sale), k.Outbox(sale)}
	orderKeys := []string{k.Meta(sale), k.Users(sale), k.Outbox(sale), k.Orders(sale), k.Due(sale)}
	ttl := int64(scripts.IdemTTL / time.Second)
	if _, err := l.Reserve(ctx, orderKeys, sale, new(scripts.ReserveBatch).Add("o0", "u0", 1, 0)); !errors.Is(err, scripts.ErrNotLoaded) {
		t.Fatalf("Reserve before Load: %v, want Run's ErrNotLoaded as it is", err)
	}
	if _, err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}

	if err := l.Ping(ctx, saleKeys, "ping", k.Events(), sale); err != nil {
		t.Errorf("Ping: %v", err)
	}
	a, err := l.Admin(ctx, saleKeys, "upsert", k.Events(), sale, "10", "2", "", "", "", "", "")
	if err != nil || a.Code != scripts.CodeOK || !a.Created || a.Stock != 10 || a.Limit != 2 || a.Buckets != 1 || a.Now == 0 {
		t.Fatalf("Admin upsert = %+v, %v; want a sale created, stock 10, limit 2", a, err)
	}

	r, err := l.Reserve(ctx, orderKeys, sale, new(scripts.ReserveBatch).Add("o1", "u1", 1, 0).Add("o2", "u1", 2, 0))
	if err != nil || r.Len() != 2 {
		t.Fatalf("Reserve = %d outcomes, %v", r.Len(), err)
	}
	if got := r.At(0); got != (scripts.Reserved{Code: scripts.CodeOK, OrderID: "o1"}) {
		t.Errorf("reservation 0 = %+v, want o1 accepted, no pay_by", got)
	}
	if got := r.At(1); got.Code != scripts.CodeLimitReached {
		t.Errorf("reservation 1 = %+v, want LIMIT_REACHED (1 + 2 units, limit 2)", got)
	}
	// A line the script cannot read (a user id with a tab, which the
	// gateway never sends) fails the whole call, the good line too: it
	// would shift every answer after it.
	bad := new(scripts.ReserveBatch).Add("o3", "u3", 1, 0).Add("o4", "u\t4", 1, 0)
	if _, err := l.Reserve(ctx, orderKeys, sale, bad); err == nil || !strings.Contains(err.Error(), "reservation 2 unreadable") {
		t.Errorf("Reserve of an unreadable line: %v, want the script's refusal", err)
	}
	if o, err := l.Order(ctx, orderKeys, "get", k.Events(), sale, "o3"); err != nil || o.Code != scripts.CodeOrderNotFound {
		t.Errorf("Order get o3 after a refused batch = %+v, %v; want ORDER_NOT_FOUND", o, err)
	}

	o, err := l.Order(ctx, orderKeys, "get", k.Events(), sale, "o1")
	if err != nil || o.Code != scripts.CodeOK || o.Record.UserID != "u1" || o.Record.Quantity != 1 ||
		o.Record.State != order.StateConfirmed || o.Changed || o.Now == 0 {
		t.Errorf("Order get o1 = %+v, %v", o, err)
	}
	if o, err := l.Order(ctx, orderKeys, "get", k.Events(), sale, "nope"); err != nil || o.Code != scripts.CodeOrderNotFound {
		t.Errorf("Order get nope = %+v, %v; want ORDER_NOT_FOUND", o, err)
	}
	if s, err := l.Sweep(ctx, orderKeys, "sweep", k.Events(), sale, 10); err != nil || s.Now == 0 || s.Expired != nil || s.Next != 0 {
		t.Errorf("Sweep = %+v, %v; want nothing expired, nothing due", s, err)
	}
	if _, err := l.Sweep(ctx, orderKeys, "get", k.Events(), sale, "o1"); !errors.Is(err, scripts.ErrReply) {
		t.Errorf("Sweep of a get's reply: %v, want ErrReply", err)
	}

	// The view's status: queued until the order's id is in the created
	// set (the consumers' SADD), then created; the sweep's five keys name
	// no set.
	viewKeys := append(orderKeys[:5:5], k.Created(sale))
	for _, created := range []bool{false, true} {
		if created {
			if err := rdb.SAdd(ctx, k.Created(sale), "o1").Err(); err != nil {
				t.Fatal(err)
			}
		}
		o, err := l.Order(ctx, viewKeys, "get", k.Events(), sale, "o1")
		if err != nil || o.Code != scripts.CodeOK || o.Record.Created != created {
			t.Errorf("Order get o1, in the created set %v = %+v, %v", created, o, err)
		}
	}

	rep, err := l.Repair(ctx, []string{k.Meta(sale), k.Users(sale), k.Orders(sale), k.Due(sale)},
		k.Events(), sale, "1", 0, ttl)
	if err != nil || rep != (scripts.RepairReply{}) {
		t.Errorf("Repair of a sale not held = %+v, %v; want nothing applied", rep, err)
	}

	m, err := l.Move(ctx, []string{k.Meta(sale), k.Moves(sale)}, "give", "m1", 3)
	if err != nil || m != (scripts.MoveReply{Code: scripts.CodeOK, N: 3}) {
		t.Errorf("Move give 3 = %+v, %v", m, err)
	}

	// The repair's record of marks given again needs no Load either, and
	// moves meta cseq only up, only on a sale not held and checked under
	// this Redis's history.
	for i, c := range []struct {
		cseq  int64
		moved bool
	}{{5, true}, {5, false}, {3, false}, {7, true}} {
		if moved, err := scripts.New(rdb, "", k).Remarked(ctx, k.Meta(sale), c.cseq); err != nil || moved != c.moved {
			t.Errorf("Remarked %d (cseq %d) = %v, %v; want %v", i, c.cseq, moved, err, c.moved)
		}
	}
	for field, v := range map[string]string{"hold": "1", "rid": "another"} {
		prev := rdb.HGet(ctx, k.Meta(sale), field).Val()
		rdb.HSet(ctx, k.Meta(sale), field, v)
		if moved, err := l.Remarked(ctx, k.Meta(sale), 9); err != nil || moved {
			t.Errorf("Remarked with meta %s %s = %v, %v; want nothing moved", field, v, moved, err)
		}
		rdb.HSet(ctx, k.Meta(sale), field, prev)
	}
	if c := rdb.HGet(ctx, k.Meta(sale), "cseq").Val(); c != "7" {
		t.Errorf("meta cseq %q, want 7", c)
	}

	// The relay's removal needs no Load: a Loader of its own, never loaded.
	// The outbox holds o1's entry alone (the refused batch wrote nothing).
	entries, err := rdb.XRange(ctx, k.Outbox(sale), "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("outbox: %v, %v; want the entry of o1", entries, err)
	}
	fresh := scripts.New(rdb, "", k)
	for i, want := range []int64{1, 0} {
		n, err := fresh.Remove(ctx, []string{k.Outbox(sale), k.Meta(sale)}, "relay", entries[0].ID, 1)
		if err != nil || n != want {
			t.Errorf("Remove %d = %d, %v; want %d", i, n, err, want)
		}
	}
}

// A script from a folder whose reply has another shape than the call reads
// is an error wrapping ErrReply, and the error of the call, not a value.
func TestTypedCallOfAnotherShape(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rdb := localstack.Redis(t)
	k := scripts.Keys{Prefix: "t" + localstack.RandomHex(5)}
	t.Cleanup(func() { localstack.DropKeys(t, rdb, k.Prefix) })
	dir := copyBuiltin(t)
	for name, src := range map[string]string{
		scripts.Admin: "if ARGV[1] == 'ping' then return 'PONG' end return {0, 0, 0, '10'}",
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := scripts.New(rdb, dir, k)
	if _, err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{k.Meta("s"), k.Users("s"), k.Outbox("s")}
	if a, err := l.Admin(ctx, keys, "get", k.Events(), "s"); !errors.Is(err, scripts.ErrReply) || a != (scripts.AdminReply{}) {
		t.Errorf("Admin = %+v, %v; want ErrReply and nothing read", a, err)
	}
	if err := l.Ping(ctx, keys, "ping", k.Events(), "s"); !errors.Is(err, scripts.ErrReply) {
		t.Errorf("Ping = %v; want ErrReply", err)
	}
}
