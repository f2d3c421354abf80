package gateway

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// keyEnv returns a getenv that knows only kv (name, value, name, value, …).
func keyEnv(kv ...string) func(string) string {
	if len(kv)%2 != 0 {
		panic("keyEnv: odd number of arguments")
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) string { return m[name] }
}

// keyYAML writes a settings file of body and returns its path.
func keyYAML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flashgate.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writePEM writes PEM blocks to a fresh file and returns its path.
func writePEM(t *testing.T, blocks ...*pem.Block) string {
	t.Helper()
	var b []byte
	for _, bl := range blocks {
		b = append(b, pem.EncodeToMemory(bl)...)
	}
	path := filepath.Join(t.TempDir(), "buyer.pem")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pkix(t *testing.T, pub any) *pem.Block {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return &pem.Block{Type: "PUBLIC KEY", Bytes: der}
}

// The buyer key file, given by either source, is read and parsed by
// BuyerKey, not by config.Load: each kind of key the gateway can pin an
// algorithm to loads, everything else stops the start with one line naming
// the setting. (Was config's TestConfigBuyerKeyFile.)
func TestBuyerKeyFile(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	smallRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, edPub, edPriv)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}

	good := []struct {
		name  string
		block *pem.Block
		want  string // %T of the key
	}{
		{"rsa pkix", pkix(t, &rsaKey.PublicKey), "*rsa.PublicKey"},
		{"rsa pkcs1", &pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)}, "*rsa.PublicKey"},
		{"ecdsa p-256", pkix(t, &ecKey.PublicKey), "*ecdsa.PublicKey"},
		{"ed25519", pkix(t, edPub), "ed25519.PublicKey"},
		{"certificate", &pem.Block{Type: "CERTIFICATE", Bytes: certDER}, "ed25519.PublicKey"},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			path := writePEM(t, tt.block)
			c, err := config.Load("", keyEnv("FLASHGATE_BUYER_JWT_KEY_FILE", path))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !c.Buyer.On() || c.Buyer.JWTKeyFile != path {
				t.Fatalf("Buyer = %+v", c.Buyer)
			}
			key, err := BuyerKey(c.Buyer)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", key); got != tt.want {
				t.Errorf("key is %s, want %s", got, tt.want)
			}
		})
	}

	bad := []struct {
		name string
		file func(t *testing.T) string
		want string // part of the error
	}{
		{"rsa under 2048 bits", func(t *testing.T) string { return writePEM(t, pkix(t, &smallRSA.PublicKey)) }, "2048"},
		{"ecdsa p-384", func(t *testing.T) string { return writePEM(t, pkix(t, &p384.PublicKey)) }, "P-256"},
		{"private key", func(t *testing.T) string {
			return writePEM(t, &pem.Block{Type: "PRIVATE KEY", Bytes: privDER})
		}, "public key"},
		{"two keys", func(t *testing.T) string { return writePEM(t, pkix(t, edPub), pkix(t, &ecKey.PublicKey)) }, "one public key"},
		{"not a key", func(t *testing.T) string {
			return writePEM(t, &pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1}})
		}, "not a public key"},
		{"corrupt der", func(t *testing.T) string {
			return writePEM(t, &pem.Block{Type: "PUBLIC KEY", Bytes: []byte("nonsense")})
		}, "PUBLIC KEY"},
		{"not pem", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, []byte("ssh-ed25519 AAAA buyer@example\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "no PEM block"},
		{"empty file", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return path
		}, "no PEM block"},
		{"missing", func(t *testing.T) string { return "/nonexistent/buyer.pem" }, "/nonexistent/buyer.pem"},
		{"a directory", func(t *testing.T) string { return t.TempDir() }, "is a directory"},
		{"unreadable", func(t *testing.T) string {
			if os.Geteuid() == 0 {
				t.Skip("root reads any file")
			}
			path := writePEM(t, pkix(t, edPub))
			if err := os.Chmod(path, 0); err != nil {
				t.Fatal(err)
			}
			return path
		}, "permission denied"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.file(t)
			for _, src := range []string{"env", "yaml"} {
				var c *config.Config
				var err error
				if src == "env" {
					c, err = config.Load("", keyEnv("FLASHGATE_BUYER_JWT_KEY_FILE", path))
				} else {
					c, err = config.Load(keyYAML(t, "buyer:\n  jwt_key_file: "+path+"\n"), keyEnv())
				}
				if err != nil {
					t.Fatalf("%s: Load: %v", src, err)
				}
				key, err := BuyerKey(c.Buyer)
				if err == nil {
					t.Fatalf("%s: BuyerKey succeeded (%T)", src, key)
				}
				msg := err.Error()
				if !errors.Is(err, config.ErrInvalid) || strings.ContainsAny(msg, "\r\n") {
					t.Errorf("%s: error %q: want one line wrapping ErrInvalid", src, msg)
				}
				for _, w := range []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "buyer.jwt_key_file", tt.want} {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: error %q does not name %q", src, msg, w)
					}
				}
			}
		})
	}
}

// BuyerKey applies the buyer settings' own rules to a Config built in code
// too (config.Load has applied them already), and returns the secret as
// the HS256 key.
func TestBuyerKeySettings(t *testing.T) {
	const secret32 = "0123456789abcdef0123456789abcdef"
	path := keyFile(t, testKeys(t).ed.Public())
	for _, tt := range []struct {
		name  string
		buyer config.Buyer
		want  []string // parts of the error; none for a key
		key   string   // %T of the key
	}{
		{name: "off", buyer: config.Buyer{}, key: "<nil>"},
		{name: "secret", buyer: config.Buyer{JWTSecret: secret32}, key: "[]uint8"},
		{name: "key file", buyer: config.Buyer{JWTKeyFile: path}, key: "ed25519.PublicKey"},
		{name: "secret too short", buyer: config.Buyer{JWTSecret: secret32[:31]},
			want: []string{"FLASHGATE_BUYER_JWT_SECRET", "buyer.jwt_secret", "32"}},
		{name: "both", buyer: config.Buyer{JWTSecret: secret32, JWTKeyFile: path},
			want: []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "buyer.jwt_key_file", "not both"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key, err := BuyerKey(tt.buyer)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprintf("%T", key); got != tt.key {
					t.Errorf("key is %s, want %s", got, tt.key)
				}
				if s, ok := key.([]byte); ok && string(s) != secret32 {
					t.Errorf("key %q, want the secret", s)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted (%T)", key)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error %q does not wrap config.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret32[:31]) {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

// The verifier refuses at construction a key whose algorithm it could not
// pin.
func TestBuyerAuthKeys(t *testing.T) {
	k := testKeys(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		key  any
		alg  string // "" for a refusal
	}{
		{"secret", []byte(testSecret), "HS256"},
		{"rsa", &k.rsa.PublicKey, "RS256"},
		{"ecdsa p-256", &k.ec.PublicKey, "ES256"},
		{"ed25519", k.ed.Public(), "EdDSA"},
		{"ecdsa p-384", &p384.PublicKey, ""},
		{"rsa private key", k.rsa, ""},
		{"string secret", testSecret, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := newKeyAuth(tt.key)
			switch {
			case tt.alg == "" && err == nil:
				t.Errorf("accepted, pinned to %s", a.alg)
			case tt.alg != "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.alg != "" && a.alg != tt.alg:
				t.Errorf("pinned %s, want %s", a.alg, tt.alg)
			}
		})
	}
	// Off builds nothing.
	if a, err := newBuyerAuth(config.Buyer{}); a != nil || err != nil {
		t.Errorf("newBuyerAuth(off) = %v, %v", a, err)
	}
}
