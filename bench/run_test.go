package bench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/process"
	"github.com/flashgate/flashgate/scripts"
)

const testToken = "bench-test-token-0123456789"

// testGateway is a gateway running in this process.
type testGateway struct {
	public, admin string // base URLs
	rdb           *redis.Client
	keys          scripts.Keys
}

// startGateway runs a gateway in this process on 127.0.0.1:0 against the
// Redis of `make up`, with a key prefix of its own (localstack.Isolated);
// it stops it and deletes its keys when the test ends.
func startGateway(t *testing.T) *testGateway {
	t.Helper()
	cfg := localstack.Isolated(t)
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.Token = testToken
	cfg.Shutdown.DrainDelay = 0
	cfg.Shutdown.Timeout = 5 * time.Second
	rdb := redis.NewClient(&redis.Options{
		Addr: cfg.Redis.Addrs[0], ReadTimeout: cfg.Redis.Timeout, WriteTimeout: cfg.Redis.Timeout,
		DialTimeout: cfg.Redis.Timeout, PoolTimeout: cfg.Redis.Timeout, ContextTimeoutEnabled: true,
		PoolSize: 64, MaxRetries: 2,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", cfg.Redis.Addrs[0], err)
	}
	// The parts cmd/flashgate's gateway runs around the Server
	// (process.Gateway), but the relay: the sales' store and the payment
	// sweeper (whose expiries and lag TestRunPaysAndExpires checks).
	parts, err := process.NewGateway(cfg, process.GatewayDeps{Redis: rdb, NoRelay: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parts.Loader.Load(ctx); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	srv, err := gateway.New(cfg, gateway.Deps{Log: zap.NewNop(), Sales: parts.Sales, Loader: parts.Loader,
		Reload: parts.Reload, Metrics: parts.WriteMetrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	localstack.RunUntilCleanup(t, "gateway", 10*time.Second, func(ctx context.Context) error { return parts.Run(ctx, srv) })
	return &testGateway{public: "http://" + srv.Addr(), admin: "http://" + srv.AdminAddr(),
		rdb: rdb, keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}}
}

func logReport(t *testing.T, rep *Report) {
	t.Helper()
	var b bytes.Buffer
	rep.WriteText(&b)
	t.Log("\n" + b.String())
}

// TestRunSellsOutAndPasses runs a small flash sale against a real gateway:
// more buyers than units, duplicate clicks, and every check must pass with
// exactly the stock sold.
func TestRunSellsOutAndPasses(t *testing.T) {
	g := startGateway(t)
	public, admin := g.public, g.admin
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		URL: public, AdminURL: admin, Token: testToken, NoMySQL: true,
		Stock: 200, Users: 500, DupRatio: 0.3, Conns: 16,
		UntilSoldOut: true, MaxDuration: 8 * time.Second, Timeout: 5 * time.Second,
		Progress: &syncBuffer{b: &progress},
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	f := rep.Figures
	if f.AcceptedUnits != 200 || f.AcceptedOrders != 200 || f.RedisSold != 200 {
		t.Errorf("accepted %d units in %d orders, Redis sold %d; want 200", f.AcceptedUnits, f.AcceptedOrders, f.RedisSold)
	}
	if rep.StoppedBy != "sold-out" || rep.SoldOutAfter == 0 {
		t.Errorf("stopped by %q after %v, want sold-out", rep.StoppedBy, rep.SoldOutAfter)
	}
	var sum int64
	for _, o := range rep.Outcomes {
		sum += o.Count
		if o.Count > 0 && (o.P50 <= 0 || o.P50 > o.P99 || o.P99 > o.Max) {
			t.Errorf("%s: p50 %v p99 %v max %v", o.Status, o.P50, o.P99, o.Max)
		}
	}
	if sum != rep.Requests || rep.All.Count != rep.Requests {
		t.Errorf("outcomes add up to %d, all %d, requests %d", sum, rep.All.Count, rep.Requests)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !bytes.Contains(js.Bytes(), []byte(`"result": "PASS"`)) {
		t.Errorf("JSON report: %v\n%s", err, js.String())
	}
}

// TestRunOpenLoop drives a fixed rate for a fixed time past the sell-out,
// with a per-user limit above 1, and checks the schedule was kept.
func TestRunOpenLoop(t *testing.T) {
	g := startGateway(t)
	public, admin := g.public, g.admin
	rep, err := Run(context.Background(), Options{
		URL: public, AdminURL: admin, Token: testToken, NoMySQL: true,
		Stock: 100, Limit: 2, Users: 80, DupRatio: 0.2, Conns: 8, Rate: 500,
		Duration: 1500 * time.Millisecond, UntilSoldOut: false, MaxDuration: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if rep.StoppedBy != "duration" {
		t.Errorf("stopped by %s", rep.StoppedBy)
	}
	// 500/s for 1.5 s; allow for a slow start under -race.
	if rep.Requests < 500 || rep.Requests > 760 {
		t.Errorf("%d requests at 500/s for 1.5 s", rep.Requests)
	}
	if f := rep.Figures; f.RedisSold != 100 || f.AcceptedUnits != 100 {
		t.Errorf("sold %d, accepted %d; want 100 (80 users × 2 ≥ 100)", f.RedisSold, f.AcceptedUnits)
	}
}

func TestRunRefusesAnExistingSale(t *testing.T) {
	g := startGateway(t)
	public, admin := g.public, g.admin
	o := Options{URL: public, AdminURL: admin, Token: testToken, NoMySQL: true, Sale: "dup-" + localstack.RandomHex(4),
		Stock: 1, Users: 3, MaxDuration: 2 * time.Second}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), o); !errors.Is(err, ErrOptions) {
		t.Fatalf("second run on the same sale: %v, want ErrOptions", err)
	}
}

// startFake serves the part of the gateway's and admin API the bench uses
// on 127.0.0.1:0, with buy answering the n-th buy (from 1) and the admin
// view saying stock and sold. It is for tests of the bench's own counting:
// what a real gateway does is tested against a real one. It stops, and
// every handler has returned, when the test ends.
func startFake(t *testing.T, stock, sold int64, buy func(n int64, w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	var created atomic.Bool
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("PUT /admin/v1/sales/{sale}", func(w http.ResponseWriter, _ *http.Request) {
		created.Store(true)
		w.WriteHeader(201)
		fmt.Fprint(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /admin/v1/sales/{sale}", func(w http.ResponseWriter, _ *http.Request) {
		if !created.Load() {
			w.WriteHeader(404)
			fmt.Fprint(w, `{"status":"not_found"}`)
			return
		}
		fmt.Fprintf(w, `{"status":"ok","stock":%d,"sold":%d,"remaining":%d}`, stock, sold, stock-sold)
	})
	// Every buy's context also ends when the test does, so that a buy
	// held back returns.
	all, endAll := context.WithCancel(context.Background())
	mux.HandleFunc("POST /v1/sales/{sale}/orders", func(w http.ResponseWriter, r *http.Request) {
		// Read to the end: only then does the server watch the connection
		// and end r's context when the client gives up on it.
		io.Copy(io.Discard, r.Body)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(all, cancel)
		defer stop()
		buy(n.Add(1), w, r.WithContext(ctx))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		endAll()
		// Shutdown returns once every handler has.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("fake gateway: %v", err)
			srv.Close()
		}
		<-served
	})
	return "http://" + ln.Addr().String()
}

// TestRunCatchesAnOversellingGateway points the bench at a fake gateway that
// accepts everything and reuses order ids: the checks must fail.
func TestRunCatchesAnOversellingGateway(t *testing.T) {
	base := startFake(t, 10, 10, func(i int64, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(202)
		fmt.Fprintf(w, `{"status":"accepted","order_id":"o%d"}`, i%50) // ids repeat
	})
	rep, err := Run(context.Background(), Options{URL: base, AdminURL: base, NoMySQL: true,
		Stock: 10, Users: 5, Conns: 4, UntilSoldOut: true, Duration: 300 * time.Millisecond, MaxDuration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	got := results(rep.Checks)
	for _, name := range []string{"accepted units = Redis sold", "no user over the limit (202s)", "no duplicate order id (202s)"} {
		if got[name] != Fail {
			t.Errorf("%s: %s, want FAIL", name, got[name])
		}
	}
	if !errors.Is(rep.Err(), ErrFailed) {
		t.Errorf("Report.Err = %v", rep.Err())
	}
}

// TestRunWaitsForSlowLastAnswers: the verdict is the bench's count of every
// answer to every request it sent. A fake gateway of 10 units answers the
// first buys at once and the next few (the last units) late: only after it
// has answered sold_out to the following buys, which stops the load. Those
// late answers are counted, whatever they are, so that they make no check
// fail that should pass (late 202s for the last units; 503s from a gateway
// whose script reserved after its Redis timeout, or no answer at all within
// the client's timeout, either of which may hide a reservation) and none
// pass that should fail (late 202s repeating order ids; more units sold
// than the late answers can account for).
func TestRunWaitsForSlowLastAnswers(t *testing.T) {
	const stock = 10
	tests := []struct {
		name       string
		fast, slow int64  // buys answered 202 at once, then buys answered late
		late       string // the late answer: "202", "202 dup" (an earlier order id), "503", "none"
		outcome    string // the outcome the late answers count as
		sold       int64  // what the fake's Redis says it sold
		failed     []string
	}{
		{"late 202s for the last units", 7, 3, "202", "accepted", 10, nil},
		{"late 202s repeating order ids", 7, 3, "202 dup", "accepted", 7, []string{"no duplicate order id (202s)"}},
		{"late 503s after the script reserved", 7, 3, "503", "unavailable", 10, nil},
		{"late 503s account for no more than their number", 6, 3, "503", "unavailable", 10, []string{"accepted units = Redis sold"}},
		{"no answer within the client timeout", 7, 3, "none", "error", 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			released := make(chan struct{})
			var soldOut sync.Once
			base := startFake(t, stock, tt.sold, func(i int64, w http.ResponseWriter, r *http.Request) {
				if i > tt.fast+tt.slow {
					w.WriteHeader(410)
					fmt.Fprint(w, `{"status":"sold_out"}`)
					// The late answers leave well after this one
					// has stopped the load.
					soldOut.Do(func() { time.AfterFunc(300*time.Millisecond, func() { close(released) }) })
					return
				}
				id := i
				if i > tt.fast {
					select {
					case <-released:
					case <-r.Context().Done():
						return
					}
					switch tt.late {
					case "none":
						<-r.Context().Done() // until the client gives up
						return
					case "503":
						w.WriteHeader(503)
						fmt.Fprint(w, `{"status":"unavailable"}`)
						return
					case "202 dup":
						id = i - tt.fast
					}
				}
				w.WriteHeader(202)
				fmt.Fprintf(w, `{"status":"accepted","order_id":"o%d"}`, id)
			})
			rep, err := Run(context.Background(), Options{URL: base, AdminURL: base, NoMySQL: true, NoKeys: true,
				Stock: stock, Users: 100, Conns: 8, UntilSoldOut: true, MaxDuration: 10 * time.Second, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			logReport(t, rep)
			failed := slices.Clone(tt.failed)
			slices.Sort(failed)
			if got := failedNames(rep.Checks); !slices.Equal(got, failed) {
				t.Errorf("failed %q, want %q", got, failed)
			}
			if rep.StoppedBy != "sold-out" {
				t.Errorf("stopped by %q, want sold-out", rep.StoppedBy)
			}
			// Every late answer counted, none left out.
			want := tt.slow
			if tt.outcome == "accepted" {
				want += tt.fast
			}
			var got int64
			for _, o := range rep.Outcomes {
				if o.Status == tt.outcome {
					got = o.Count
				}
			}
			if got != want {
				t.Errorf("%d answers counted %s, want %d", got, tt.outcome, want)
			}
		})
	}
}

// syncBuffer lets the test read what the progress goroutine wrote.
type syncBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// pipeline stands in for relay + RabbitMQ + consumer, which are not part of
// this package: it copies the sale's outbox stream into the scratch orders
// table, so that Run's MySQL path can be tested end to end. With drift, it
// loses the 7th order and writes the 8th twice, the second time under an
// order id nobody was given.
func pipeline(t *testing.T, g *testGateway, db *sql.DB, sale string, drift bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		last, n := "-", 0
		for ctx.Err() == nil {
			entries, err := g.rdb.XRangeN(ctx, g.keys.Outbox(sale), last, "+", 500).Result()
			if err != nil && ctx.Err() == nil {
				t.Errorf("read outbox: %v", err)
				return
			}
			for _, e := range entries {
				last = "(" + e.ID
				os, err := order.FromStreamEntry(e.Values)
				if err != nil {
					t.Errorf("outbox entry %s: %v", e.ID, err)
					return
				}
				for _, o := range os {
					n++
					if drift && n == 7 {
						continue
					}
					ids := []string{o.OrderID}
					if drift && n == 8 {
						ids = append(ids, "invented-"+sale)
					}
					for _, id := range ids {
						if _, err := db.ExecContext(ctx, `INSERT IGNORE INTO orders (order_id, sale_id, user_id, quantity, reserved_at) VALUES (?, ?, ?, ?, ?)`,
							id, o.SaleID, o.UserID, o.Quantity, o.ReservedAt); err != nil && ctx.Err() == nil {
							t.Errorf("insert: %v", err)
							return
						}
					}
				}
			}
			if len(entries) == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
}

// TestRunWithMySQL runs the whole check, MySQL included, with the outbox
// copied to MySQL a little later than the 202s.
func TestRunWithMySQL(t *testing.T) {
	db, dsn := orderdbtest.OpenDSN(t)
	g := startGateway(t)
	sale := "mysql-" + localstack.RandomHex(4)
	pipeline(t, g, db, sale, false)
	rep, err := Run(context.Background(), Options{
		URL: g.public, AdminURL: g.admin, Token: testToken, MySQLDSN: dsn, Sale: sale,
		Stock: 150, Users: 300, DupRatio: 0.2, Conns: 8, UntilSoldOut: true,
		MaxDuration: 8 * time.Second, DrainTimeout: 30 * time.Second, Timeline: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if f := rep.Figures; f.MySQLRows != 150 || f.MySQLUnits != 150 || rep.MySQLAfter == 0 {
		t.Errorf("MySQL %d rows %d units after %v; want 150", f.MySQLRows, f.MySQLUnits, rep.MySQLAfter)
	}
	// The rows read once a second only grow, up to the sale's, and the
	// picture of the run is a document.
	rows := rep.Timeline.Rows
	if len(rows) == 0 {
		t.Error("no MySQL readings in the timeline")
	}
	for i, r := range rows {
		if r.Value > 150 || (i > 0 && r.Value < rows[i-1].Value) {
			t.Errorf("MySQL readings %v: want growing, up to 150", rows)
			break
		}
	}
	if err := rep.WriteSVG(io.Discard); err != nil {
		t.Error(err)
	}
}

// TestRunCatchesMySQLDrift loses one order on the way to MySQL and invents
// one for a buyer who already has his unit: exactly the matching checks fail.
func TestRunCatchesMySQLDrift(t *testing.T) {
	db, dsn := orderdbtest.OpenDSN(t)
	g := startGateway(t)
	sale := "drift-" + localstack.RandomHex(4)
	pipeline(t, g, db, sale, true)
	rep, err := Run(context.Background(), Options{
		URL: g.public, AdminURL: g.admin, Token: testToken, MySQLDSN: dsn, Sale: sale,
		Stock: 50, Users: 100, Conns: 4, UntilSoldOut: true,
		// The wait ends once the counts agree (the drift keeps them equal);
		// the bound only needs room for a loaded machine.
		MaxDuration: 8 * time.Second, DrainTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	want := []string{"every 202's order id is in MySQL", "no MySQL row without a 202", "no user over the limit (MySQL)"}
	slices.Sort(want)
	if got := failedNames(rep.Checks); !slices.Equal(got, want) {
		t.Errorf("failed %q, want %q", got, want)
	}
}
