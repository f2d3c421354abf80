package sale

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

func testKey(t testing.TB, hexKey string) *TicketKey {
	t.Helper()
	k, err := NewTicketKey(hexKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const key1 = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

// A ticket reads back as signed, for its sale and its key only; any
// changed byte, another sale, another key or a malformed one is refused.
func TestTicketRoundTrip(t *testing.T) {
	k := testKey(t, key1)
	want := Ticket{User: "u-1@shop", Join: 123456, Prequeue: -1,
		Clock: Clock{Version: 1733150000123, At: 1733150000000, Head: 42, Rate: 1_000_000}}
	tk := k.Sign(nil, "sale-1", want)
	got, err := k.Read("sale-1", tk)
	if err != nil || got != want {
		t.Fatalf("Read(Sign(%+v)) = %+v, %v", want, got, err)
	}
	sealed := want
	sealed.Prequeue = 0
	if got, err := k.Read("sale-1", k.Sign(nil, "sale-1", sealed)); err != nil || got.Prequeue != 0 {
		t.Fatalf("a sealed empty pre-queue: %+v, %v", got, err)
	}
	other := testKey(t, strings.Repeat("ab", 32))
	raw, _ := base64.RawURLEncoding.DecodeString(string(tk))
	refused := map[string][]byte{
		"another sale":   nil,
		"another key":    nil,
		"empty":          {},
		"not base64":     []byte("!!!!"),
		"padded":         append(append([]byte(nil), tk...), '='),
		"cut short":      tk[:len(tk)-1],
		"too long":       []byte(strings.Repeat("A", MaxTicket+1)),
		"only a mac":     []byte(base64.RawURLEncoding.EncodeToString(raw[len(raw)-macSize:])),
		"version 2":      resign(k, "sale-1", raw, func(p []byte) { p[0] = 2 }),
		"user too long":  resign(k, "sale-1", raw, func(p []byte) { p[len(p)-len(want.User)-1]++ }),
		"join number 0":  resign(k, "sale-1", raw, func(p []byte) { p[1], p[2], p[3] = 0x80, 0x80, 0 }),
		"trailing bytes": resign(k, "sale-1", append(append([]byte(nil), raw[:len(raw)-macSize]...), 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), nil),
	}
	for i := range raw {
		for _, bit := range []byte{1, 0x80} {
			b := append([]byte(nil), raw...)
			b[i] ^= bit
			refused["byte "+itoa(i)+" bit "+itoa(int(bit))] = []byte(base64.RawURLEncoding.EncodeToString(b))
		}
	}
	for name, s := range refused {
		sale, key := "sale-1", k
		switch name {
		case "another sale":
			sale, s = "sale-2", tk
		case "another key":
			key, s = other, tk
		}
		if got, err := key.Read(sale, s); err != ErrBadTicket || got != (Ticket{}) {
			t.Errorf("%s: Read = %+v, %v; want ErrBadTicket", name, got, err)
		}
	}
}

// resign changes a ticket's payload with f and signs it again, as a forger
// holding the key could: what the MAC cannot refuse, the reader must.
func resign(k *TicketKey, sale string, raw []byte, f func([]byte)) []byte {
	p := append([]byte(nil), raw[:len(raw)-macSize]...)
	if f != nil {
		f(p)
	}
	return []byte(base64.RawURLEncoding.EncodeToString(k.mac(p, sale, p)))
}

// The MAC is HMAC-SHA256 as the standard library computes it.
func TestTicketMACIsHMAC(t *testing.T) {
	k := testKey(t, key1)
	raw, _ := hex.DecodeString(key1)
	d := hmac.New(sha256.New, raw)
	d.Write([]byte("flashgate ticket"))
	m := hmac.New(sha256.New, d.Sum(nil))
	m.Write([]byte("sale-1\x00payload"))
	if got, want := k.mac(nil, "sale-1", []byte("payload")), m.Sum(nil)[:macSize]; !bytes.Equal(got, want) {
		t.Fatalf("mac = %x, want %x", got, want)
	}
}

// Reading a ticket, a poll's whole cost in crypto, allocates only the
// buyer's id.
func TestTicketReadAllocs(t *testing.T) {
	k := testKey(t, key1)
	tk := k.Sign(nil, "s", Ticket{User: "u", Join: 7, Prequeue: -1, Clock: Clock{Rate: 100}})
	if n := testing.AllocsPerRun(100, func() { k.Read("s", tk) }); n > 1 {
		t.Errorf("Read allocates %.0f times, want at most 1", n)
	}
}

func BenchmarkTicketRead(b *testing.B) {
	k := testKey(b, key1)
	tk := k.Sign(nil, "sale-1", Ticket{User: "user-12345", Join: 123456, Prequeue: -1, Clock: Clock{Version: 1, At: 1, Rate: 100}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Read("sale-1", tk); err != nil {
			b.Fatal(err)
		}
	}
}
