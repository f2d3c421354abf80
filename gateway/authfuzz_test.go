package gateway

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/order"
)

// FuzzToken feeds the token check Authorization values built from a fuzzed
// scheme, header JSON, claims JSON and signature (or a true HS256 signature
// of the fuzzed parts, so that the claims checks are reached). Whatever it
// accepts must hold up to an independent reading: "Bearer" and one token of
// exactly three base64url segments, a signature that is the HMAC-SHA256 of
// the first two, a header whose alg is HS256, an exp in the future and a
// sub that is a valid id and the one returned.
func FuzzToken(f *testing.F) {
	secret := []byte(testSecret)
	exp := time.Now().Add(24 * time.Hour).Unix()
	good := fmt.Sprintf(`{"sub":"alice","exp":%d}`, exp)
	for _, seed := range []struct {
		scheme, header, claims string
		sign                   bool
		sig                    string
	}{
		{"Bearer ", `{"alg":"HS256","typ":"JWT"}`, good, true, ""},
		{"bearer ", `{"alg":"HS256"}`, good, true, ""},
		{"Bearer ", `{"alg":"none"}`, good, false, ""},
		{"Bearer ", `{"alg":"HS256"}`, good, false, "AAAA"},
		{"Bearer ", `{"alg":"RS256"}`, good, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, `{"sub":"alice"}`, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, `{"sub":"alice","exp":1}`, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"a b","exp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d,"nbf":%d}`, exp, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":"%d"}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","exp":%d.5,"aud":["x"]}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256","alg":"none"}`, good, true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","sub":"bob","exp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, good, true, ".x"},
		{"Bearer ", `{"alg":"HS256","AlG":""}`, fmt.Sprintf(`{"suB":"0","eXp":%d}`, exp), true, ""},
		{"Bearer ", `{"alg":"HS256"}`, fmt.Sprintf(`{"sub":"alice","SUB":"bob","exp":%d}`, exp), true, ""},
		{"Basic ", `{"alg":"HS256"}`, good, true, ""},
		{"Bearer", `{"alg":"HS256"}`, good, true, ""},
		{"", "", "", false, ""},
	} {
		f.Add(seed.scheme, []byte(seed.header), []byte(seed.claims), seed.sign, seed.sig)
	}
	a, err := newKeyAuth(secret)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, scheme string, header, claims []byte, signIt bool, sig string) {
		input := b64(header) + "." + b64(claims)
		tok := input + "."
		if signIt {
			tok += b64(hs256(secret, input))
		}
		tok += sig
		var h fasthttp.RequestHeader
		h.Set("Authorization", scheme+tok)
		// fasthttp keeps what the client could have sent: read it back.
		value := string(h.Peek("Authorization"))
		sub, err := a.check(&h)
		if err != nil {
			return
		}
		rest, ok := strings.CutPrefix(strings.ToLower(value), "bearer ")
		if !ok {
			t.Fatalf("accepted %q without the Bearer scheme", value)
		}
		got := value[len(value)-len(strings.TrimLeft(rest, " ")):]
		parts := strings.Split(got, ".")
		if len(parts) != 3 {
			t.Fatalf("accepted %q: %d segments", got, len(parts))
		}
		mac, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
		if err != nil || !hmac.Equal(mac, hs256(secret, parts[0]+"."+parts[1])) {
			t.Fatalf("accepted %q without its HMAC-SHA256 signature", got)
		}
		// Member names are case-sensitive (RFC 7515 §4): read both
		// segments into maps, never into structs, which encoding/json
		// matches case-insensitively.
		var hdr map[string]any
		if err := decodeSegment(parts[0], &hdr); err != nil || hdr["alg"] != "HS256" {
			t.Fatalf("accepted %q with header alg %v (%v)", got, hdr["alg"], err)
		}
		var c map[string]any
		if err := decodeSegment(parts[1], &c); err != nil {
			t.Fatalf("accepted %q with claims that are not an object: %v", got, err)
		}
		// exp is a number, in the future.
		e, ok := c["exp"].(float64)
		if !ok || time.Unix(int64(e), 0).Before(time.Now().Add(-time.Second)) {
			t.Fatalf("accepted %q with exp %v", got, c["exp"])
		}
		if s, ok := c["sub"].(string); !ok || s != sub || !order.ValidID(sub) {
			t.Fatalf("accepted %q as %q with sub %v", got, sub, c["sub"])
		}
	})
}

// decodeSegment reads one base64url JSON segment into v.
func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
