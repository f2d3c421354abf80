package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

func TestConfigErrors(t *testing.T) {
	const fileName = "<file>" // stands for the YAML file's path in want
	tests := []struct {
		name   string
		yaml   string   // written to a file when not empty
		env    []string // name, value, …
		want   []string // substrings of err.Error()
		secret string   // must not appear in err.Error()
	}{
		// The YAML file itself.
		{name: "unknown top-level key", yaml: "colour: red\n",
			want: []string{`"colour"`, fileName}},
		{name: "unknown nested key", yaml: "redis:\n  adr: 127.0.0.1:6379\n",
			want: []string{`"redis.adr"`, fileName}},
		{name: "unknown key beside good ones", yaml: "redis:\n  addrs: 127.0.0.1:6379\n  timout: 1s\n",
			want: []string{`"redis.timout"`, fileName}},
		{name: "unknown key does not echo its value", yaml: "admin:\n  tokn: hunter2hunter2hunter2\n",
			want: []string{`"admin.tokn"`, fileName}, secret: "hunter2hunter2hunter2"},
		{name: "section given a scalar", yaml: "redis: 127.0.0.1:6379\n",
			want: []string{"redis", fileName}},
		{name: "section given a list", yaml: "http: [127.0.0.1:8080]\n",
			want: []string{"http", fileName}},
		{name: "setting given a mapping", yaml: "redis:\n  timeout:\n    ms: 500\n",
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout", fileName}},
		{name: "list of lists", yaml: "redis:\n  addrs:\n    - [127.0.0.1:6379]\n",
			want: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs", fileName}},
		{name: "malformed yaml", yaml: "redis:\n  addrs: [127.0.0.1:6379\n",
			want: []string{fileName}},
		{name: "malformed yaml tab indent", yaml: "redis:\n\taddrs: x\n",
			want: []string{fileName}},
		{name: "top level not a mapping", yaml: "- 127.0.0.1:6379\n",
			want: []string{fileName}},

		// Addresses.
		{name: "http addr without port", env: []string{"FLASHGATE_HTTP_ADDR", "localhost"},
			want: []string{"FLASHGATE_HTTP_ADDR", "http.addr"}},
		{name: "admin addr port out of range", env: []string{"FLASHGATE_ADMIN_ADDR", ":99999"},
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr"}},
		{name: "http addr port not a number", env: []string{"FLASHGATE_HTTP_ADDR", "127.0.0.1:http"},
			want: []string{"FLASHGATE_HTTP_ADDR", "http.addr"}},
		{name: "http addr in yaml", yaml: "http:\n  addr: localhost\n",
			want: []string{"FLASHGATE_HTTP_ADDR", "http.addr"}},
		{name: "redis addrs one bad", env: []string{"FLASHGATE_REDIS_ADDRS", "127.0.0.1:6379,localhost"},
			want: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs"}},
		{name: "redis addrs only commas", env: []string{"FLASHGATE_REDIS_ADDRS", " , "},
			want: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs"}},
		{name: "redis addrs empty list in yaml", yaml: "redis:\n  addrs: []\n",
			want: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs"}},
		{name: "redis addrs bad port in yaml list", yaml: "redis:\n  addrs:\n    - 127.0.0.1:6379\n    - 127.0.0.1:99999\n",
			want: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs"}},

		// Redis timeout.
		{name: "timeout not a duration", env: []string{"FLASHGATE_REDIS_TIMEOUT", "abc"},
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "timeout zero", env: []string{"FLASHGATE_REDIS_TIMEOUT", "0"},
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "timeout too long", env: []string{"FLASHGATE_REDIS_TIMEOUT", "2h"},
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "timeout negative", env: []string{"FLASHGATE_REDIS_TIMEOUT", "-5ms"},
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "timeout without unit in yaml", yaml: "redis:\n  timeout: 500\n",
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "timeout bad in yaml", yaml: "redis:\n  timeout: abc\n",
			want: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},

		// Body limit.
		{name: "body limit too small", env: []string{"FLASHGATE_MAX_BODY_BYTES", "10"},
			want: []string{"FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes"}},
		{name: "body limit too large", env: []string{"FLASHGATE_MAX_BODY_BYTES", "5000000"},
			want: []string{"FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes"}},
		{name: "body limit with unit", env: []string{"FLASHGATE_MAX_BODY_BYTES", "4k"},
			want: []string{"FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes"}},
		{name: "body limit in yaml", yaml: "http:\n  max_body_bytes: 5000000\n",
			want: []string{"FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes"}},

		// Log level.
		{name: "log level verbose", env: []string{"FLASHGATE_LOG_LEVEL", "verbose"},
			want: []string{"FLASHGATE_LOG_LEVEL", "log.level"}},
		{name: "log level upper case", env: []string{"FLASHGATE_LOG_LEVEL", "INFO"},
			want: []string{"FLASHGATE_LOG_LEVEL", "log.level"}},
		{name: "log level in yaml", yaml: "log:\n  level: verbose\n",
			want: []string{"FLASHGATE_LOG_LEVEL", "log.level"}},

		// Admin listener.
		{name: "admin token too short", env: []string{"FLASHGATE_ADMIN_TOKEN", "short-secret"},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}, secret: "short-secret"},
		{name: "admin token too short in yaml", yaml: "admin:\n  token: short-secret\n",
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}, secret: "short-secret"},
		// A token set to something a client cannot send back as it is, or
		// that is only white space (it read as unset: the admin API stayed
		// open on loopback while the operator believed it protected).
		{name: "admin token of 16 spaces", env: []string{"FLASHGATE_ADMIN_TOKEN", strings.Repeat(" ", 16)},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token", "white space"}},
		{name: "admin token of 16 spaces in yaml", yaml: "admin:\n  token: \"" + strings.Repeat(" ", 16) + "\"\n",
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token", "white space"}},
		{name: "admin token of tabs and newlines", env: []string{"FLASHGATE_ADMIN_TOKEN", "\t\t\t\t\n\n\n\n\t\t\t\t\r\r\r\r"},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}},
		{name: "admin token with a space inside", env: []string{"FLASHGATE_ADMIN_TOKEN", "01234567 89abcdef"},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token", "printable ASCII"}, secret: "01234567 89abcdef"},
		{name: "admin token with a tab inside in yaml", yaml: "admin:\n  token: \"01234567\\t89abcdef\"\n",
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token", "printable ASCII"}},
		{name: "admin token with NUL bytes", env: []string{"FLASHGATE_ADMIN_TOKEN", strings.Repeat("\x00", 16)},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}},
		{name: "admin token with DEL", env: []string{"FLASHGATE_ADMIN_TOKEN", token16 + "\x7f"},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}},
		{name: "admin token of non-ASCII letters", env: []string{"FLASHGATE_ADMIN_TOKEN", "ééééééééééééééééé"},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}},
		{name: "admin token of zero-width spaces", env: []string{"FLASHGATE_ADMIN_TOKEN", strings.Repeat("\u200b", 16)},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"}},
		{name: "admin token short once trimmed", env: []string{"FLASHGATE_ADMIN_TOKEN", "      short-secret      "},
			want: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token", "16"}, secret: "short-secret"},

		// Buyer authentication.
		{name: "buyer secret too short", env: []string{"FLASHGATE_BUYER_JWT_SECRET", secret32[:31]},
			want: []string{"FLASHGATE_BUYER_JWT_SECRET", "buyer.jwt_secret", "32"}, secret: secret32[:31]},
		{name: "buyer secret too short in yaml", yaml: "buyer:\n  jwt_secret: " + secret32[:20] + "\n",
			want: []string{"FLASHGATE_BUYER_JWT_SECRET", "buyer.jwt_secret", "32"}, secret: secret32[:20]},
		{name: "buyer secret of spaces", env: []string{"FLASHGATE_BUYER_JWT_SECRET", strings.Repeat(" ", 40)},
			want: []string{"FLASHGATE_BUYER_JWT_SECRET", "buyer.jwt_secret", "white space"}},
		{name: "buyer key file of spaces", env: []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "   "},
			want: []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "buyer.jwt_key_file"}},
		{name: "buyer secret and key file both", env: []string{"FLASHGATE_BUYER_JWT_SECRET", secret32, "FLASHGATE_BUYER_JWT_KEY_FILE", "/etc/hostname"},
			want: []string{"FLASHGATE_BUYER_JWT_SECRET", "FLASHGATE_BUYER_JWT_KEY_FILE", "not both"}, secret: secret32},

		{name: "admin public without token", env: []string{"FLASHGATE_ADMIN_ADDR", "0.0.0.0:8081"},
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr", "FLASHGATE_ADMIN_TOKEN"}},
		{name: "admin all interfaces without token", env: []string{"FLASHGATE_ADMIN_ADDR", ":8081"},
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr"}},
		{name: "admin public without token in yaml", yaml: "admin:\n  addr: 10.1.2.3:8081\n",
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr"}},
		{name: "same address for http and admin", env: []string{"FLASHGATE_HTTP_ADDR", "127.0.0.1:9000", "FLASHGATE_ADMIN_ADDR", "127.0.0.1:9000"},
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr", "FLASHGATE_HTTP_ADDR"}},
		{name: "admin moved onto the default http addr", env: []string{"FLASHGATE_ADMIN_ADDR", "127.0.0.1:8080"},
			want: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr"}},

		// Redis key prefix.
		{name: "key prefix with space", env: []string{"FLASHGATE_REDIS_KEY_PREFIX", "bad prefix!"},
			want: []string{"FLASHGATE_REDIS_KEY_PREFIX", "redis.key_prefix"}},
		{name: "key prefix with braces", env: []string{"FLASHGATE_REDIS_KEY_PREFIX", "{fg}"},
			want: []string{"FLASHGATE_REDIS_KEY_PREFIX", "redis.key_prefix"}},
		{name: "key prefix too long", env: []string{"FLASHGATE_REDIS_KEY_PREFIX", strings.Repeat("a", 33)},
			want: []string{"FLASHGATE_REDIS_KEY_PREFIX", "redis.key_prefix"}},
		{name: "key prefix empty in yaml", yaml: "redis:\n  key_prefix: \"\"\n",
			want: []string{"FLASHGATE_REDIS_KEY_PREFIX", "redis.key_prefix"}},

		// AMQP URL.
		{name: "amqp url wrong scheme", env: []string{"FLASHGATE_AMQP_URL", "http://x"},
			want: []string{"FLASHGATE_AMQP_URL", "amqp.url"}},
		{name: "amqp url wrong scheme keeps password", env: []string{"FLASHGATE_AMQP_URL", "http://u:hunter2hunter2@x/"},
			want: []string{"FLASHGATE_AMQP_URL", "amqp.url"}, secret: "hunter2hunter2"},
		{name: "amqp url without host", env: []string{"FLASHGATE_AMQP_URL", "amqp:///vhost"},
			want: []string{"FLASHGATE_AMQP_URL", "amqp.url"}},
		{name: "amqp url not a url", env: []string{"FLASHGATE_AMQP_URL", "amqp://u:p%zz@x/"},
			want: []string{"FLASHGATE_AMQP_URL", "amqp.url"}, secret: "p%zz"},

		// MySQL DSN.
		{name: "dsn without database", env: []string{"FLASHGATE_MYSQL_DSN", "u:hunter2hunter2@tcp(127.0.0.1:3306)/"},
			want: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}, secret: "hunter2hunter2"},
		{name: "dsn without slash", env: []string{"FLASHGATE_MYSQL_DSN", "u:hunter2hunter2@tcp(127.0.0.1:3306)"},
			want: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}, secret: "hunter2hunter2"},
		{name: "dsn bad parameter", env: []string{"FLASHGATE_MYSQL_DSN", "u:p@tcp(127.0.0.1:3306)/db?parseTime=maybe"},
			want: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}},
		{name: "dsn with a newline inside a parameter", env: []string{"FLASHGATE_MYSQL_DSN", "u:p@tcp(127.0.0.1:3306)/db?parseTime=tr\nue"},
			want: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}},
		{name: "dsn without database in yaml", yaml: "mysql:\n  dsn: u:p@tcp(127.0.0.1:3306)/\n",
			want: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}},

		// Connection limits.
		{name: "max conns between 0 and 16", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "8"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS", "http.max_conns"}},
		{name: "max conns negative", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "-1"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS", "http.max_conns"}},
		{name: "max conns too large", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "10000001"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS", "http.max_conns"}},
		{name: "max conns not a number", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "lots"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS", "http.max_conns"}},
		{name: "max conns in yaml", yaml: "http:\n  max_conns: 1\n",
			want: []string{"FLASHGATE_HTTP_MAX_CONNS", "http.max_conns"}},
		{name: "max conns per ip negative", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "-1"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "http.max_conns_per_ip"}},
		{name: "max conns per ip too large", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "1000001"},
			want: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "http.max_conns_per_ip"}},
		{name: "max conns per ip in yaml", yaml: "http:\n  max_conns_per_ip: 1.5\n",
			want: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "http.max_conns_per_ip"}},

		// Other bounded settings, one row each.
		{name: "log format", env: []string{"FLASHGATE_LOG_FORMAT", "text"},
			want: []string{"FLASHGATE_LOG_FORMAT", "log.format"}},
		{name: "pool size zero", env: []string{"FLASHGATE_REDIS_POOL_SIZE", "0"},
			want: []string{"FLASHGATE_REDIS_POOL_SIZE", "redis.pool_size"}},
		{name: "admission rate negative", env: []string{"FLASHGATE_ADMISSION_RATE", "-1"},
			want: []string{"FLASHGATE_ADMISSION_RATE", "admission.rate"}},
		{name: "amqp queue name with space", env: []string{"FLASHGATE_AMQP_QUEUE", "my queue"},
			want: []string{"FLASHGATE_AMQP_QUEUE", "amqp.queue"}},
		{name: "zero loss not a bool", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", "yes"},
			want: []string{"FLASHGATE_REDIS_ZERO_LOSS", "redis.zero_loss", "want true or false"}},
		{name: "zero loss in yaml not a bool", yaml: "redis:\n  zero_loss: 1\n",
			want: []string{"FLASHGATE_REDIS_ZERO_LOSS", "redis.zero_loss"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			c, err := config.Load(path, env(tt.env...))
			if err == nil {
				t.Fatalf("Load succeeded (%+v), want an error", c)
			}
			if c != nil {
				t.Errorf("Load returned a config beside its error")
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			for _, w := range tt.want {
				if w == fileName {
					w = path
				}
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
			if tt.secret != "" && strings.Contains(msg, tt.secret) {
				t.Errorf("error %q shows the secret %q", msg, tt.secret)
			}
		})
	}
}

func TestConfigMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := config.Load(path, env())
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the file %s", err, path)
	}
}
