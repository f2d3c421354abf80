package scripts_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// saleOf is a sale's keys in the forms the calls take.
type saleOf struct {
	id                string
	admin, order, rsv []string
}

func newSaleOf(k scripts.Keys, id string) saleOf {
	ok := []string{k.Meta(id), k.Users(id), k.Outbox(id), k.Orders(id), k.Due(id)}
	return saleOf{id: id, admin: ok[:3], order: ok, rsv: ok}
}

// A promoted replica may hold the scripts already and answer no NOSCRIPT,
// so no pass runs: the scripts themselves hold a sale whose history (meta
// rid) is not this Redis's before they decide anything. A held sale with
// no unit left answers SOLD_OUT at once to a buyer without a key.
func TestScriptsHoldAnotherHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rdb := localstack.Redis(t)
	k := scripts.Keys{Prefix: "t" + localstack.RandomHex(5)}
	t.Cleanup(func() { localstack.DropKeys(t, rdb, k.Prefix) })
	l := scripts.New(rdb, "", k)
	if _, err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	open, gone := newSaleOf(k, "open"), newSaleOf(k, "gone")
	for _, s := range []saleOf{open, gone} {
		stock := "5"
		if s.id == "gone" {
			stock = "1"
		}
		if a, err := l.Admin(ctx, s.admin, "upsert", k.Events(), s.id, stock, "2", "", "", "", "", ""); err != nil || a.Code != scripts.CodeOK {
			t.Fatalf("create %s: %+v, %v", s.id, a, err)
		}
		r, err := l.Reserve(ctx, s.rsv, s.id, new(scripts.ReserveBatch).Add(s.id+"-o1", "u1", 1, 0))
		if err != nil || r.At(0).Code != scripts.CodeOK {
			t.Fatalf("first buy of %s under this history: %+v, %v", s.id, r.At(0), err)
		}
		// What a promotion looks like to the sale: its rid names another
		// Redis's history (the old primary's).
		if err := rdb.HSet(ctx, k.Meta(s.id), "rid", "0123456789abcdef").Err(); err != nil {
			t.Fatal(err)
		}
	}

	r, err := l.Reserve(ctx, open.rsv, open.id, new(scripts.ReserveBatch).Add("open-o2", "u2", 1, 0))
	if err != nil || r.At(0).Code != scripts.CodeRepairing {
		t.Errorf("buy of a sale of another history: %+v, %v; want REPAIRING", r.At(0), err)
	}
	if h, _ := rdb.HGet(ctx, k.Meta(open.id), "hold").Result(); h != "1" {
		t.Errorf("hold after that buy = %q, want 1: the script holds the sale itself", h)
	}
	if sold, _ := rdb.HGet(ctx, k.Meta(open.id), "sold").Int(); sold != 1 {
		t.Errorf("sold = %d after a refused buy, want 1", sold)
	}
	o, err := l.Order(ctx, open.order, "get", k.Events(), open.id, "open-o1")
	if err != nil || o.Code != scripts.CodeRepairing {
		t.Errorf("order status on the held sale: %+v, %v; want REPAIRING", o, err)
	}

	// The sold-out one: its order script holds it, then a buyer hears
	// SOLD_OUT without waiting for the repair.
	if o, err := l.Order(ctx, gone.order, "get", k.Events(), gone.id, "gone-o1"); err != nil || o.Code != scripts.CodeRepairing {
		t.Errorf("order status on a sale of another history: %+v, %v; want REPAIRING", o, err)
	}
	if h, _ := rdb.HGet(ctx, k.Meta(gone.id), "hold").Result(); h != "1" {
		t.Errorf("hold after the order call = %q, want 1", h)
	}
	r, err = l.Reserve(ctx, gone.rsv, gone.id, new(scripts.ReserveBatch).Add("gone-o2", "u2", 1, 0))
	if err != nil || r.At(0).Code != scripts.CodeSoldOut {
		t.Errorf("buy of a held sale with no unit left: %+v, %v; want SOLD_OUT", r.At(0), err)
	}

	// The pass finds both held and lists them for the repair.
	if err := rdb.SAdd(ctx, k.Sales(), open.id, gone.id).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.HoldPass(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := rdb.SMembers(ctx, k.Held()).Result()
	if err != nil || len(held) != 2 {
		t.Errorf("held set %v, %v; want both sales", held, err)
	}
}

// Replicated mode on a primary of the test's own with one replica: a
// change waits for the replica; with the replica stopped, the change is
// made and answered with ErrUnconfirmed, and its replay (a retried call,
// an Idempotency-Key) waits again and is confirmed once the replica is back.
func TestReplicatedWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	primary := localstack.PrivateRedis(t, localstack.RedisOptions{Dir: t.TempDir(), Args: []string{"--repl-diskless-sync-delay", "0"}})
	replica := localstack.PrivateRedis(t, localstack.RedisOptions{Dir: t.TempDir()})
	rdb := scripts.NewClient(redis.UniversalOptions{Addrs: []string{primary.Addr}})
	t.Cleanup(func() { _ = rdb.Close() })
	rep := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { _ = rep.Close() })
	host, port, _ := splitAddr(primary.Addr)
	if err := rep.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	// online: synced (a diskless sync starts after repl-diskless-sync-delay).
	localstack.WaitFor(t, 30*time.Second, "the replica is in sync", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, ",state=online,")
	})

	k := scripts.Keys{Prefix: "t"}
	l := scripts.New(rdb, "", k)
	l.SetReplicas(1)
	if _, err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	s := newSaleOf(k, "rep")
	call := func(d time.Duration, oid, user string) (scripts.Reserved, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		r, err := l.Reserve(cctx, s.rsv, s.id, new(scripts.ReserveBatch).Add(oid, user, 1, 0))
		return r.At(0), err
	}
	if a, err := l.Admin(ctx, s.admin, "upsert", k.Events(), s.id, "10", "1", "", "", "", "", ""); err != nil || a.Code != scripts.CodeOK {
		t.Fatalf("create: %+v, %v", a, err)
	}
	if r, err := call(2*time.Second, "o1", "u1"); err != nil || r.Code != scripts.CodeOK {
		t.Fatalf("buy with the replica up: %+v, %v; want OK, confirmed", r, err)
	}
	if got, _ := rep.HGet(ctx, k.Orders(s.id), "o1").Result(); got == "" {
		t.Errorf("the replica lacks o1 after a confirmed buy")
	}

	// Another gateway's loader, whose one connection's writes (its SCRIPT
	// LOADs) the replica has acknowledged before it stops.
	rdb2 := scripts.NewClient(redis.UniversalOptions{Addrs: []string{primary.Addr}, PoolSize: 1})
	t.Cleanup(func() { _ = rdb2.Close() })
	l2 := scripts.New(rdb2, "", k)
	l2.SetReplicas(1)
	if _, err := l2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Ping(ctx, s.admin, "ping", k.Events(), s.id); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := syscall.Kill(replica.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(replica.Pid(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	before := l.WaitStats()
	r, err := call(300*time.Millisecond, "o2", "u2")
	if !errors.Is(err, scripts.ErrUnconfirmed) || r.Code != scripts.CodeOK || r.OrderID != "o2" {
		t.Fatalf("buy with the replica stopped: %+v, %v; want OK with ErrUnconfirmed", r, err)
	}
	if ws := l.WaitStats(); ws.Unconfirmed != before.Unconfirmed+1 {
		t.Errorf("unconfirmed %d, want %d", ws.Unconfirmed, before.Unconfirmed+1)
	}
	// Its replay on another connection (another gateway's, say), which
	// wrote nothing itself: still unconfirmed. (WAIT waits for the
	// connection's last write; Redis 7.0 counts any command's offset, and
	// the replay writes once besides, for a Redis that counts only writes.)
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r2, err := l2.Reserve(rctx, s.rsv, s.id, new(scripts.ReserveBatch).Add("o2", "u2", 1, 0))
	rcancel()
	if !errors.Is(err, scripts.ErrUnconfirmed) || r2.At(0).Code != scripts.CodeOK {
		t.Errorf("replay of the unconfirmed order on a fresh connection, replica stopped: %+v, %v; want OK with ErrUnconfirmed",
			r2.At(0), err)
	}
	resume()
	r, err = call(5*time.Second, "o2", "u2")
	if err != nil || r.Code != scripts.CodeOK || r.OrderID != "o2" {
		t.Errorf("the replayed call with the replica back: %+v, %v; want OK, confirmed", r, err)
	}
	localstack.WaitFor(t, 10*time.Second, "the replica holds o2", func() bool {
		got, _ := rep.HGet(ctx, k.Orders(s.id), "o2").Result()
		return got != ""
	})

	l.SetReplicas(2)
	if r, err := call(300*time.Millisecond, "o3", "u3"); !errors.Is(err, scripts.ErrUnconfirmed) || r.Code != scripts.CodeOK {
		t.Errorf("buy asking two replicas of one: %+v, %v; want OK with ErrUnconfirmed", r, err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer pcancel()
	if err := l.Ping(pctx, s.admin, "ping", k.Events(), s.id); !errors.Is(err, scripts.ErrUnconfirmed) {
		t.Errorf("Ping asking two replicas of one: %v, want ErrUnconfirmed", err)
	}
}

func splitAddr(addr string) (host, port string, err error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return "", "", errors.New("no port in " + addr)
}
