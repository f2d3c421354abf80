package admin_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/admin/admintest"
)

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
