package gateway

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/flashgate/flashgate/config"
)

// BuyerKey returns the key buyer tokens are verified with: the secret as
// []byte, or the public key of b.JWTKeyFile as *rsa.PublicKey,
// *ecdsa.PublicKey (P-256) or ed25519.PublicKey; nil, nil when buyer
// authentication is off. It reads the file, so it blocks on the file
// system. An error is a *config.SettingError naming the setting (it wraps
// config.ErrInvalid, so the process exits 2), on one line, saying what is
// wrong with the file without quoting it. The long-running commands call it
// once right after the settings, so that a bad key stops them at start; the
// gateway calls it again to build its verifier.
func BuyerKey(b config.Buyer) (any, error) {
	if err := b.Check(); err != nil {
		return nil, err
	}
	if b.JWTKeyFile == "" {
		if b.JWTSecret == "" {
			return nil, nil
		}
		return []byte(b.JWTSecret), nil
	}
	raw, err := os.ReadFile(b.JWTKeyFile)
	if err != nil {
		return nil, keyFileError(err)
	}
	key, err := parsePublicKey(raw)
	if err != nil {
		return nil, keyFileError(fmt.Errorf("%s: %w", b.JWTKeyFile, err))
	}
	return key, nil
}

// keyFileError names the key file's setting in err.
func keyFileError(err error) error {
	return &config.SettingError{Env: "FLASHGATE_BUYER_JWT_KEY_FILE", Key: "buyer.jwt_key_file", Err: err}
}

// parsePublicKey reads the one PEM block of raw: a PKIX public key ("PUBLIC
// KEY"), a PKCS #1 RSA public key ("RSA PUBLIC KEY") or a certificate, whose
// key is taken. A private key is refused rather than used: the gateway only
// verifies, and a signing key has no business on it.
func parsePublicKey(raw []byte) (any, error) {
	block, rest := pem.Decode(raw)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, errors.New("more than one PEM block; the file must hold one public key")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		if strings.Contains(block.Type, "PRIVATE") {
			return nil, fmt.Errorf("holds a %s; give the public key (openssl pkey -pubout)", block.Type)
		}
		return nil, fmt.Errorf("PEM block %q is not a public key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", block.Type, err)
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("RSA key of %d bits; at least 2048 are needed", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ECDSA key on %s; ES256 needs P-256", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("a %T key; want RSA, ECDSA P-256 or Ed25519", key)
	}
	return key, nil
}
