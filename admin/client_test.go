package admin_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
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

// TestClientAnswers checks what the client makes of a 2xx answer: the
// fields, whether the sale was created, and the answer as it came.
func TestClientAnswers(t *testing.T) {
	const view = `{"status":"ok","sale_id":"s1","state":"live","stock":100,"sold":7,"remaining":93,"buyers":5,` +
		`"per_user_limit":2,"locked":true,"starts_at":"2030-01-01T09:00:00Z","ends_at":null,"outbox_pending":3,` +
		`"payment_window":900,"pending_payment":4}`
	const roomView = `{"status":"ok","sale_id":"room","state":"upcoming","stock":10,"sold":0,"remaining":10,"buyers":0,` +
		`"per_user_limit":1,"locked":false,"starts_at":null,"ends_at":null,"outbox_pending":0,"payment_window":0,` +
		`"pending_payment":0,"buckets":1,"waiting_room":"random","admit_per_second":25,"pass_seconds":90,"joined":1200,"admitted":40}`
	const list = `{"status":"ok","scripts":[{"name":"reserve","sha":"abc","folder_sha":"123"},{"name":"admin","sha":"def"},` +
		`{"name":"hold","sha":"789","folder_error":"open hold.lua: no such file"}],"folder":"unreadable","read_at":"2030-01-01T09:00:00.250Z"}`
	f := admintest.NewServer(t, map[string]admintest.Answer{
		"GET /admin/v1/sales/s1":    reply(200, view),
		"GET /admin/v1/sales/room":  reply(200, roomView),
		"PUT /admin/v1/sales/s1":    reply(201, view),
		"PUT /admin/v1/sales/s2":    reply(200, view),
		"GET /admin/v1/scripts":     reply(200, list),
		"GET /admin/v1/sales/plain": reply(200, `not json`),
	})
	c := newClient(t, f.URL, testToken)
	ctx := testCtx(t)

	s, err := c.Sale(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := admin.Sale{ID: "s1", State: "live", Stock: 100, Sold: 7, Remaining: 93, Buyers: 5, Limit: 2, Locked: true,
		StartsAt: timep("2030-01-01T09:00:00Z"), OutboxPending: 3, PaymentWindow: 900, PendingPayment: 4, Raw: []byte(view)}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("sale %+v, want %+v", *s, want)
	}
	s, err = c.Sale(ctx, "room")
	if err != nil {
		t.Fatal(err)
	}
	wantRoom := admin.Sale{ID: "room", State: "upcoming", Stock: 10, Remaining: 10, Limit: 1, Buckets: 1,
		WaitingRoom: admin.RoomRandom, AdmitPerSecond: 25, PassSeconds: 90, Joined: 1200, Admitted: 40, Raw: []byte(roomView)}
	if !reflect.DeepEqual(*s, wantRoom) {
		t.Errorf("sale with a waiting room %+v, want %+v", *s, wantRoom)
	}
	if s, err := c.Upsert(ctx, "s1", admin.SaleUpdate{Stock: int64p(1)}); err != nil || !s.Created {
		t.Errorf("a 201: %+v, %v; want Created", s, err)
	}
	if s, err := c.Upsert(ctx, "s2", admin.SaleUpdate{Stock: int64p(1)}); err != nil || s.Created {
		t.Errorf("a 200: %+v, %v; want not Created", s, err)
	}
	l, err := c.Scripts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantL := admin.ScriptList{Scripts: []admin.Script{{Name: "reserve", SHA: "abc", FolderSHA: "123"}, {Name: "admin", SHA: "def"},
		{Name: "hold", SHA: "789", FolderError: "open hold.lua: no such file"}},
		Folder: admin.FolderUnreadable, ReadAt: timep("2030-01-01T09:00:00.250Z"), Raw: []byte(list)}
	if !reflect.DeepEqual(*l, wantL) {
		t.Errorf("scripts %+v (%s), want %+v", *l, l.Raw, wantL)
	}
	var ae *admin.APIError
	if _, err := c.Sale(ctx, "plain"); err == nil || errors.As(err, &ae) {
		t.Errorf("a 200 that is not JSON: %v, want an error that is not an *APIError", err)
	}
}

// TestOrderAnswers checks what the client makes of the order view: a
// deadline to the millisecond while a payment is due, none after.
func TestOrderAnswers(t *testing.T) {
	const pending = `{"status":"queued","order_id":"o1","sale_id":"s1","user_id":"u:1","quantity":2,` +
		`"state":"pending_payment","pay_by":"2030-01-01T09:00:00.123Z"}`
	const paid = `{"status":"created","order_id":"o1","sale_id":"s1","user_id":"u:1","quantity":2,"state":"paid","pay_by":null}`
	f := admintest.NewServer(t, map[string]admintest.Answer{
		"GET /v1/sales/s1/orders/o1":               reply(200, pending),
		"POST /admin/v1/sales/s1/orders/o1/pay":    reply(200, paid),
		"POST /admin/v1/sales/s1/orders/o2/cancel": reply(200, `{"status":"queued","state":"cancelled"`),
		"POST /admin/v1/sales/s1/orders/o3/cancel": reply(409, `{"status":"order_paid"}`),
		"POST /admin/v1/sales/s1/orders/gone/pay":  reply(404, `{"status":"not_found"}`),
		"POST /admin/v1/sales/s1/orders/late/pay":  reply(409, `{"status":"order_expired"}`),
	})
	c := newClient(t, f.URL, testToken)
	ctx := testCtx(t)

	o, err := admin.ShowOrder(ctx, f.URL, "s1", "o1")
	if err != nil {
		t.Fatal(err)
	}
	payBy := time.Date(2030, 1, 1, 9, 0, 0, 123_000_000, time.UTC)
	want := admin.Order{Status: "queued", ID: "o1", SaleID: "s1", UserID: "u:1", Quantity: 2, State: "pending_payment", PayBy: &payBy, Raw: []byte(pending)}
	if o.PayBy == nil || !o.PayBy.Equal(payBy) {
		t.Errorf("pay_by %v, want %v", o.PayBy, payBy)
	}
	o.PayBy, want.PayBy = nil, nil
	if !reflect.DeepEqual(*o, want) {
		t.Errorf("order %+v, want %+v", *o, want)
	}

	o, err = c.Pay(ctx, "s1", "o1")
	if err != nil {
		t.Fatal(err)
	}
	if o.State != "paid" || o.Status != "created" || o.PayBy != nil || string(o.Raw) != paid {
		t.Errorf("paid order %+v", *o)
	}
	if _, err := c.Cancel(ctx, "s1", "o2"); err == nil {
		t.Errorf("a 200 that is not JSON: no error")
	}
	for _, tc := range []struct {
		call         func() (*admin.Order, error)
		code         int
		status, what string
	}{
		{func() (*admin.Order, error) { return c.Cancel(ctx, "s1", "o3") }, 409, "order_paid", "cancel of a paid order"},
		{func() (*admin.Order, error) { return c.Pay(ctx, "s1", "gone") }, 404, "not_found", "pay of a missing order"},
		{func() (*admin.Order, error) { return c.Pay(ctx, "s1", "late") }, 409, "order_expired", "pay past pay_by"},
	} {
		o, err := tc.call()
		if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != tc.code || ae.Status != tc.status || o != nil {
			t.Errorf("%s: %+v, %v; want an *APIError %d %s", tc.what, o, err, tc.code, tc.status)
		}
	}
	if _, err := admin.ShowOrder(ctx, "ftp://x", "s1", "o1"); !errors.Is(err, admin.ErrBaseURL) {
		t.Errorf("ShowOrder on a bad URL: %v, want ErrBaseURL", err)
	}
}

func TestAPIError(t *testing.T) {
	for _, tc := range []struct {
		name             string
		call             func(*admin.Client, context.Context) error
		key              string
		answer           admintest.Answer
		code             int
		status, message  string
		wantText         string // the whole Error() after the URL
		wantMethod, path string
	}{
		{
			name: "conflict names code, status and error",
			call: func(c *admin.Client, ctx context.Context) error {
				_, err := c.Upsert(ctx, "s1", admin.SaleUpdate{Stock: int64p(1)})
				return err
			},
			key:    "PUT /admin/v1/sales/s1",
			answer: reply(409, `{"status":"conflict","error":"stock below sold"}`),
			code:   409, status: "conflict", message: "stock below sold",
			wantText: ": 409 Conflict: conflict: stock below sold", wantMethod: "PUT", path: "/admin/v1/sales/s1",
		},
		{
			name:   "script error",
			call:   func(c *admin.Client, ctx context.Context) error { _, err := c.ReloadScripts(ctx); return err },
			key:    "POST /admin/v1/scripts/reload",
			answer: reply(422, `{"status":"script_error","error":"reserve.lua: line 3"}`),
			code:   422, status: "script_error", message: "reserve.lua: line 3",
			wantText: ": 422 Unprocessable Entity: script_error: reserve.lua: line 3", wantMethod: "POST", path: "/admin/v1/scripts/reload",
		},
		{
			name:   "unauthorized",
			call:   func(c *admin.Client, ctx context.Context) error { _, err := c.Lock(ctx, "s1"); return err },
			key:    "POST /admin/v1/sales/s1/lock",
			answer: reply(401, `{"status":"unauthorized"}`),
			code:   401, status: "unauthorized",
			wantText: ": 401 Unauthorized: unauthorized", wantMethod: "POST", path: "/admin/v1/sales/s1/lock",
		},
		{
			name:     "an answer that is not JSON",
			call:     func(c *admin.Client, ctx context.Context) error { _, err := c.Sale(ctx, "s1"); return err },
			key:      "GET /admin/v1/sales/s1",
			answer:   reply(502, `<html>bad gateway</html>`),
			code:     502,
			wantText: ": 502 Bad Gateway", wantMethod: "GET", path: "/admin/v1/sales/s1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admintest.NewServer(t, map[string]admintest.Answer{tc.key: tc.answer})
			err := tc.call(newClient(t, f.URL, testToken), testCtx(t))
			var ae *admin.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v, want an *APIError", err)
			}
			if ae.Code != tc.code || ae.Status != tc.status || ae.Message != tc.message ||
				ae.Method != tc.wantMethod || ae.URL != f.URL+tc.path {
				t.Errorf("%+v, want code %d, status %q, message %q, %s %s", *ae, tc.code, tc.status, tc.message, tc.wantMethod, f.URL+tc.path)
			}
			if want := tc.wantMethod + " " + f.URL + tc.path + tc.wantText; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
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

func TestReady(t *testing.T) {
	srv := admintest.NewServer(t, map[string]admintest.Answer{"GET /readyz": reply(200, `{"status":"ok"}`)})
	srv.Otherwise(reply(404, `{"status":"not_found"}`))
	ctx := testCtx(t)

	body, err := admin.Ready(ctx, srv.URL+"/readyz")
	if err != nil || string(body) != `{"status":"ok"}` {
		t.Errorf("ready gateway: %q, %v", body, err)
	}
	srv.Set("GET /readyz", reply(503, `{"status":"unavailable","error":"draining"}`))
	_, err = admin.Ready(ctx, srv.URL+"/readyz")
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != 503 || ae.Status != "unavailable" || ae.Message != "draining" {
		t.Errorf("draining gateway: error %v", err)
	}
	if _, err := admin.Ready(ctx, srv.URL+"/nope"); err == nil {
		t.Errorf("a 404: no error")
	}
	for _, r := range srv.Requests() {
		if r.Auth != "" {
			t.Errorf("Ready sent a token to the public listener: %q", r.Auth)
		}
	}
}

// TestNoRedirect: a redirect is an answer, never followed with the token.
func TestNoRedirect(t *testing.T) {
	var elsewhere sync.Mutex
	hit := false
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		elsewhere.Lock()
		hit = true
		elsewhere.Unlock()
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL+"/admin/v1/sales/s1", http.StatusFound))
	defer redirect.Close()
	_, err := newClient(t, redirect.URL, testToken).Sale(testCtx(t), "s1")
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != http.StatusFound {
		t.Errorf("error %v, want an *APIError with 302", err)
	}
	elsewhere.Lock()
	defer elsewhere.Unlock()
	if hit {
		t.Errorf("the redirect was followed")
	}
}

func TestNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = newClient(t, addr, testToken).Sale(testCtx(t), "s1")
	var ae *admin.APIError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("error %v, want a failure that is not an answer", err)
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

// TestListenerURL holds the cases of the two functions ListenerURL
// replaced (the CLI's listenerURL and the bench command's dialable), with
// the one answer for "::" they disagreed on.
func TestListenerURL(t *testing.T) {
	for _, tc := range []struct{ name, addr, want string }{
		{"IPv4 wildcard", "0.0.0.0:8081", "http://127.0.0.1:8081"},
		{"empty host", ":8081", "http://127.0.0.1:8081"},
		{"IPv6 wildcard: 127.0.0.1 reaches Go's dual-stack socket, ::1 needs IPv6", "[::]:8081", "http://127.0.0.1:8081"},
		{"IPv6 wildcard spelled out", "[0:0:0:0:0:0:0:0]:8081", "http://127.0.0.1:8081"},
		{"IPv4-mapped wildcard", "[::ffff:0.0.0.0]:8081", "http://127.0.0.1:8081"},
		{"loopback", "127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"IPv6 loopback", "[::1]:8081", "http://[::1]:8081"},
		{"an address", "10.1.2.3:8081", "http://10.1.2.3:8081"},
		{"an IPv6 address", "[fd00::1]:8081", "http://[fd00::1]:8081"},
		{"a name", "localhost:8081", "http://localhost:8081"},
		{"no port: as it is", "gateway", "http://gateway"},
	} {
		if got := admin.ListenerURL(tc.addr); got != tc.want {
			t.Errorf("%s: ListenerURL(%q) = %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
}
