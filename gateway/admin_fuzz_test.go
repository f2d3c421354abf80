package gateway

import (
	"encoding/json"
	"github.com/flashgate/flashgate/sale"
	"strconv"
	"testing"
	"time"
)

// The admin request parsers under fuzzing: no input makes them panic;
// whatever they accept holds up to an independent reading of the body
// (encoding/json's, field by field, with the contract's bounds), and
// written back as a canonical body it parses to the same values. Inputs
// that once failed are in testdata/fuzz/<target>/ and run with every `go
// test`.

// saleFields are the PUT body's fields that parseSaleUpdate reads.
var saleFields = map[string]bool{"stock": true, "per_user_limit": true, "payment_window": true, "starts_at": true, "ends_at": true}

var saleSeeds = []string{
	`{"stock":100,"per_user_limit":2}`,
	`{"stock":0}`,
	`{"stock":1000000000,"per_user_limit":1000000}`,
	`{"stock":1000000001}`,
	`{"stock":-1}`,
	`{"stock":-0}`,
	`{"stock":1.0}`,
	`{"stock":1e3}`,
	`{"stock":"5"}`,
	`{"stock":null}`,
	`{"stock":99999999999999999999}`,
	`{"per_user_limit":0}`,
	`{"starts_at":"2026-12-01T10:00:00Z","ends_at":"2026-12-01T11:00:00.123+01:00"}`,
	`{"starts_at":"2026-12-01T11:00:00Z","ends_at":"2026-12-01T10:00:00Z"}`,
	`{"starts_at":null,"ends_at":null}`,
	`{"starts_at":"1970-01-01T00:00:00Z"}`,
	`{"starts_at":"not a time"}`,
	`{"starts_at":12}`,
	`{"stock":1,"stock":2}`,
	`{"Stock":5}`,
	`{"stock":5,"payment_window":60,"buckets":4}`,
	`{"stock":5,"payment_window":86400,"buckets":1}`,
	`{"payment_window":86401}`,
	`{"payment_window":0}`,
	` {"stock" : 7 } `,
	`{}`,
	`[]`,
	`null`,
	`{"stock":5}{}`,
	``,
}

// referenceSaleUpdate reads a PUT body as the contract describes it, with
// encoding/json doing the JSON: an object; stock a whole number 0–1e9,
// per_user_limit 1–1e6, payment_window 0–86400, a time an RFC 3339 string
// after the epoch or null (sale.ClearTime), ends after starts when both are set.
// ok false: refused.
func referenceSaleUpdate(body []byte) (u sale.Update, ok bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil || raw == nil {
		return u, false
	}
	whole := func(field string, lo, hi int64) (*int64, bool) {
		r, present := raw[field]
		if !present {
			return nil, true
		}
		var n int64
		if string(r) == "null" || json.Unmarshal(r, &n) != nil || n < lo || n > hi {
			return nil, false
		}
		return &n, true
	}
	when := func(field string) (*int64, bool) {
		r, present := raw[field]
		if !present {
			return nil, true
		}
		n := int64(sale.ClearTime)
		if string(r) == "null" {
			return &n, true
		}
		var s string
		if json.Unmarshal(r, &s) != nil {
			return nil, false
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || t.UnixMilli() <= 0 {
			return nil, false
		}
		n = t.UnixMilli()
		return &n, true
	}
	var okS, okL, okW, okA, okE bool
	u.Stock, okS = whole("stock", 0, sale.MaxStock)
	u.Limit, okL = whole("per_user_limit", 1, sale.MaxLimit)
	u.PaymentWindow, okW = whole("payment_window", 0, sale.MaxPaymentWindow)
	u.StartsAt, okA = when("starts_at")
	u.EndsAt, okE = when("ends_at")
	if !okS || !okL || !okW || !okA || !okE {
		return sale.Update{}, false
	}
	if u.StartsAt != nil && u.EndsAt != nil && *u.StartsAt > 0 && *u.EndsAt > 0 && *u.EndsAt <= *u.StartsAt {
		return sale.Update{}, false
	}
	return u, true
}

// onlySaleFields reports whether body is an object of no other fields than
// saleFields, so that the reference's reading is the whole of it.
func onlySaleFields(body []byte) bool {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return false
	}
	for k := range raw {
		if !saleFields[k] {
			return false
		}
	}
	return true
}

// canonicalSale writes u back as a PUT body.
func canonicalSale(u sale.Update) []byte {
	b := []byte{'{'}
	field := func(name string, v []byte) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, name)
		b = append(append(b, ':'), v...)
	}
	num := func(name string, p *int64) {
		if p != nil {
			field(name, strconv.AppendInt(nil, *p, 10))
		}
	}
	ts := func(name string, p *int64) {
		switch {
		case p == nil:
		case *p == sale.ClearTime:
			field(name, []byte("null"))
		default:
			field(name, strconv.AppendQuote(nil, time.UnixMilli(*p).UTC().Format(time.RFC3339Nano)))
		}
	}
	num("stock", u.Stock)
	num("per_user_limit", u.Limit)
	num("payment_window", u.PaymentWindow)
	ts("starts_at", u.StartsAt)
	ts("ends_at", u.EndsAt)
	return append(b, '}')
}

func sameUpdate(a, b sale.Update) bool {
	eq := func(x, y *int64) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return eq(a.Stock, b.Stock) && eq(a.Limit, b.Limit) && eq(a.PaymentWindow, b.PaymentWindow) &&
		eq(a.StartsAt, b.StartsAt) && eq(a.EndsAt, b.EndsAt)
}

func show(u sale.Update) string { return string(canonicalSale(u)) }

// FuzzAdminSale fuzzes the PUT /admin/v1/sales/{sale_id} body parser.
func FuzzAdminSale(f *testing.F) {
	for _, s := range saleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, reason := parseSaleUpdate(body)
		want, ok := referenceSaleUpdate(body)
		if reason != "" {
			// Fields the reference does not know (added to the contract
			// later) may refuse a body it would take.
			if ok && onlySaleFields(body) {
				t.Fatalf("%q refused (%s); the contract takes it as %s", body, reason, show(want))
			}
			return
		}
		if !ok {
			t.Fatalf("%q accepted as %s; the contract refuses it", body, show(got))
		}
		if !sameUpdate(got, want) {
			t.Fatalf("%q read as %s; the contract reads %s", body, show(got), show(want))
		}
		again, reason := parseSaleUpdate(canonicalSale(got))
		if reason != "" || !sameUpdate(again, got) {
			t.Fatalf("%q: %s written back reads as %s (%q)", body, show(got), show(again), reason)
		}
	})
}

var restockSeeds = []string{
	`{"quantity":1,"QUANTITY":1000000000}`, `{"Quantity":5}`,
	`{"quantity":5}`,
	`{"quantity":1}`,
	`{"quantity":1000000000}`,
	`{"quantity":1000000001}`,
	`{"quantity":0}`,
	`{"quantity":-5}`,
	`{"quantity":5.0}`,
	`{"quantity":5e0}`,
	`{"quantity":"5"}`,
	`{"quantity":null}`,
	`{"quantity":1,"quantity":2}`,
	`{"Quantity":5}`,
	`{"quantity":1,"QUANTITY":1000000000}`,
	`{"quantity":5,"other":[1,{"quantity":9}]}`,
	`{}`,
	`[]`,
	`null`,
	`5`,
	``,
}

// referenceRestock reads a restock body as the contract describes it: an
// object whose "quantity" (exactly that key; of two, the last) is a whole
// number from 1 to 1e9.
func referenceRestock(body []byte) (int64, bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil || raw == nil {
		return 0, false
	}
	r, present := raw["quantity"]
	var n int64
	if !present || string(r) == "null" || json.Unmarshal(r, &n) != nil || n < 1 || n > sale.MaxStock {
		return 0, false
	}
	return n, true
}

// FuzzRestock fuzzes the POST /admin/v1/sales/{sale_id}/restock body parser.
func FuzzRestock(f *testing.F) {
	for _, s := range restockSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, reason := parseRestock(body)
		if reason == "" {
			if got < 1 || got > sale.MaxStock {
				t.Fatalf("%q: accepted %d, outside 1–%d", body, got, sale.MaxStock)
			}
			again, reason := parseRestock([]byte(`{"quantity":` + strconv.FormatInt(got, 10) + `}`))
			if reason != "" || again != got {
				t.Fatalf("%q: %d written back reads as %d (%q)", body, got, again, reason)
			}
		}
		want, ok := referenceRestock(body)
		if (reason == "") != ok || ok && got != want {
			t.Fatalf("%q: parseRestock = %d %q; the contract reads %d, accepted %v", body, got, reason, want, ok)
		}
	})
}
