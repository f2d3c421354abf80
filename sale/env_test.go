package sale

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { localstack.Main(m) }

// env is a Store on the real Redis of `make up` (or the Redis Cluster of
// `make up-cluster`), with a key prefix of its own, its keys dropped when
// the test ends.
type env struct {
	t      testing.TB
	rdb    redis.UniversalClient
	loader *scripts.Loader
	keys   scripts.Keys
	store  *Store
}

func newEnv(t testing.TB, o Options) *env {
	t.Helper()
	rdb := localstack.Redis(t)
	keys := scripts.Keys{Prefix: "t" + localstack.RandomHex(6)}
	localstack.DropKeys(t, rdb, keys.Prefix)
	loader := scripts.New(rdb, "", keys)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := loader.Load(ctx); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	st, err := New(rdb, loader, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, rdb: rdb, loader: loader, keys: keys, store: st}
}

// mustSale creates or updates sale with the settings of an admin PUT body
// (stock, per_user_limit, payment_window, buckets), failing the test on a
// refusal.
func (e *env) mustSale(sale, body string) *View {
	e.t.Helper()
	var f struct {
		Stock         *int64 `json:"stock"`
		Limit         *int64 `json:"per_user_limit"`
		PaymentWindow *int64 `json:"payment_window"`
		Buckets       *int64 `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		e.t.Fatalf("sale %s: body %s: %v", sale, body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, err := e.store.Upsert(ctx, sale, Update{Stock: f.Stock, Limit: f.Limit, PaymentWindow: f.PaymentWindow, Buckets: f.Buckets})
	if err != nil {
		e.t.Fatalf("sale %s %s: %v", sale, body, err)
	}
	return v
}

// view reads sale, failing the test when it cannot.
func (e *env) view(sale string) *View {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := e.store.Sale(ctx, sale)
	if err != nil {
		e.t.Fatalf("sale %s: %v", sale, err)
	}
	return v
}

// buy is one buy through the batcher, as the edge makes it: the outcome's
// error (nil: accepted) or the call's.
func (e *env) buy(sale, user string, qty int, idem string) (Result, error) {
	res, err := e.store.Buy(sale, user, qty, idem)
	if err != nil {
		return res, err
	}
	return res, res.Err
}

// newStore is another Store on e's Redis and keys, with no options: a
// second process, as far as the sales are concerned.
func (e *env) newStore() *Store {
	e.t.Helper()
	st, err := New(e.rdb, e.loader, e.keys, Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// checkBuckets checks a quiet bucketed sale's records
// (saletest.CheckBuckets), and the store's view of it against their sums.
func (e *env) checkBuckets(sale string) saletest.Buckets {
	e.t.Helper()
	l := saletest.CheckBuckets(e.t, e.rdb, e.keys, sale)
	v := e.view(sale)
	if v.Stock != l.Stock || v.Sold != l.Sold() || v.Buyers != int64(len(l.Held)) || v.Buckets != int64(len(l.Names)) {
		e.t.Errorf("%s: view %+v; Redis: stock %d, sold %d, %d buyers, %d buckets", sale, v, l.Stock, l.Sold(),
			len(l.Held), len(l.Names))
	}
	return l
}

func itoa(n int) string { return strconv.Itoa(n) }

func ptr(n int64) *int64 { return &n }
