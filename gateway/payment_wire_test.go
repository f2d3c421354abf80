package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// A payment window's bytes, without Redis: the PUT fields that set it, and
// the pay_by of the 202 and of the order view.

// The PUT body's payment_window and buckets, by API.md's bounds; buckets
// above 1 are refused until buckets are built.
func TestParseSalePaymentFields(t *testing.T) {
	tests := []struct {
		body   string
		window int64 // -1: absent
		bad    string
	}{
		{`{"stock":1}`, -1, ""},
		{`{"stock":1,"payment_window":0}`, 0, ""},
		{`{"stock":1,"payment_window":86400}`, 86400, ""},
		{`{"payment_window":900,"buckets":1}`, 900, ""},
		{`{"payment_window":86401}`, -1, "payment_window"},
		{`{"payment_window":-1}`, -1, "payment_window"},
		{`{"payment_window":1.5}`, -1, "payment_window"},
		{`{"payment_window":"60"}`, -1, "payment_window"},
		{`{"payment_window":null}`, -1, "payment_window"},
		{`{"buckets":0}`, -1, "buckets must"},
		{`{"buckets":17}`, -1, "buckets must"},
		{`{"buckets":1.5}`, -1, "buckets must"},
		{`{"buckets":"2"}`, -1, "buckets must"},
		{`{"buckets":2}`, -1, ""},
		{`{"buckets":16}`, -1, ""},
	}
	for _, tc := range tests {
		u, reason := parseSaleUpdate([]byte(tc.body))
		switch {
		case tc.bad != "":
			if !strings.Contains(reason, tc.bad) {
				t.Errorf("%s: reason %q, want one about %s", tc.body, reason, tc.bad)
			}
		case reason != "":
			t.Errorf("%s: refused: %s", tc.body, reason)
		case tc.window < 0 && u.PaymentWindow != nil, tc.window >= 0 && (u.PaymentWindow == nil || *u.PaymentWindow != tc.window):
			t.Errorf("%s: payment_window %v, want %d", tc.body, u.PaymentWindow, tc.window)
		}
	}
}

// The 202 and the order view as bytes: pay_by to the millisecond in UTC,
// also when the milliseconds are zeros.
func TestOrderViewBytes(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC).UnixMilli()
	got := string(appendAccepted(nil, "o1", "s", "u", 2, at))
	want := `{"status":"accepted","order_id":"o1","sale_id":"s","user_id":"u","quantity":2,"state":"pending_payment","pay_by":"2026-03-01T12:00:05.000Z"}`
	if got != want {
		t.Errorf("202 body\n%s\nwant\n%s", got, want)
	}
	got = string(appendAccepted(nil, "o1", "s", "u", 1, 0))
	if !strings.HasSuffix(got, `"state":"confirmed","pay_by":null}`) {
		t.Errorf("202 body without a window: %s", got)
	}
	for _, tc := range []struct {
		r    scripts.Record
		want string
	}{
		{scripts.Record{State: order.StatePendingPayment, PayBy: at + 7, Quantity: 1, UserID: "u"},
			`{"status":"queued","order_id":"o","sale_id":"s","user_id":"u","quantity":1,"state":"pending_payment","pay_by":"2026-03-01T12:00:05.007Z"}`},
		{scripts.Record{Created: true, State: order.StatePaid, PayBy: at, Quantity: 1, UserID: "u"},
			`{"status":"created","order_id":"o","sale_id":"s","user_id":"u","quantity":1,"state":"paid","pay_by":null}`},
	} {
		if got := string(appendOrderView(nil, "s", "o", tc.r)); got != tc.want {
			t.Errorf("order view\n%s\nwant\n%s", got, tc.want)
		}
	}
}
