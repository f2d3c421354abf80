package bench

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// TestSignerToken checks a buyer token as a verifier would: three parts,
// the HS256 header, sub and exp, and the MAC over the first two; a second
// token from the same signer does not disturb what the first said.
func TestSignerToken(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-secret"
	s := newSigner(secret, 1_900_000_000)
	for _, user := range []string{"u1", "buyer:42@shop", "u1"} {
		auth := string(s.token(user))
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		parts := strings.Split(tok, ".")
		if !ok || len(parts) != 3 {
			t.Fatalf("%q: not Bearer and three parts", auth)
		}
		var hdr struct{ Alg, Typ string }
		var claims struct {
			Sub string `json:"sub"`
			Exp int64  `json:"exp"`
		}
		for i, dst := range []any{&hdr, &claims} {
			raw, err := base64.RawURLEncoding.DecodeString(parts[i])
			if err != nil || json.Unmarshal(raw, dst) != nil {
				t.Fatalf("%q: part %d is not base64url JSON", auth, i)
			}
		}
		if hdr.Alg != "HS256" || claims.Sub != user || claims.Exp != 1_900_000_000 {
			t.Errorf("%q: header %+v, claims %+v", auth, hdr, claims)
		}
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(parts[0] + "." + parts[1]))
		if got, _ := base64.RawURLEncoding.DecodeString(parts[2]); !hmac.Equal(got, mac.Sum(nil)) {
			t.Errorf("%q: the signature is not the HMAC of header and claims", auth)
		}
	}
}
