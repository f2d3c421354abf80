package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
)

// Buyer authentication (API.md, "Buyer authentication"; DESIGN.md invariant
// 9). Off, the gateway trusts the body's user_id, as it must behind a front
// end that authenticates buyers itself. On, a buy or an order-status
// request carries "Authorization: Bearer <JWT>", and the token's sub is the
// buyer:
//
//   - The algorithm is the key's, never the token's: an HS256 secret
//     verifies HS256 only, an RSA key RS256, an ECDSA P-256 key ES256 and an
//     Ed25519 key EdDSA. A token naming any other alg ("none", or HS256
//     against an RSA key, which would let a forger use the public key as an
//     HMAC secret) is refused before its signature is looked at.
//   - exp is required and must be in the future; no leeway, so a token is
//     never honoured past the instant its issuer wrote into it.
//   - sub follows the id rule of user_id (order.ValidID).
//   - Member names are case-sensitive (RFC 7515 §4, RFC 7519 §4): the
//     claims are read into a map, so "SUB" or "Exp" is some other claim,
//     never sub or exp. (encoding/json into a struct would match them
//     case-insensitively, and then "sub":"alice","SUB":"bob" would name
//     bob here and alice to every verifier that follows the RFC.)
//   - Exactly one Authorization header, scheme "Bearer" (any case, as RFC
//     9110 §11.1 has it), one or more spaces, then the token and nothing
//     else. Of two headers a proxy and the gateway might each read a
//     different one, so two are refused.
//
// The check runs right after routing and before anything else a request
// costs, body included: 401 unauthorized for a missing, malformed, badly
// signed or expired token. Then a body user_id other than sub is 403
// forbidden, a body without user_id buys for sub, and an order that is not
// sub's is 404 not_found, the same bytes as an unknown one, so that order
// ids cannot be probed for their owners.

// Reasons a token is refused; only logged (at debug level), never sent: a
// client learns 401 and nothing that would help it forge.
var (
	errNoToken   = errors.New("no bearer token")
	errTwoTokens = errors.New("more than one Authorization header")
	errBadSub    = errors.New("sub is not a valid user id")
)

// Replies of buyer authentication, built once.
var (
	replyForbidden = fixed(403, "forbidden")
	// The WWW-Authenticate values of RFC 6750 §3: a request without a
	// token gets the scheme only, one with a bad token is told it is bad.
	challengeNone    = []byte(`Bearer realm="flashgate"`)
	challengeInvalid = []byte(`Bearer realm="flashgate", error="invalid_token"`)
)

// buyerAuth verifies buyer tokens against one key. It is immutable once
// built and safe for concurrent use: the jwt.Parser is built once, and
// parsing keeps its state per call.
type buyerAuth struct {
	alg    string
	key    any
	parser *jwt.Parser
	keyFn  jwt.Keyfunc // a method value made once, so a request allocates no closure
}

// newBuyerAuth builds the verifier of b, or returns nil when buyer
// authentication is off. It reads the key file (BuyerKey, blocking on the
// file system); the error says what is wrong with the key.
func newBuyerAuth(b config.Buyer) (*buyerAuth, error) {
	if !b.On() {
		return nil, nil
	}
	key, err := BuyerKey(b)
	if err != nil {
		return nil, err
	}
	return newKeyAuth(key)
}

// newKeyAuth builds the verifier of a key of the kinds BuyerKey returns,
// pinning the algorithm the key implies.
func newKeyAuth(key any) (*buyerAuth, error) {
	var alg string
	switch k := key.(type) {
	case []byte:
		alg = jwt.SigningMethodHS256.Alg()
	case *rsa.PublicKey:
		alg = jwt.SigningMethodRS256.Alg()
	case *ecdsa.PublicKey:
		if k.Curve.Params().Name != "P-256" {
			return nil, fmt.Errorf("ECDSA key on %s: ES256 needs P-256", k.Curve.Params().Name)
		}
		alg = jwt.SigningMethodES256.Alg()
	case ed25519.PublicKey:
		alg = jwt.SigningMethodEdDSA.Alg()
	default:
		return nil, fmt.Errorf("buyer key of type %T: want an HS256 secret, or an RSA, ECDSA P-256 or Ed25519 public key", key)
	}
	a := &buyerAuth{alg: alg, key: key}
	a.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{alg}),
		jwt.WithExpirationRequired(),
		// Canonical base64 only: a token has one spelling, so two
		// different strings are never the same signed token.
		jwt.WithStrictDecoding(),
	)
	a.keyFn = a.verificationKey
	return a, nil
}

// verificationKey is the parser's Keyfunc. The parser has refused every alg
// but a.alg by the time it asks.
func (a *buyerAuth) verificationKey(*jwt.Token) (any, error) { return a.key, nil }

// check returns the buyer that the request's token names, or why there is
// none.
func (a *buyerAuth) check(h *fasthttp.RequestHeader) (string, error) {
	tok, err := bearerToken(h)
	if err != nil {
		return "", err
	}
	return a.verify(tok)
}

// verify checks one token and returns its sub.
func (a *buyerAuth) verify(tok []byte) (string, error) {
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(string(tok), claims, a.keyFn); err != nil {
		return "", err
	}
	sub, err := claims.GetSubject()
	if err != nil {
		return "", err
	}
	if !order.ValidID(sub) {
		return "", errBadSub
	}
	return sub, nil
}

// bearerToken returns the token of the request's one Authorization field,
// read as the client sent it (wireHeader, headers.go): white space after
// the token, which fasthttp would trim, stays and fails the token, as it
// does for the admin token.
func bearerToken(h *fasthttp.RequestHeader) ([]byte, error) {
	v, ok := wireHeader(h, fasthttp.HeaderAuthorization)
	if !ok {
		if _, n := headerValues(h, fasthttp.HeaderAuthorization); n > 1 {
			return nil, errTwoTokens
		}
		return nil, errNoToken
	}
	const scheme = "Bearer"
	if len(v) <= len(scheme) || !asciiEqualFold(v[:len(scheme)], scheme) || v[len(scheme)] != ' ' {
		return nil, errNoToken
	}
	tok := bytes.TrimLeft(v[len(scheme):], " ")
	if len(tok) == 0 {
		return nil, errNoToken
	}
	return tok, nil
}

// writeUnauthorized answers 401 with its challenge.
func writeUnauthorized(ctx *fasthttp.RequestCtx, err error) string {
	challenge := challengeInvalid
	if errors.Is(err, errNoToken) {
		challenge = challengeNone
	}
	ctx.Response.Header.SetBytesV(fasthttp.HeaderWWWAuthenticate, challenge)
	return write(ctx, replyUnauthorized)
}

// parseBuyFor parses a buy body for an authenticated buyer: user_id may be
// left out (the buy is then sub's), and one that is given must be sub. The
// reply is a 400 or the 403; its code is 0 when the request is acceptable.
func parseBuyFor(body []byte, sub string) (buyRequest, reply) {
	req, reason := parseBuy(body)
	if reason == "" {
		if string(req.user) != sub {
			return req, replyForbidden
		}
		return req, reply{}
	}
	if reason != badUser {
		return req, badRequest(reason)
	}
	// parseBuy refuses a body without user_id, which is right with
	// authentication off. Here only an absent (or null) user_id is
	// acceptable; a present, invalid one is still 400.
	userRaw, qtyRaw := topLevelFields(bytes.TrimSpace(body))
	if userRaw != nil && string(userRaw) != "null" {
		return req, badRequest(reason)
	}
	req = buyRequest{user: []byte(sub), quantity: 1}
	if len(qtyRaw) > 0 && string(qtyRaw) != "null" {
		q, ok := wholeNumber(qtyRaw)
		if !ok || q < 1 || q > order.MaxQuantity {
			return req, badRequest(badQuantity)
		}
		req.quantity = int(q)
	}
	return req, reply{}
}
