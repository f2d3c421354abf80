package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// setting is one row of the settings table: its two names, its default, what
// it means, how to parse it into a Config and how to show it back.
type setting struct {
	env, key, def, doc string
	secret             bool
	// noBlank refuses a value that is only white space instead of reading
	// it as unset: for settings whose absence turns a protection off.
	noBlank bool
	set     func(c *Config, v string) error
	get     func(c *Config) string
}

// Setting describes one setting for documentation (the table in
// docs/settings.md is checked against these).
type Setting struct {
	Env, Key, Default, Doc string
}

// Settings lists every setting in the order of docs/settings.md's table.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = Setting{Env: s.env, Key: s.key, Default: s.def, Doc: s.doc}
	}
	return out
}

func byKey(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	return nil
}

var settings = []setting{
	addrSetting("FLASHGATE_HTTP_ADDR", "http.addr", "127.0.0.1:8080",
		"public listener (buyers, load balancer health checks)", func(c *Config) *string { return &c.HTTP.Addr }),
	addrSetting("FLASHGATE_ADMIN_ADDR", "admin.addr", "127.0.0.1:8081",
		"admin listener (admin API, /metrics); must be loopback when no token is set", func(c *Config) *string { return &c.Admin.Addr }),
	{env: "FLASHGATE_ADMIN_TOKEN", key: "admin.token", def: "", secret: true, noBlank: true,
		doc: "bearer token for the admin API: at least 16 printable ASCII characters, no white space; " +
			"with none set, the admin listener binds loopback only and asks for no token",
		set: func(c *Config, v string) error {
			if err := checkAdminToken(v); err != nil {
				return err
			}
			c.Admin.Token = v
			return nil
		},
		get: func(c *Config) string { return c.Admin.Token }},
	{env: "FLASHGATE_REDIS_ADDRS", key: "redis.addrs", def: "127.0.0.1:6379",
		doc: "comma-separated host:port list; more than one address means Redis Cluster",
		set: func(c *Config, v string) error {
			var addrs []string
			for _, a := range strings.Split(v, ",") {
				a = strings.TrimSpace(a)
				if a == "" {
					continue
				}
				if err := checkAddr(a); err != nil {
					return err
				}
				addrs = append(addrs, a)
			}
			if len(addrs) == 0 {
				return fmt.Errorf("at least one address is needed")
			}
			c.Redis.Addrs = addrs
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.Redis.Addrs, ",") }},
	strSetting("FLASHGATE_REDIS_USERNAME", "redis.username", "", "Redis ACL user (empty: the default user)", false,
		func(c *Config) *string { return &c.Redis.Username }),
	strSetting("FLASHGATE_REDIS_PASSWORD", "redis.password", "", "Redis password (AUTH)", true,
		func(c *Config) *string { return &c.Redis.Password }),
	durSetting("FLASHGATE_REDIS_TIMEOUT", "redis.timeout", "500ms",
		"budget of one Redis call on the buy path; past it the buy is 503 unavailable", time.Millisecond, time.Minute,
		func(c *Config) *time.Duration { return &c.Redis.Timeout }),
	intSetting("FLASHGATE_REDIS_POOL_SIZE", "redis.pool_size", "64", "Redis connections per node", 1, 10000,
		func(c *Config) *int { return &c.Redis.PoolSize }),
	boolSetting("FLASHGATE_REDIS_ZERO_LOSS", "redis.zero_loss", "false",
		"zero-loss mode: a buy is accepted (202) only while every Redis primary answers CONFIG GET with appendonly yes and "+
			"appendfsync always, so that Redis fsyncs each reservation before it replies; checked at start and once a second, "+
			"buys are 503 unavailable and /readyz is 503 while a primary is not so or cannot be asked (a managed Redis that "+
			"refuses CONFIG cannot be verified: see operations.md, Durability). false: nothing is checked",
		func(c *Config) *bool { return &c.Redis.ZeroLoss }),
	strSetting("FLASHGATE_REDIS_SENTINEL_MASTER", "redis.sentinel_master", "",
		"the name Redis Sentinel knows the primary by; when set, redis.addrs lists the Sentinels and flashgate follows that "+
			"primary through failovers (docs/cluster.md)", false,
		func(c *Config) *string { return &c.Redis.SentinelMaster }),
	strSetting("FLASHGATE_REDIS_SENTINEL_PASSWORD", "redis.sentinel_password", "", "the Sentinels' own password (AUTH), when they have one", true,
		func(c *Config) *string { return &c.Redis.SentinelPassword }),
	intSetting("FLASHGATE_REDIS_MIN_REPLICAS", "redis.min_replicas", "0",
		"replicated mode when N >= 1: a 202, a pay, a cancel and an admin change are answered only once N replicas of the "+
			"sale's primary hold them (WAIT after each script call, shared by its batch); past redis.timeout a buy is "+
			"503 unconfirmed with its order_id, and /readyz is 503 while the primary has fewer than N replicas. 0: no wait",
		0, 16, func(c *Config) *int { return &c.Redis.MinReplicas }),
	{env: "FLASHGATE_REDIS_KEY_PREFIX", key: "redis.key_prefix", def: "fg",
		doc: "prefix of every Redis key flashgate writes (lets several installations share one Redis)",
		set: func(c *Config, v string) error {
			if !prefixRE.MatchString(v) {
				return fmt.Errorf("%q: want 1-32 of A-Z a-z 0-9 _ . -", v)
			}
			c.Redis.KeyPrefix = v
			return nil
		},
		get: func(c *Config) string { return c.Redis.KeyPrefix }},
	{env: "FLASHGATE_AMQP_URL", key: "amqp.url", def: "amqp://guest:guest@127.0.0.1:5672/", secret: true,
		doc: "RabbitMQ URL, or a comma-separated list of the URLs of the nodes of one RabbitMQ cluster, tried in turn at " +
			"every (re)connect (docs/cluster.md); a comma inside a URL is written %2C",
		set: func(c *Config, v string) error {
			if err := checkAMQPURL(v); err != nil {
				return err
			}
			c.AMQP.URL = v
			return nil
		},
		get: func(c *Config) string { return MaskURL(c.AMQP.URL) }},
	nameSetting("FLASHGATE_AMQP_EXCHANGE", "amqp.exchange", "flashgate.orders", "durable exchange the relay publishes orders to",
		func(c *Config) *string { return &c.AMQP.Exchange }),
	nameSetting("FLASHGATE_AMQP_QUEUE", "amqp.queue", "flashgate.orders", "quorum queue the consumers read; its dead-letter queue is QUEUE.dead",
		func(c *Config) *string { return &c.AMQP.Queue }),
	intSetting("FLASHGATE_AMQP_DELIVERY_LIMIT", "amqp.delivery_limit", "20", "deliveries of one message before it is dead-lettered (a consumer crash counts as one; a malformed message is dead-lettered at once)", 1, 1000,
		func(c *Config) *int { return &c.AMQP.DeliveryLimit }),
	{env: "FLASHGATE_MYSQL_DSN", key: "mysql.dsn", def: "flashgate:flashgate@tcp(127.0.0.1:3306)/flashgate?parseTime=true", secret: true,
		doc: "MySQL data source name (go-sql-driver/mysql form)",
		set: func(c *Config, v string) error {
			cfg, err := mysql.ParseDSN(v)
			if err != nil {
				return err
			}
			if cfg.DBName == "" {
				return fmt.Errorf("the DSN names no database")
			}
			c.MySQL.DSN = v
			return nil
		},
		get: func(c *Config) string { return maskDSN(c.MySQL.DSN) }},
	intSetting("FLASHGATE_MYSQL_MAX_CONNS", "mysql.max_conns", "8", "open connections of one consumer to MySQL", 1, 1000,
		func(c *Config) *int { return &c.MySQL.MaxConns }),
	strSetting("FLASHGATE_SCRIPTS_DIR", "scripts.dir", "", "load Lua from this folder instead of the copies built into the binary; reload re-reads it", false,
		func(c *Config) *string { return &c.Scripts.Dir }),
	intSetting("FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes", "4096", "request body limit (413 too_large beyond it)", 64, 1<<20,
		func(c *Config) *int { return &c.HTTP.MaxBodyBytes }),
	durSetting("FLASHGATE_HTTP_READ_TIMEOUT", "http.read_timeout", "5s", "time to read one request, headers and body", 10*time.Millisecond, 5*time.Minute,
		func(c *Config) *time.Duration { return &c.HTTP.ReadTimeout }),
	durSetting("FLASHGATE_HTTP_WRITE_TIMEOUT", "http.write_timeout", "5s", "time to write one response", 10*time.Millisecond, 5*time.Minute,
		func(c *Config) *time.Duration { return &c.HTTP.WriteTimeout }),
	durSetting("FLASHGATE_HTTP_IDLE_TIMEOUT", "http.idle_timeout", "60s", "keep-alive connections idle longer are closed", 10*time.Millisecond, time.Hour,
		func(c *Config) *time.Duration { return &c.HTTP.IdleTimeout }),
	{env: "FLASHGATE_HTTP_MAX_CONNS", key: "http.max_conns", def: "0",
		doc: "open connections of the public listener; one more is answered 503 unavailable (Retry-After) and closed. " +
			"0 (the default): derived from the open-file limit (raised to its hard limit at start) less a reserve for " +
			"Redis (redis.pool_size per address), RabbitMQ and log files, and less the admin listener's cap (an eighth of the rest, 16 to 1024); " +
			"a value above the derived one is lowered to it, with a warning, so that a flood is refused in JSON rather than running the process out of files",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 || n > 10_000_000 || (n > 0 && n < 16) {
				return fmt.Errorf("%q: want 0 (derived from the open-file limit) or a whole number from 16 to 10000000", v)
			}
			c.HTTP.MaxConns = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(c.HTTP.MaxConns) }},
	intSetting("FLASHGATE_HTTP_MAX_CONNS_PER_IP", "http.max_conns_per_ip", "0",
		"open connections of one client address (IPv6: one /64) on the public listener; one more is answered 429 rate_limited (Retry-After) and closed, "+
			"other clients unaffected. 0 (the default): off, because behind a load balancer every buyer arrives from the balancer's few addresses "+
			"and a per-address cap would throttle the balancer itself; set it (e.g. 64) on a gateway that buyers reach directly. "+
			"Only the TCP peer counts, never X-Forwarded-For, which a client can forge", 0, 1_000_000,
		func(c *Config) *int { return &c.HTTP.MaxConnsPerIP }),
	intSetting("FLASHGATE_HTTP_MAX_HEADER_BYTES", "http.max_header_bytes", "8192", "request header size limit", 1024, 1<<20,
		func(c *Config) *int { return &c.HTTP.MaxHeaderSize }),
	{env: "FLASHGATE_CORS_ORIGINS", key: "http.cors_origins", def: "",
		doc: "comma-separated origins (https://shop.example: scheme, host and port, no path) whose pages may call the public API from a browser; " +
			"their answers carry Access-Control-Allow-Origin, any other origin's none. Empty (the default): no CORS",
		set: func(c *Config, v string) error {
			var origins []string
			for _, o := range strings.Split(v, ",") {
				o = strings.TrimSpace(o)
				if o == "" {
					continue
				}
				if err := checkOrigin(o); err != nil {
					return err
				}
				origins = append(origins, o)
			}
			c.HTTP.CORSOrigins = origins
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.HTTP.CORSOrigins, ",") }},
	strSetting("FLASHGATE_PAGE_TEMPLATE", "http.page_template", "",
		"an HTML template file (Go html/template) that replaces the built-in sale page GET /s/{sale_id}; read and checked at start and at reload", false,
		func(c *Config) *string { return &c.HTTP.PageTemplate }),
	{env: "FLASHGATE_LOG_LEVEL", key: "log.level", def: "info", doc: "debug, info, warn or error",
		set: func(c *Config, v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				c.Log.Level = v
				return nil
			}
			return fmt.Errorf("%q: want debug, info, warn or error", v)
		},
		get: func(c *Config) string { return c.Log.Level }},
	{env: "FLASHGATE_LOG_FORMAT", key: "log.format", def: "json", doc: "json (production) or console (development)",
		set: func(c *Config, v string) error {
			if v != "json" && v != "console" {
				return fmt.Errorf("%q: want json or console", v)
			}
			c.Log.Format = v
			return nil
		},
		get: func(c *Config) string { return c.Log.Format }},
	durSetting("FLASHGATE_DRAIN_DELAY", "shutdown.drain_delay", "2s", "after SIGTERM, time /readyz fails before the listener closes, for the load balancer to notice", 0, 10*time.Minute,
		func(c *Config) *time.Duration { return &c.Shutdown.DrainDelay }),
	durSetting("FLASHGATE_SHUTDOWN_TIMEOUT", "shutdown.timeout", "20s", "deadline of the whole shutdown after SIGTERM", 100*time.Millisecond, time.Hour,
		func(c *Config) *time.Duration { return &c.Shutdown.Timeout }),
	intSetting("FLASHGATE_RELAY_BATCH", "relay.batch", "256", "outbox entries read per XREADGROUP", 1, 10000,
		func(c *Config) *int { return &c.Relay.Batch }),
	intSetting("FLASHGATE_RELAY_MESSAGE_ORDERS", "relay.message_orders", "128", "orders (and changes of state) one AMQP message carries at most; 1: one message per order, for consumers older than batched messages", 1, 1000,
		func(c *Config) *int { return &c.Relay.MessageOrders }),
	{env: "FLASHGATE_RELAY_WIRE", key: "relay.wire", def: "lines",
		doc: "the form of the orders in a message: lines (tab-separated, a third of JSON's bytes, decoded without reflection) or json, for consumers older than the lines form; consumers read both",
		set: func(c *Config, v string) error {
			if v != "lines" && v != "json" {
				return fmt.Errorf("%q: want lines or json", v)
			}
			c.Relay.Wire = v
			return nil
		},
		get: func(c *Config) string { return c.Relay.Wire }},
	intSetting("FLASHGATE_RELAY_MAX_IN_FLIGHT", "relay.max_in_flight", "1024", "orders (and changes of state) published and awaiting a broker confirm at once", 1, 100000,
		func(c *Config) *int { return &c.Relay.MaxInFlight }),
	durSetting("FLASHGATE_RELAY_CLAIM_AFTER", "relay.claim_after", "15s", "outbox entries pending longer (a dead relay's) are claimed by another", 100*time.Millisecond, time.Hour,
		func(c *Config) *time.Duration { return &c.Relay.ClaimAfter }),
	durSetting("FLASHGATE_RELAY_POLL", "relay.poll", "100ms", "how soon the relay reads again an outbox whose read failed (it reads an outbox when told of a write to it, not on a timer)", time.Millisecond, time.Minute,
		func(c *Config) *time.Duration { return &c.Relay.Poll }),
	durSetting("FLASHGATE_RELAY_LINGER", "relay.linger", "5ms", "after a read of the outbox that found orders, the relay waits this long before reading again, so that one read and one message carry the orders of many buys (a read that came back full is followed at once; the first order after a quiet spell is read at once); 0: read after every write", 0, time.Second,
		func(c *Config) *time.Duration { return &c.Relay.Linger }),
	{env: "FLASHGATE_CONSUMER_METRICS_ADDR", key: "consumer.metrics_addr", def: "",
		doc: "listener of the consumer's /metrics, /healthz and profiles (/debug/pprof/; keep it on an internal address) (empty: none)",
		set: func(c *Config, v string) error {
			if v != "" {
				if err := checkAddr(v); err != nil {
					return err
				}
			}
			c.Consumer.MetricsAddr = v
			return nil
		},
		get: func(c *Config) string { return c.Consumer.MetricsAddr }},
	intSetting("FLASHGATE_CONSUMER_PREFETCH", "consumer.prefetch", "2048", "orders one consumer holds unacknowledged: it takes this ÷ relay.message_orders messages at a time (give consumers the gateways' relay.message_orders)", 1, 65535,
		func(c *Config) *int { return &c.Consumer.Prefetch }),
	intSetting("FLASHGATE_CONSUMER_BATCH_SIZE", "consumer.batch_size", "256", "orders written in one MySQL transaction", 1, 10000,
		func(c *Config) *int { return &c.Consumer.BatchSize }),
	durSetting("FLASHGATE_CONSUMER_BATCH_WAIT", "consumer.batch_wait", "20ms", "longest wait to fill a batch", 0, time.Minute,
		func(c *Config) *time.Duration { return &c.Consumer.BatchWait }),
	intSetting("FLASHGATE_ADMISSION_MAX_IN_FLIGHT", "admission.max_in_flight", "0", "per sale (all its buckets together), reservations in flight on one gateway before 429, and so joins of its waiting room, counted apart (0: off)", 0, 1_000_000,
		func(c *Config) *int { return &c.Admission.MaxInFlight }),
	{env: "FLASHGATE_ADMISSION_RATE", key: "admission.rate", def: "0", doc: "per sale, buys per second one gateway admits before 429 (0: off)",
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1e7 {
				return fmt.Errorf("%q: want a number from 0 to 10000000", v)
			}
			c.Admission.Rate = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(c.Admission.Rate, 'g', -1, 64) }},
	intSetting("FLASHGATE_BATCH_MAX_SIZE", "batch.max_size", "64", "reservations of one sale sent in one script call, and so waiting-room joins (apart from the reservations); 1 turns batching off", 1, 1024,
		func(c *Config) *int { return &c.Batch.MaxSize }),
	intSetting("FLASHGATE_BATCH_CALLS", "batch.calls", "1", "script calls of one sale in flight at once on one gateway; the next batch leaves when one returns. A sale's buckets share them, taking turns, so that their batches grow; a bucket with a full batch (batch.max_size) sends it at once besides", 1, 64,
		func(c *Config) *int { return &c.Batch.Calls }),
	durSetting("FLASHGATE_CLOSED_CACHE_TTL", "cache.closed_ttl", "500ms", "how long a gateway answers a sold-out, locked, ended or unknown sale from memory without asking Redis again (0 turns it off); changes are also pushed at once", 0, time.Minute,
		func(c *Config) *time.Duration { return &c.Cache.ClosedTTL }),
	intSetting("FLASHGATE_ADMISSION_BURST", "admission.burst", "0", "token bucket size of admission.rate (0: one second's worth)", 0, 10_000_000,
		func(c *Config) *int { return &c.Admission.Burst }),
	{env: "FLASHGATE_BUYER_JWT_SECRET", key: "buyer.jwt_secret", def: "", secret: true, noBlank: true,
		doc: "HS256 key (at least 32 bytes) that buyer tokens are signed with; set, every buy and order-status request needs " +
			"Authorization: Bearer TOKEN, a JWT with an exp and sub = the buyer (see operations.md, Security). " +
			"Empty: buyer authentication is off and the body's user_id is trusted",
		set: func(c *Config, v string) error {
			if v != "" && len(v) < MinJWTSecret {
				return fmt.Errorf("must be at least %d bytes", MinJWTSecret)
			}
			c.Buyer.JWTSecret = v
			return nil
		},
		get: func(c *Config) string { return c.Buyer.JWTSecret }},
	{env: "FLASHGATE_BUYER_JWT_KEY_FILE", key: "buyer.jwt_key_file", def: "", noBlank: true,
		doc: "instead of a secret: a PEM public key (RSA of 2048 bits or more, ECDSA P-256 or Ed25519) that buyer tokens are signed with " +
			"(RS256, ES256 or EdDSA, pinned by the key); read at start",
		set: func(c *Config, v string) error { c.Buyer.JWTKeyFile = v; return nil },
		get: func(c *Config) string { return c.Buyer.JWTKeyFile }},
}

// checkAdminToken refuses an admin token that a client could not send
// back as it is: white space or control characters inside it (a header
// value loses surrounding ones, and a token of spaces once passed), and
// anything short enough to guess. It never quotes the token.
func checkAdminToken(v string) error {
	if v == "" {
		return nil
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return fmt.Errorf("must be printable ASCII without white space (character %d is not)", i+1)
		}
	}
	if len(v) < 16 {
		return fmt.Errorf("must be at least 16 characters")
	}
	return nil
}

var (
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,200}$`)
)

func strSetting(env, key, def, doc string, secret bool, field func(*Config) *string) setting {
	return setting{env: env, key: key, def: def, doc: doc, secret: secret,
		set: func(c *Config, v string) error { *field(c) = v; return nil },
		get: func(c *Config) string { return *field(c) }}
}

func nameSetting(env, key, def, doc string, field func(*Config) *string) setting {
	return setting{env: env, key: key, def: def, doc: doc,
		set: func(c *Config, v string) error {
			if !nameRE.MatchString(v) {
				return fmt.Errorf("%q: want 1-200 of A-Z a-z 0-9 _ . : -", v)
			}
			*field(c) = v
			return nil
		},
		get: func(c *Config) string { return *field(c) }}
}

func addrSetting(env, key, def, doc string, field func(*Config) *string) setting {
	return setting{env: env, key: key, def: def, doc: doc,
		set: func(c *Config, v string) error {
			if err := checkAddr(v); err != nil {
				return err
			}
			*field(c) = v
			return nil
		},
		get: func(c *Config) string { return *field(c) }}
}

func intSetting(env, key, def, doc string, lo, hi int, field func(*Config) *int) setting {
	return setting{env: env, key: key, def: def, doc: doc,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < lo || n > hi {
				return fmt.Errorf("%q: want a whole number from %d to %d", v, lo, hi)
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*field(c)) }}
}

func boolSetting(env, key, def, doc string, field func(*Config) *bool) setting {
	return setting{env: env, key: key, def: def, doc: doc,
		set: func(c *Config, v string) error {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				*field(c) = true
			case "false":
				*field(c) = false
			default:
				return fmt.Errorf("%q: want true or false", v)
			}
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) }}
}

func durSetting(env, key, def, doc string, lo, hi time.Duration, field func(*Config) *time.Duration) setting {
	return setting{env: env, key: key, def: def, doc: doc,
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil || d < lo || d > hi {
				return fmt.Errorf("%q: want a duration from %v to %v (e.g. 500ms, 2s)", v, lo, hi)
			}
			*field(c) = d
			return nil
		},
		get: func(c *Config) string { return field(c).String() }}
}

func checkAddr(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%q: want host:port", v)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: bad port", v)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: bad host", v)
	}
	return nil
}

// Fields returns every setting as name → value for the start-up log, with
// secrets masked.
func (c *Config) Fields() map[string]string {
	out := make(map[string]string, len(settings))
	for _, s := range settings {
		v := s.get(c)
		if s.secret && v != "" && s.env != "FLASHGATE_AMQP_URL" && s.env != "FLASHGATE_MYSQL_DSN" {
			v = "***"
		}
		out[s.key] = v
	}
	return out
}

func maskDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "***"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "xxx"
	}
	return cfg.FormatDSN()
}

// checkOrigin accepts an origin as a browser sends it in Origin: a scheme
// (http or https), a host and an optional port, nothing else.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "/") || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#") {
		return fmt.Errorf("%q: want an origin such as https://shop.example or http://127.0.0.1:3000 (scheme, host and port, no path, no *)", o)
	}
	if o != strings.ToLower(u.Scheme)+"://"+strings.ToLower(u.Host) {
		return fmt.Errorf("%q: write the origin in lower case, as browsers send it (%s://%s)", o, strings.ToLower(u.Scheme), strings.ToLower(u.Host))
	}
	return nil
}
