package gateway

import (
	"encoding/json"
	"testing"

	"github.com/flashgate/flashgate/order"
)

// parseBuyReference is the slow, obviously right parser: encoding/json into
// a map with exact keys (the last of duplicates wins, as in parseBuy).
func parseBuyReference(body []byte) (buyRequest, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return buyRequest{}, false
	}
	var user string
	if raw, ok := m["user_id"]; !ok || json.Unmarshal(raw, &user) != nil || !order.ValidID(user) {
		return buyRequest{}, false
	}
	if len(m["user_id"]) == 0 || m["user_id"][0] != '"' {
		return buyRequest{}, false
	}
	r := buyRequest{user: []byte(user), quantity: 1}
	if raw, ok := m["quantity"]; ok && string(raw) != "null" {
		q, ok := wholeNumber(raw)
		if !ok || q < 1 || q > order.MaxQuantity {
			return buyRequest{}, false
		}
		r.quantity = int(q)
	}
	return r, true
}

var parseSeeds = []string{
	`{"user_id":"u1","quantity":2}`,
	`{"user_id":"u1"}`,
	` { "quantity" : 3 , "user_id" : "a.b@c:d-e_f" } `,
	`{"user_id":"u1","quantity":null}`,
	`{"user_id":"u1","x":{"user_id":"nested","a":[1,"]",{"q":"}"}]},"quantity":7}`,
	`{"user_id":"u\u0031","quantity":1}`,
	`{"user\u005fid":"u2"}`,
	`{"user_id":"first","user_id":"second"}`,
	`{"user_id":"u1","quantity":1.5}`,
	`{"user_id":"u1","quantity":"1"}`,
	`{"user_id":"u1","quantity":1e3}`,
	`{"user_id":"u1","quantity":-1}`,
	`{"user_id":"u1","quantity":0}`,
	`{"user_id":"u1","quantity":1001}`,
	`{"user_id":"a b"}`,
	`{"user_id":"a\"b"}`,
	`{"user_id":42}`,
	`{"user_id":"u1",}`,
	`{"user_id":"u1"} x`,
	`{"USER_ID":"u1"}`,
	`[]`, `null`, `""`, `{}`, `{`, ``,
}

func TestParseBuyMatchesReference(t *testing.T) {
	for _, s := range parseSeeds {
		got, reason := parseBuy([]byte(s))
		want, ok := parseBuyReference([]byte(s))
		if (reason == "") != ok || ok && !sameRequest(got, want) {
			t.Errorf("%q: parseBuy = %+v %q, reference = %+v %v", s, got, reason, want, ok)
		}
	}
}

// FuzzParseBuy checks the fast parser against the reference on any input.
func FuzzParseBuy(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, reason := parseBuy(body)
		want, ok := parseBuyReference(body)
		if (reason == "") != ok {
			t.Fatalf("%q: parseBuy accepts=%v (%q), reference accepts=%v", body, reason == "", reason, ok)
		}
		if ok && !sameRequest(got, want) {
			t.Fatalf("%q: parseBuy = %+v, reference = %+v", body, got, want)
		}
	})
}

func BenchmarkParseBuy(b *testing.B) {
	body := []byte(`{"user_id":"u-123456","quantity":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, reason := parseBuy(body); reason != "" {
			b.Fatal(reason)
		}
	}
}

func sameRequest(a, b buyRequest) bool {
	return string(a.user) == string(b.user) && a.quantity == b.quantity
}
