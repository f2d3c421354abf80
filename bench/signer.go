package bench

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
)

// tokenHeader is the JOSE header of every token the bench signs, encoded.
var tokenHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// signer makes buyer tokens: HS256 JWTs (RFC 7519) with sub = the buyer
// and a fixed exp, as the shop's login would issue them and the gateway
// checks them (API.md, "Buyer authentication"). It keeps its HMAC, reset
// for each token, and the buffers a token is built in, so that signing
// allocates nothing and costs the client little next to what it
// measures. It is not safe for concurrent use: one per worker.
type signer struct {
	mac          hash.Hash
	exp          int64
	auth, claims []byte
}

func newSigner(secret string, exp int64) *signer {
	return &signer{mac: hmac.New(sha256.New, []byte(secret)), exp: exp}
}

// token returns the Authorization value ("Bearer" and the token) for
// user, in a buffer of the signer's that the next call overwrites.
func (s *signer) token(user string) []byte {
	const scheme = "Bearer "
	s.claims = append(s.claims[:0], `{"sub":"`...)
	s.claims = append(s.claims, user...)
	s.claims = append(s.claims, `","exp":`...)
	s.claims = strconv.AppendInt(s.claims, s.exp, 10)
	s.claims = append(s.claims, '}')
	b := append(s.auth[:0], scheme...)
	b = append(b, tokenHeader...)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, s.claims)
	s.mac.Reset()
	s.mac.Write(b[len(scheme):])
	// The claims buffer is free again: the MAC goes there on its way.
	s.claims = s.mac.Sum(s.claims[:0])
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, s.claims)
	s.auth = b
	return b
}
