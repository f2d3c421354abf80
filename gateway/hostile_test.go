package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"github.com/flashgate/flashgate/sale/saletest"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// rawFields sends one request over a fresh connection with the header
// lines given as they go on the wire (each ending in CRLF), so that a test
// can send what net/http would tidy up: a field twice, white space after a
// value, a fold. It reads the JSON answer.
func rawFields(t *testing.T, addr, method, target, body, fields string) response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	wire := method + " " + target + " HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n" + fields + "\r\n" + body
	if _, err := io.WriteString(c, wire); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	r := response{code: res.StatusCode, hdr: res.Header}
	if r.raw, err = io.ReadAll(res.Body); err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	if err := json.Unmarshal(r.raw, &r.body); err != nil {
		t.Errorf("%s %s: %d body is not JSON: %q", method, target, r.code, r.raw)
	}
	return r
}

// idemKeys counts the Idempotency-Keys Redis holds for a sale, on every
// primary (SCAN on a cluster client asks one node only).
func (g *testGateway) idemKeys(sale string) int {
	g.t.Helper()
	var mu sync.Mutex
	n := 0
	err := scripts.ForEachPrimary(context.Background(), g.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		iter := node.Scan(ctx, 0, g.keys.Idem(sale, "*"), 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

func randomKey(t testing.TB) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// Issue 12, finding 6: every random Idempotency-Key sent to a sold-out
// sale was kept for 24 h, so Redis grew with the number of keys a client
// cared to send (200,000 keys: 70 MB), and with maxmemory and noeviction a
// full Redis would refuse buys. A refusal keeps no key now: 5,000 hostile
// keys leave the one key of the one accepted order, which still replays
// byte for byte.
func TestHostileIdempotencyKeysKeepNothing(t *testing.T) { forEachMode(t, testHostileIdemKeys) }

func testHostileIdemKeys(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("gone", `{"stock":1}`)
	first := g.buy("gone", "buyer", 1, "the-one-order")
	if first.code != 202 {
		t.Fatalf("first buy: %d %s", first.code, first.raw)
	}
	const hostile = 5000
	keys := make([]string, hostile)
	for i := range keys {
		keys[i] = randomKey(t)
	}
	var mu sync.Mutex
	answers := map[string]int{}
	saletest.Burst(hostile, 32, func(i int) {
		r := g.buy("gone", "h"+itoa(i%50), 1, keys[i])
		mu.Lock()
		answers[strconv.Itoa(r.code)+" "+r.status()]++
		mu.Unlock()
	})
	if answers["410 sold_out"] != hostile {
		t.Errorf("hostile buys answered %v, want %d × 410 sold_out", answers, hostile)
	}
	if n := g.idemKeys("gone"); n != 1 {
		t.Errorf("after %d refused keys Redis holds %d idempotency keys of the sale, want 1 (the accepted order's)", hostile, n)
	}
	ttl := g.rdb.TTL(context.Background(), g.keys.Idem("gone", "the-one-order")).Val()
	if ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("the accepted order's key lives %v, want 24 h", ttl)
	}
	// The accepted order's replay holds, though the sale is sold out.
	if r := g.buy("gone", "buyer", 1, "the-one-order"); r.code != 202 || !bytes.Equal(r.raw, first.raw) {
		t.Errorf("replay of the accepted order: %d %s, want %s", r.code, r.raw, first.raw)
	}
	if sold := g.checkLedger("gone"); sold != 1 {
		t.Errorf("sold %d, want 1", sold)
	}
}

// A key whose first request was refused is not remembered: a repeat is
// decided again, so that once the refusal no longer holds (a restock, an
// unlock) the same key buys, exactly once, and from then on replays that
// order byte for byte, also when the repeats arrive together; a key that
// bought is the user's and quantity's, as for any accepted order.
func TestRefusedKeyBuysLater(t *testing.T) {
	g := startGateway(t)
	g.mustSale("later", `{"stock":0}`)
	g.mustSale("shut", `{"stock":5}`)
	if r := g.adminPost("shut", "lock", ""); r.code != 200 {
		t.Fatalf("lock: %d %s", r.code, r.raw)
	}
	tests := []struct {
		sale, refusal string
		code          int
		reopen        func()
	}{
		{"later", "sold_out", 410, func() {
			if r := g.adminPost("later", "restock", `{"quantity":1}`); r.code != 200 {
				t.Fatalf("restock: %d %s", r.code, r.raw)
			}
		}},
		{"shut", "locked", 423, func() {
			if r := g.adminPost("shut", "unlock", ""); r.code != 200 {
				t.Fatalf("unlock: %d %s", r.code, r.raw)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.refusal, func(t *testing.T) {
			together := func() []response {
				rs := make([]response, 40)
				saletest.Burst(len(rs), len(rs), func(i int) { rs[i] = g.buy(tc.sale, "kim", 1, "retry-me") })
				return rs
			}
			for _, r := range together() {
				if r.code != tc.code || r.status() != tc.refusal {
					t.Fatalf("while refused: %d %s, want %d %s", r.code, r.raw, tc.code, tc.refusal)
				}
			}
			if n := g.idemKeys(tc.sale); n != 0 {
				t.Errorf("refusals left %d idempotency keys", n)
			}
			tc.reopen()
			rs := together()
			for _, r := range rs {
				if r.code != 202 || !bytes.Equal(r.raw, rs[0].raw) {
					t.Fatalf("after reopening: %d %s, want the one 202 %s for all", r.code, r.raw, rs[0].raw)
				}
			}
			if v := g.view(tc.sale); v.num("sold") != 1 {
				t.Errorf("sold %d after %d repeats of one key, want 1", v.num("sold"), len(rs))
			}
			for _, other := range []struct {
				user string
				qty  int
			}{{"lee", 1}, {"kim", 2}} {
				if r := g.buy(tc.sale, other.user, other.qty, "retry-me"); r.code != 422 || r.status() != "idempotency_conflict" {
					t.Errorf("the key with %s × %d: %d %s, want 422 idempotency_conflict", other.user, other.qty, r.code, r.raw)
				}
			}
			if n := g.idemKeys(tc.sale); n != 1 {
				t.Errorf("%d idempotency keys after one accepted order, want 1", n)
			}
			g.checkLedger(tc.sale)
		})
	}
}

// Issue 12, finding 8: of two Idempotency-Key fields the first was used, so
// that the replay was keyed on what a proxy or log may read as the second.
// Two are ambiguous: 400, and nothing is reserved or kept.
func TestDuplicateIdempotencyKey(t *testing.T) {
	g := startGateway(t)
	g.mustSale("dup", `{"stock":10,"per_user_limit":5}`)
	addr := g.srv.Addr()
	body := `{"user_id":"u1","quantity":1}`
	tests := []struct {
		name   string
		fields string
		code   int
		status string
	}{
		{"two keys", "Idempotency-Key: k1\r\nIdempotency-Key: k2\r\n", 400, "bad_request"},
		{"one key twice", "Idempotency-Key: k1\r\nIdempotency-Key: k1\r\n", 400, "bad_request"},
		{"names cased apart", "Idempotency-Key: k1\r\nidempotency-key: k3\r\n", 400, "bad_request"},
		{"an empty key", "Idempotency-Key:\r\n", 400, "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rawFields(t, addr, "POST", "/v1/sales/dup/orders", body, tc.fields)
			if r.code != tc.code || r.status() != tc.status || r.str("error") == "" {
				t.Errorf("%d %s, want %d %s with an error", r.code, r.raw, tc.code, tc.status)
			}
		})
	}
	if v := g.view("dup"); v.num("sold") != 0 || v.num("outbox_pending") != 0 {
		t.Errorf("refused requests reserved: %s", v.raw)
	}
	if n := g.idemKeys("dup"); n != 0 {
		t.Errorf("refused requests left %d idempotency keys", n)
	}
	if r := rawFields(t, addr, "POST", "/v1/sales/dup/orders", body, "Idempotency-Key: k1\r\n"); r.code != 202 {
		t.Errorf("one key: %d %s", r.code, r.raw)
	}
}
