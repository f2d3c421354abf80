// Package config holds flashgate's settings: their defaults, the YAML file,
// the FLASHGATE_* environment overrides and the validation that runs at start.
//
// Every setting is declared once, in the table of settings.go, with its
// environment variable, its YAML key, its default and its parser. Defaults,
// the YAML file and the environment all go through the same parser, so a value
// means the same thing wherever it comes from, and an error always names the
// setting by both of its names.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole of flashgate's settings. Load fills it; the zero value
// is not useful.
type Config struct {
	HTTP      HTTP
	Admin     Admin
	Redis     Redis
	AMQP      AMQP
	MySQL     MySQL
	Scripts   Scripts
	Log       Log
	Shutdown  Shutdown
	Relay     Relay
	Consumer  Consumer
	Admission Admission
	Batch     Batch
	Cache     Cache
	Buyer     Buyer
}

// Buyer configures buyer authentication (API.md, "Buyer authentication").
// With neither field set it is off and the gateway trusts the body's
// user_id; at most one may be set.
type Buyer struct {
	// JWTSecret is the HS256 key buyer tokens are signed with, at least
	// MinJWTSecret bytes.
	JWTSecret string
	// JWTKeyFile is a PEM file holding the public key buyer tokens are
	// signed with: RSA (RS256), ECDSA P-256 (ES256) or Ed25519 (EdDSA).
	JWTKeyFile string
}

// MinJWTSecret is the shortest HS256 secret accepted: RFC 7518 §3.2 asks
// for a key at least as long as the hash, 256 bits.
const MinJWTSecret = 32

// On reports whether buyer authentication is on.
func (b Buyer) On() bool { return b.JWTSecret != "" || b.JWTKeyFile != "" }

// Check applies the rules of the buyer settings themselves: at most one of
// the two, and a secret of at least MinJWTSecret bytes. It returns a
// *SettingError naming the setting, or nil. It does not read the key file:
// the gateway, which verifies the tokens, reads and parses it
// (gateway.BuyerKey), and the long-running commands ask it at start.
func (b Buyer) Check() error {
	switch {
	case b.JWTSecret != "" && b.JWTKeyFile != "":
		return &SettingError{Env: "FLASHGATE_BUYER_JWT_KEY_FILE", Key: "buyer.jwt_key_file",
			Err: errors.New("set either FLASHGATE_BUYER_JWT_SECRET or FLASHGATE_BUYER_JWT_KEY_FILE, not both")}
	case b.JWTSecret != "" && len(b.JWTSecret) < MinJWTSecret:
		return &SettingError{Env: "FLASHGATE_BUYER_JWT_SECRET", Key: "buyer.jwt_secret",
			Err: fmt.Errorf("must be at least %d bytes", MinJWTSecret)}
	}
	return nil
}

// Batch configures the coalescing of one sale's concurrent reservations into
// one script call.
type Batch struct {
	MaxSize int // 1 turns batching off
	Calls   int // script calls of one sale in flight at once
}

// Cache configures the gateway's memory of closed sales (sold out, locked,
// ended, unknown), which answers without Redis.
type Cache struct {
	ClosedTTL time.Duration // 0 turns the short-circuit off
}

// HTTP configures the public listener.
type HTTP struct {
	Addr         string
	MaxBodyBytes int
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// MaxConns caps the public listener's open connections; 0 derives the
	// cap from the open-file limit (gateway.New does, at start).
	MaxConns int
	// MaxConnsPerIP caps one client address's (IPv6: one /64's) open
	// connections on the public listener; 0 turns the limit off.
	MaxConnsPerIP int
	MaxHeaderSize int
	// CORSOrigins are the origins (scheme://host[:port]) whose pages may
	// call the public API from a browser; none: no CORS.
	CORSOrigins []string
	// PageTemplate is an html/template file that replaces the built-in
	// sale page (GET /s/{sale_id}); empty: the built-in page.
	PageTemplate string
}

// Admin configures the admin listener.
type Admin struct {
	Addr  string
	Token string
}

// Redis configures the Redis client. More than one address means Redis Cluster.
type Redis struct {
	Addrs     []string
	Username  string
	Password  string
	Timeout   time.Duration
	PoolSize  int
	KeyPrefix string
	// ZeroLoss is zero-loss mode: the gateway sells only while every
	// primary has appendonly yes and appendfsync always (gateway's
	// durability watch).
	ZeroLoss bool
	// SentinelMaster, when set, makes Addrs the Sentinels that know the
	// primary by this name (go-redis's failover client).
	SentinelMaster   string
	SentinelPassword string
	// MinReplicas ≥ 1 is replicated mode: a change is answered only once
	// that many replicas of its primary acknowledged it (WAIT).
	MinReplicas int
}

// AMQP configures the RabbitMQ connection and topology.
type AMQP struct {
	URL           string
	Exchange      string
	Queue         string
	DeliveryLimit int
}

// MySQL configures the order database.
type MySQL struct {
	DSN      string
	MaxConns int
}

// Scripts says where the Lua scripts come from.
type Scripts struct {
	Dir string
}

// Log configures zap.
type Log struct {
	Level  string
	Format string
}

// Shutdown configures the graceful drain after SIGTERM.
type Shutdown struct {
	DrainDelay time.Duration
	Timeout    time.Duration
}

// Relay configures the outbox relay that runs inside each gateway.
type Relay struct {
	Batch         int
	MaxInFlight   int
	MessageOrders int    // orders one AMQP message carries at most
	Wire          string // "lines" or "json": the form of the orders in a message (package order)
	ClaimAfter    time.Duration
	Poll          time.Duration
	// Linger is how long the relay waits after a read of the outbox that
	// found entries before the next read, so that a read and a message
	// carry the orders of many script calls.
	Linger time.Duration
}

// Consumer configures the RabbitMQ → MySQL consumer.
type Consumer struct {
	MetricsAddr string // empty: no metrics listener
	Prefetch    int
	BatchSize   int
	BatchWait   time.Duration
}

// Admission configures load shedding at the edge; zero values turn it off.
type Admission struct {
	MaxInFlight int
	Rate        float64
	Burst       int
}

// ErrInvalid is wrapped by every validation error, so callers can tell a bad
// setting (exit code 2) from other failures.
var ErrInvalid = errors.New("invalid setting")

// SettingError names the setting that failed by its variable and YAML key.
type SettingError struct {
	Env, Key string
	Err      error
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("config: %s (%s): %s", e.Env, e.Key, oneLine(e.Err.Error()))
}

// oneLine keeps an error on one line whatever input it quotes.
func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(strings.TrimRight(s, "\r\n"))
}

func (e *SettingError) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// Default returns the settings of the local stack that `make up` starts.
func Default() *Config {
	c := &Config{}
	for _, s := range settings {
		if err := s.set(c, s.def); err != nil {
			panic("config: bad default for " + s.env + ": " + err.Error())
		}
	}
	return c
}

// Load builds the settings from the defaults, then the YAML file at path
// (skipped when path is empty), then the FLASHGATE_* variables of getenv
// (os.Getenv when nil). It returns the first bad setting as a *SettingError
// wrapping ErrInvalid, or an error about the file itself.
func Load(path string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w: %w", ErrInvalid, err)
		}
		values, err := flattenYAML(raw)
		var se *SettingError
		if errors.As(err, &se) {
			se.Err = fmt.Errorf("%s: %w", path, se.Err)
			return nil, se
		}
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w: %w", path, ErrInvalid, err)
		}
		keys := make([]string, 0, len(values))
		for k := range values {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the same file always reports the same first error
		for _, key := range keys {
			v := strings.TrimSpace(values[key])
			s := byKey(key)
			if s == nil {
				return nil, fmt.Errorf("config: %s: %w: unknown key %q", path, ErrInvalid, key)
			}
			if v == "" && values[key] != "" && s.noBlank {
				return nil, &SettingError{Env: s.env, Key: s.key, Err: errBlank}
			}
			if err := s.set(c, v); err != nil {
				return nil, &SettingError{Env: s.env, Key: s.key, Err: err}
			}
		}
	}
	for _, s := range settings {
		v, ok := lookup(getenv, s.env)
		if !ok && s.noBlank && getenv(s.env) != "" {
			return nil, &SettingError{Env: s.env, Key: s.key, Err: errBlank}
		}
		if ok {
			if err := s.set(c, v); err != nil {
				return nil, &SettingError{Env: s.env, Key: s.key, Err: err}
			}
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// errBlank refuses a secret that is set but only white space: read as unset
// it would turn a protection off (a token of spaces left the admin API open
// on loopback) while the operator believes it on.
var errBlank = errors.New("is set but only white space")

// lookup treats an empty variable as unset (getenv cannot tell them apart).
// Surrounding white space, such as the newline of a value read from a file,
// is dropped.
func lookup(getenv func(string) string, name string) (string, bool) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return "", false
	}
	return v, true
}

// Validate checks the rules that involve more than one setting, and what
// needs every source read first. The range of each single setting is
// checked when it is parsed; the admin token's form and the buyer secret's
// length are checked again, for a Config built in code. The buyer key file
// is not read here (gateway.BuyerKey).
func (c *Config) Validate() error {
	if err := checkAdminToken(c.Admin.Token); err != nil {
		return &SettingError{Env: "FLASHGATE_ADMIN_TOKEN", Key: "admin.token", Err: err}
	}
	if c.Admin.Token == "" && !isLoopback(c.Admin.Addr) {
		return &SettingError{Env: "FLASHGATE_ADMIN_ADDR", Key: "admin.addr",
			Err: fmt.Errorf("%q is not a loopback address and FLASHGATE_ADMIN_TOKEN is not set", c.Admin.Addr)}
	}
	if c.HTTP.Addr == c.Admin.Addr && !strings.HasSuffix(c.HTTP.Addr, ":0") {
		return &SettingError{Env: "FLASHGATE_ADMIN_ADDR", Key: "admin.addr",
			Err: fmt.Errorf("same address as FLASHGATE_HTTP_ADDR (%s)", c.HTTP.Addr)}
	}
	return c.Buyer.Check()
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// flattenYAML turns a YAML document into dotted keys and string values, the
// same form the environment has. Sequences become comma-separated lists.
func flattenYAML(raw []byte) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return out, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the top level must be a mapping", root.Line)
	}
	return out, flattenNode(root, "", out)
}

func flattenNode(n *yaml.Node, prefix string, out map[string]string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if _, dup := out[key]; dup {
			return fmt.Errorf("line %d: %s is given twice", k.Line, key)
		}
		switch v.Kind {
		case yaml.MappingNode:
			if s := byKey(key); s != nil {
				return &SettingError{Env: s.env, Key: s.key, Err: fmt.Errorf("line %d: must be a single value", v.Line)}
			}
			if err := flattenNode(v, key, out); err != nil {
				return err
			}
		case yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					if s := byKey(key); s != nil {
						return &SettingError{Env: s.env, Key: s.key, Err: fmt.Errorf("line %d: must be a list of values", it.Line)}
					}
					return fmt.Errorf("line %d: %s must be a list of values", it.Line, key)
				}
				items = append(items, it.Value)
			}
			out[key] = strings.Join(items, ",")
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				out[key] = ""
			} else {
				out[key] = v.Value
			}
		default:
			return fmt.Errorf("line %d: %s: unsupported value", v.Line, key)
		}
	}
	return nil
}
