package admin_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/admin/admintest"
)

// The client is tested against admintest's stand-in: what is under test is
// how it builds its requests and reads the answers. The admin API itself is
// tested against real Redis in gateway/.

const testToken = "admin-test-token-0123456789"

func req(method, path, body, auth string) admintest.Request {
	return admintest.Request{Method: method, Path: path, Body: body, Auth: auth}
}

func reply(code int, body string) admintest.Answer { return admintest.Answer{Code: code, Body: body} }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, base, token string, opts ...admin.Option) *admin.Client {
	t.Helper()
	c, err := admin.New(base, token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func int64p(n int64) *int64 { return &n }

func strp(s string) *string { return &s }

func timep(s string) *time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return &t
}

func TestClientRequests(t *testing.T) {
	notFound := reply(http.StatusNotFound, `{"status":"not_found"}`)
	bearer := "Bearer " + testToken
	sale := func(f func(*admin.Client, context.Context) (*admin.Sale, error)) func(*admin.Client, context.Context) error {
		return func(c *admin.Client, ctx context.Context) error { _, err := f(c, ctx); return err }
	}
	order := func(f func(*admin.Client, context.Context) (*admin.Order, error)) func(*admin.Client, context.Context) error {
		return func(c *admin.Client, ctx context.Context) error { _, err := f(c, ctx); return err }
	}
	for _, tc := range []struct {
		name    string
		call    func(*admin.Client, context.Context) error
		answers map[string]admintest.Answer
		want    []admintest.Request
		wantErr error // matched with errors.Is; nil: success, unless wantCode
		// wantCode, when not 0, is the Code of the *APIError wanted.
		wantCode int
	}{
		{
			name: "show",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Sale(ctx, "s1") }),
			want: []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
		},
		{
			name: "create asks first, then sends the fields given",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(100), Limit: int64p(2),
					StartsAt: timep("2030-01-01T09:00:00Z"), EndsAt: timep("2030-01-01T10:30:00+01:00")})
			}),
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound, "PUT /admin/v1/sales/s1": reply(201, admintest.OK)},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":100,"per_user_limit":2,"starts_at":"2030-01-01T09:00:00Z","ends_at":"2030-01-01T10:30:00+01:00"}`, bearer),
			},
		},
		{
			name: "create with only stock leaves the rest to the API's defaults",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(0)})
			}),
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":0}`, bearer),
			},
		},
		{
			name: "create refuses an existing sale",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(5)})
			}),
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantErr: admin.ErrSaleExists,
		},
		{
			name: "update sends only what is given; a zero time is null",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{Stock: int64p(50), EndsAt: &time.Time{}})
			}),
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":50,"ends_at":null}`, bearer),
			},
		},
		{
			name: "update of the window",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{StartsAt: &time.Time{}, EndsAt: timep("2031-06-01T00:00:00Z"), Limit: int64p(3)})
			}),
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"starts_at":null,"ends_at":"2031-06-01T00:00:00Z","per_user_limit":3}`, bearer),
			},
		},
		{
			name: "update refuses a missing sale",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{Stock: int64p(50)})
			}),
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantErr: admin.ErrNoSale,
		},
		{
			name: "a failed read is not taken for a missing sale",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(5)})
			}),
			answers:  map[string]admintest.Answer{"GET /admin/v1/sales/s1": reply(503, `{"status":"unavailable"}`)},
			want:     []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantCode: 503,
		},
		{
			name: "upsert is one PUT",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Upsert(ctx, "s1", admin.SaleUpdate{Limit: int64p(4)})
			}),
			want: []admintest.Request{req("PUT", "/admin/v1/sales/s1", `{"per_user_limit":4}`, bearer)},
		},
		{
			name: "restock",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Restock(ctx, "s1", 25) }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/restock", `{"quantity":25}`, bearer)},
		},
		{
			name: "lock",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Lock(ctx, "s1") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/lock", "", bearer)},
		},
		{
			name: "unlock",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Unlock(ctx, "s1") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/unlock", "", bearer)},
		},
		{
			name: "id with the punctuation ids allow",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Sale(ctx, "Sale_1.a:b@c-d") }),
			want: []admintest.Request{req("GET", "/admin/v1/sales/Sale_1.a:b@c-d", "", bearer)},
		},
		{
			name: "an id is one path segment",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) { return c.Lock(ctx, "a/b?c") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/a%2Fb%3Fc/lock", "", bearer)},
		},
		{
			name: "create with a payment window",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(3), PaymentWindow: int64p(60)})
			}),
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":3,"payment_window":60}`, bearer),
			},
		},
		{
			name: "update to no payment window sends 0",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{PaymentWindow: int64p(0)})
			}),
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"payment_window":0}`, bearer),
			},
		},
		{
			name: "create with a waiting room sends its mode, rate and pass",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Create(ctx, "s1", admin.SaleUpdate{Stock: int64p(3), WaitingRoom: strp(admin.RoomFIFO),
					AdmitPerSecond: int64p(50), PassSeconds: int64p(300)})
			}),
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":3,"waiting_room":"fifo","admit_per_second":50,"pass_seconds":300}`, bearer),
			},
		},
		{
			name: "update of the admission rate alone leaves the room as it is",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{AdmitPerSecond: int64p(admin.MaxAdmitPerSecond)})
			}),
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"admit_per_second":1000000}`, bearer),
			},
		},
		{
			name: "update to no waiting room sends off",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Update(ctx, "s1", admin.SaleUpdate{WaitingRoom: strp(admin.RoomOff)})
			}),
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"waiting_room":"off"}`, bearer),
			},
		},
		{
			name: "a room that cannot change any more is the API's refusal",
			call: sale(func(c *admin.Client, ctx context.Context) (*admin.Sale, error) {
				return c.Upsert(ctx, "s1", admin.SaleUpdate{WaitingRoom: strp(admin.RoomRandom)})
			}),
			answers:  map[string]admintest.Answer{"PUT /admin/v1/sales/s1": reply(409, `{"status":"conflict","error":"window started"}`)},
			want:     []admintest.Request{req("PUT", "/admin/v1/sales/s1", `{"waiting_room":"random"}`, bearer)},
			wantCode: 409,
		},
		{
			name: "pay",
			call: order(func(c *admin.Client, ctx context.Context) (*admin.Order, error) { return c.Pay(ctx, "s1", "o1") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o1/pay", "", bearer)},
		},
		{
			name: "cancel",
			call: order(func(c *admin.Client, ctx context.Context) (*admin.Order, error) { return c.Cancel(ctx, "s1", "o1") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o1/cancel", "", bearer)},
		},
		{
			name: "an order id is one path segment",
			call: order(func(c *admin.Client, ctx context.Context) (*admin.Order, error) { return c.Pay(ctx, "s:1", "a/b?c") }),
			want: []admintest.Request{req("POST", "/admin/v1/sales/s:1/orders/a%2Fb%3Fc/pay", "", bearer)},
		},
		{
			name:     "pay of an expired order is the API's refusal",
			call:     order(func(c *admin.Client, ctx context.Context) (*admin.Order, error) { return c.Pay(ctx, "s1", "o1") }),
			answers:  map[string]admintest.Answer{"POST /admin/v1/sales/s1/orders/o1/pay": reply(409, `{"status":"order_expired"}`)},
			want:     []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o1/pay", "", bearer)},
			wantCode: 409,
		},
		{
			name: "show goes to the public listener, without the admin token",
			call: func(c *admin.Client, ctx context.Context) error {
				_, err := admin.ShowOrder(ctx, c.BaseURL(), "s1", "o/1")
				return err
			},
			want: []admintest.Request{req("GET", "/v1/sales/s1/orders/o%2F1", "", "")},
		},
		{
			name: "scripts list",
			call: func(c *admin.Client, ctx context.Context) error { _, err := c.Scripts(ctx); return err },
			want: []admintest.Request{req("GET", "/admin/v1/scripts", "", bearer)},
		},
		{
			name: "scripts reload",
			call: func(c *admin.Client, ctx context.Context) error { _, err := c.ReloadScripts(ctx); return err },
			want: []admintest.Request{req("POST", "/admin/v1/scripts/reload", "", bearer)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admintest.NewServer(t, tc.answers)
			err := tc.call(newClient(t, f.URL, testToken), testCtx(t))
			ae, answered := errors.AsType[*admin.APIError](err)
			switch {
			case tc.wantCode != 0 && (!answered || ae.Code != tc.wantCode):
				t.Fatalf("error %v, want an *APIError with %d", err, tc.wantCode)
			case tc.wantCode == 0 && tc.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			f.Check(t, tc.want)
		})
	}
}

func TestClientHeaders(t *testing.T) {
	f := admintest.NewServer(t, nil)
	ctx := testCtx(t)
	if _, err := newClient(t, f.URL, "", admin.WithUserAgent("flashgate-admin/test")).Sale(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if r := f.Requests(); r[0].Auth != "" || r[0].Agent != "flashgate-admin/test" {
		t.Errorf("no token, an agent: %+v", r[0])
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string // want "": refused
	}{
		{"http URL", "http://127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"bare host:port is http", "127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"https", "https://admin.example:443", "https://admin.example:443"},
		{"a path prefix, trailing slash dropped", "http://h:1/flashgate/", "http://h:1/flashgate"},
		{"IPv6", "[::1]:8081", "http://[::1]:8081"},
		{"another scheme", "ftp://127.0.0.1:8081", ""},
		{"no host", "http://", ""},
		{"a query", "http://127.0.0.1:8081?x=1", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := admin.New(tc.raw, "")
			switch {
			case tc.want == "" && !errors.Is(err, admin.ErrBaseURL):
				t.Errorf("New(%q): %v, want ErrBaseURL", tc.raw, err)
			case tc.want != "" && err != nil:
				t.Errorf("New(%q): %v", tc.raw, err)
			case tc.want != "" && c.BaseURL() != tc.want:
				t.Errorf("New(%q).BaseURL() = %q, want %q", tc.raw, c.BaseURL(), tc.want)
			}
		})
	}
}
