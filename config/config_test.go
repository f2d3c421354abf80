package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// apiDefaults is the settings table of API.md, copied by hand on purpose: a
// change of a documented default has to change this test too.
var apiDefaults = map[string]string{
	"FLASHGATE_HTTP_ADDR":      "127.0.0.1:8080",
	"FLASHGATE_ADMIN_ADDR":     "127.0.0.1:8081",
	"FLASHGATE_ADMIN_TOKEN":    "",
	"FLASHGATE_REDIS_ADDRS":    "127.0.0.1:6379",
	"FLASHGATE_REDIS_PASSWORD": "",
	"FLASHGATE_AMQP_URL":       "amqp://guest:guest@127.0.0.1:5672/",
	"FLASHGATE_MYSQL_DSN":      "flashgate:flashgate@tcp(127.0.0.1:3306)/flashgate?parseTime=true",
	"FLASHGATE_SCRIPTS_DIR":    "",
	"FLASHGATE_REDIS_TIMEOUT":  "500ms",
	"FLASHGATE_MAX_BODY_BYTES": "4096",
	"FLASHGATE_LOG_LEVEL":      "info",

	"FLASHGATE_BUYER_JWT_SECRET":   "",
	"FLASHGATE_BUYER_JWT_KEY_FILE": "",
}

const (
	token16  = "0123456789abcdef"
	secret32 = "0123456789abcdef0123456789abcdef"
)

// env returns a getenv that knows only kv (name, value, name, value, …).
func env(kv ...string) func(string) string {
	if len(kv)%2 != 0 {
		panic("env: odd number of arguments")
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) string { return m[name] }
}

// writeYAML writes body to a fresh file and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flashgate.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigDefaults(t *testing.T) {
	c, err := config.Load("", env())
	if err != nil {
		t.Fatalf("Load with no file and no variables: %v", err)
	}
	if d := config.Default(); !reflect.DeepEqual(c, d) {
		t.Errorf("Load(\"\", empty env) = %+v, want Default() = %+v", c, d)
	}
	tests := []struct {
		env  string
		got  any
		want any
	}{
		{"FLASHGATE_HTTP_ADDR", c.HTTP.Addr, "127.0.0.1:8080"},
		{"FLASHGATE_ADMIN_ADDR", c.Admin.Addr, "127.0.0.1:8081"},
		{"FLASHGATE_ADMIN_TOKEN", c.Admin.Token, ""},
		{"FLASHGATE_REDIS_ADDRS", c.Redis.Addrs, []string{"127.0.0.1:6379"}},
		{"FLASHGATE_REDIS_PASSWORD", c.Redis.Password, ""},
		{"FLASHGATE_AMQP_URL", c.AMQP.URL, "amqp://guest:guest@127.0.0.1:5672/"},
		{"FLASHGATE_MYSQL_DSN", c.MySQL.DSN, "flashgate:flashgate@tcp(127.0.0.1:3306)/flashgate?parseTime=true"},
		{"FLASHGATE_SCRIPTS_DIR", c.Scripts.Dir, ""},
		{"FLASHGATE_REDIS_TIMEOUT", c.Redis.Timeout, 500 * time.Millisecond},
		{"FLASHGATE_MAX_BODY_BYTES", c.HTTP.MaxBodyBytes, 4096},
		{"FLASHGATE_LOG_LEVEL", c.Log.Level, "info"},
		{"FLASHGATE_BUYER_JWT_SECRET", c.Buyer.JWTSecret, ""},
		{"FLASHGATE_BUYER_JWT_KEY_FILE", c.Buyer.JWTKeyFile, ""},
	}
	if c.Buyer.On() {
		t.Error("buyer authentication is on by default; API.md has it off")
	}
	if len(tests) != len(apiDefaults) {
		t.Fatalf("%d rows for the %d settings of API.md", len(tests), len(apiDefaults))
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("default %s = %#v, want %#v (API.md)", tt.env, tt.got, tt.want)
			}
		})
	}
}

func TestConfigEnv(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		got   func(c *config.Config) any
		want  any
		notes string
	}{
		{name: "http addr", env: []string{"FLASHGATE_HTTP_ADDR", "0.0.0.0:9000"},
			got: func(c *config.Config) any { return c.HTTP.Addr }, want: "0.0.0.0:9000"},
		{name: "admin addr", env: []string{"FLASHGATE_ADMIN_ADDR", "127.0.0.1:9001"},
			got: func(c *config.Config) any { return c.Admin.Addr }, want: "127.0.0.1:9001"},
		{name: "admin addr ipv6 loopback without token", env: []string{"FLASHGATE_ADMIN_ADDR", "[::1]:9001"},
			got: func(c *config.Config) any { return c.Admin.Addr }, want: "[::1]:9001"},
		{name: "admin addr public with token", env: []string{"FLASHGATE_ADMIN_ADDR", "0.0.0.0:8081", "FLASHGATE_ADMIN_TOKEN", token16},
			got: func(c *config.Config) any { return [2]string{c.Admin.Addr, c.Admin.Token} }, want: [2]string{"0.0.0.0:8081", token16}},
		{name: "admin token", env: []string{"FLASHGATE_ADMIN_TOKEN", token16 + "xyz"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: token16 + "xyz"},
		{name: "admin token of every printable kind", env: []string{"FLASHGATE_ADMIN_TOKEN", "A-z0_9.~+/=!#$%&'*^`|"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: "A-z0_9.~+/=!#$%&'*^`|"},
		{name: "admin token read from a file keeps no newline", env: []string{"FLASHGATE_ADMIN_TOKEN", token16 + "\n"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: token16},
		{name: "buyer jwt secret", env: []string{"FLASHGATE_BUYER_JWT_SECRET", secret32},
			got: func(c *config.Config) any { return []any{c.Buyer.JWTSecret, c.Buyer.On()} }, want: []any{secret32, true}},
		{name: "redis addrs one", env: []string{"FLASHGATE_REDIS_ADDRS", "10.0.0.1:7000"},
			got: func(c *config.Config) any { return c.Redis.Addrs }, want: []string{"10.0.0.1:7000"}},
		{name: "redis addrs cluster with spaces", env: []string{"FLASHGATE_REDIS_ADDRS", "10.0.0.1:7000, 10.0.0.2:7001 ,10.0.0.3:7002"},
			got: func(c *config.Config) any { return c.Redis.Addrs }, want: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{name: "redis password", env: []string{"FLASHGATE_REDIS_PASSWORD", "pw"},
			got: func(c *config.Config) any { return c.Redis.Password }, want: "pw"},
		{name: "redis timeout", env: []string{"FLASHGATE_REDIS_TIMEOUT", "2s"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: 2 * time.Second},
		{name: "redis timeout lowest", env: []string{"FLASHGATE_REDIS_TIMEOUT", "1ms"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: time.Millisecond},
		{name: "redis timeout highest", env: []string{"FLASHGATE_REDIS_TIMEOUT", "1m"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: time.Minute},
		{name: "amqp url", env: []string{"FLASHGATE_AMQP_URL", "amqps://u:p@rabbit:5671/vh"},
			got: func(c *config.Config) any { return c.AMQP.URL }, want: "amqps://u:p@rabbit:5671/vh"},
		{name: "mysql dsn", env: []string{"FLASHGATE_MYSQL_DSN", "u:p@tcp(db:3306)/orders"},
			got: func(c *config.Config) any { return c.MySQL.DSN }, want: "u:p@tcp(db:3306)/orders"},
		{name: "scripts dir", env: []string{"FLASHGATE_SCRIPTS_DIR", "/srv/lua"},
			got: func(c *config.Config) any { return c.Scripts.Dir }, want: "/srv/lua"},
		{name: "max body bytes lowest", env: []string{"FLASHGATE_MAX_BODY_BYTES", "64"},
			got: func(c *config.Config) any { return c.HTTP.MaxBodyBytes }, want: 64},
		{name: "max body bytes highest", env: []string{"FLASHGATE_MAX_BODY_BYTES", "1048576"},
			got: func(c *config.Config) any { return c.HTTP.MaxBodyBytes }, want: 1 << 20},
		{name: "log level", env: []string{"FLASHGATE_LOG_LEVEL", "debug"},
			got: func(c *config.Config) any { return c.Log.Level }, want: "debug"},
		{name: "key prefix", env: []string{"FLASHGATE_REDIS_KEY_PREFIX", "shop-2.eu_1"},
			got: func(c *config.Config) any { return c.Redis.KeyPrefix }, want: "shop-2.eu_1"},
		{name: "max conns derived by default", env: nil,
			got: func(c *config.Config) any { return [2]int{c.HTTP.MaxConns, c.HTTP.MaxConnsPerIP} }, want: [2]int{0, 0}},
		{name: "max conns zero is derived", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "0"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 0},
		{name: "max conns lowest", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "16"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 16},
		{name: "max conns highest", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "10000000"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 10_000_000},
		{name: "max conns per ip", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "64"},
			got: func(c *config.Config) any { return c.HTTP.MaxConnsPerIP }, want: 64},
		{name: "max conns per ip highest", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "1000000"},
			got: func(c *config.Config) any { return c.HTTP.MaxConnsPerIP }, want: 1_000_000},
		{name: "empty variable is unset", env: []string{"FLASHGATE_HTTP_ADDR", "", "FLASHGATE_REDIS_TIMEOUT", ""},
			got: func(c *config.Config) any { return fmt.Sprint(c.HTTP.Addr, " ", c.Redis.Timeout) }, want: "127.0.0.1:8080 500ms"},
		{name: "both listeners on port 0", env: []string{"FLASHGATE_HTTP_ADDR", "127.0.0.1:0", "FLASHGATE_ADMIN_ADDR", "127.0.0.1:0"},
			got: func(c *config.Config) any { return c.HTTP.Addr + " " + c.Admin.Addr }, want: "127.0.0.1:0 127.0.0.1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load("", env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		got  func(c *config.Config) any
		want any
	}{
		{name: "every documented section",
			yaml: `
http:
  addr: 127.0.0.1:9080
  max_body_bytes: 8192
admin:
  addr: 127.0.0.1:9081
  token: ` + token16 + `
redis:
  addrs: 10.0.0.1:6379
  password: pw
  timeout: 250ms
amqp:
  url: amqp://u:p@rabbit:5672/
mysql:
  dsn: u:p@tcp(db:3306)/orders
scripts:
  dir: /srv/lua
log:
  level: warn
`,
			got: func(c *config.Config) any {
				return []any{c.HTTP.Addr, c.HTTP.MaxBodyBytes, c.Admin.Addr, c.Admin.Token, c.Redis.Addrs,
					c.Redis.Password, c.Redis.Timeout, c.AMQP.URL, c.MySQL.DSN, c.Scripts.Dir, c.Log.Level}
			},
			want: []any{"127.0.0.1:9080", 8192, "127.0.0.1:9081", token16, []string{"10.0.0.1:6379"},
				"pw", 250 * time.Millisecond, "amqp://u:p@rabbit:5672/", "u:p@tcp(db:3306)/orders", "/srv/lua", "warn"}},
		{name: "redis addrs as a list",
			yaml: "redis:\n  addrs:\n    - 10.0.0.1:7000\n    - 10.0.0.2:7001\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{name: "redis addrs as a flow list",
			yaml: "redis:\n  addrs: [10.0.0.1:7000, 10.0.0.2:7001]\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{name: "redis addrs as a comma string",
			yaml: "redis:\n  addrs: 10.0.0.1:7000,10.0.0.2:7001, 10.0.0.3:7002\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{name: "durations",
			yaml: "redis:\n  timeout: 500ms\nshutdown:\n  drain_delay: 0s\n  timeout: 1m30s\n",
			got: func(c *config.Config) any {
				return []time.Duration{c.Redis.Timeout, c.Shutdown.DrainDelay, c.Shutdown.Timeout}
			},
			want: []time.Duration{500 * time.Millisecond, 0, 90 * time.Second}},
		{name: "connection limits",
			yaml: "http:\n  max_conns: 5000\n  max_conns_per_ip: 32\n",
			got:  func(c *config.Config) any { return [2]int{c.HTTP.MaxConns, c.HTTP.MaxConnsPerIP} },
			want: [2]int{5000, 32}},
		{name: "quoted values",
			yaml: "http:\n  addr: \"127.0.0.1:9080\"\n  max_body_bytes: '2048'\n",
			got:  func(c *config.Config) any { return []any{c.HTTP.Addr, c.HTTP.MaxBodyBytes} },
			want: []any{"127.0.0.1:9080", 2048}},
		{name: "env overrides yaml",
			yaml: "redis:\n  timeout: 250ms\n  addrs: [10.0.0.1:7000]\nlog:\n  level: warn\n",
			env:  []string{"FLASHGATE_REDIS_TIMEOUT", "750ms", "FLASHGATE_REDIS_ADDRS", "10.0.0.9:7009"},
			got:  func(c *config.Config) any { return []any{c.Redis.Timeout, c.Redis.Addrs, c.Log.Level} },
			want: []any{750 * time.Millisecond, []string{"10.0.0.9:7009"}, "warn"}},
		{name: "env rescues a bad yaml pair",
			// http and admin equal in the file, told apart by the environment:
			// Validate runs after both sources, not after the file alone.
			yaml: "http:\n  addr: 127.0.0.1:9000\nadmin:\n  addr: 127.0.0.1:9000\n",
			env:  []string{"FLASHGATE_ADMIN_ADDR", "127.0.0.1:9001"},
			got:  func(c *config.Config) any { return c.Admin.Addr },
			want: "127.0.0.1:9001"},
		{name: "unset variables keep yaml secrets",
			yaml: "admin:\n  addr: 0.0.0.0:8081\n  token: " + token16 + "\nredis:\n  password: pw\n",
			got:  func(c *config.Config) any { return []string{c.Admin.Addr, c.Admin.Token, c.Redis.Password} },
			want: []string{"0.0.0.0:8081", token16, "pw"}},
		{name: "empty file",
			yaml: "",
			got:  func(c *config.Config) any { return c },
			want: config.Default()},
		{name: "comments only",
			yaml: "# nothing set here\n",
			got:  func(c *config.Config) any { return c },
			want: config.Default()},
		{name: "null value is empty",
			yaml: "scripts:\n  dir:\nadmin:\n  token: ~\n",
			got:  func(c *config.Config) any { return c.Scripts.Dir + "|" + c.Admin.Token },
			want: "|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(writeYAML(t, tt.yaml), env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

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

func TestConfigFieldsMasksSecrets(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		key     string   // the Fields entry of the secret
		secrets []string // none may appear anywhere in Fields
		keep    []string // what the masked value must still show
	}{
		{name: "admin token",
			env: []string{"FLASHGATE_ADMIN_TOKEN", "tok-" + token16}, key: "admin.token",
			secrets: []string{"tok-" + token16, token16}},
		{name: "redis password",
			env: []string{"FLASHGATE_REDIS_PASSWORD", "redis-s3cret"}, key: "redis.password",
			secrets: []string{"redis-s3cret"}},
		{name: "amqp url password",
			env: []string{"FLASHGATE_AMQP_URL", "amqp://rabbit-user:amqp-s3cret@rabbit:5672/vh"}, key: "amqp.url",
			secrets: []string{"amqp-s3cret"}, keep: []string{"rabbit-user", "rabbit:5672"}},
		{name: "amqp url escaped password",
			env: []string{"FLASHGATE_AMQP_URL", "amqps://rabbit-user:am%40qp-s3cret@rabbit:5671/"}, key: "amqp.url",
			secrets: []string{"am%40qp-s3cret", "am@qp-s3cret", "qp-s3cret"}, keep: []string{"rabbit:5671"}},
		{name: "mysql dsn password",
			env: []string{"FLASHGATE_MYSQL_DSN", "db-user:mysql-s3cret@tcp(db:3306)/orders?parseTime=true"}, key: "mysql.dsn",
			secrets: []string{"mysql-s3cret"}, keep: []string{"db-user", "db:3306", "orders"}},
		{name: "mysql dsn password with at sign",
			env: []string{"FLASHGATE_MYSQL_DSN", "db-user:my@sql-s3cret@tcp(db:3306)/orders"}, key: "mysql.dsn",
			secrets: []string{"my@sql-s3cret", "sql-s3cret"}, keep: []string{"db:3306"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load("", env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			fields := c.Fields()
			v, ok := fields[tt.key]
			if !ok {
				t.Fatalf("Fields has no %q", tt.key)
			}
			if v == "" {
				t.Errorf("Fields()[%q] is empty; a set secret should show as masked", tt.key)
			}
			all := fmt.Sprint(fields)
			for _, s := range tt.secrets {
				if strings.Contains(all, s) {
					t.Errorf("Fields shows the secret %q: %s = %q", s, tt.key, v)
				}
			}
			for _, k := range tt.keep {
				if !strings.Contains(v, k) {
					t.Errorf("Fields()[%q] = %q lost %q", tt.key, v, k)
				}
			}
		})
	}
}

func TestConfigFieldsCoversSettings(t *testing.T) {
	fields := config.Default().Fields()
	settings := config.Settings()
	if len(fields) != len(settings) {
		t.Errorf("Fields has %d entries, Settings %d", len(fields), len(settings))
	}
	for _, s := range settings {
		if _, ok := fields[s.Key]; !ok {
			t.Errorf("Fields has no %q", s.Key)
		}
	}
}

func TestConfigSettings(t *testing.T) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Default panicked: %v", r)
			}
		}()
		config.Default()
	}()

	settings := config.Settings()
	envs := map[string]config.Setting{}
	keys := map[string]bool{}
	for _, s := range settings {
		if _, dup := envs[s.Env]; dup {
			t.Errorf("variable %s declared twice", s.Env)
		}
		if keys[s.Key] {
			t.Errorf("YAML key %s declared twice", s.Key)
		}
		envs[s.Env] = s
		keys[s.Key] = true
	}

	t.Run("documented in API.md", func(t *testing.T) {
		for name, def := range apiDefaults {
			s, ok := envs[name]
			if !ok {
				t.Errorf("API.md names %s; Settings() does not", name)
				continue
			}
			if s.Default != def {
				t.Errorf("%s default %q, API.md says %q", name, s.Default, def)
			}
		}
	})

	for _, s := range settings {
		t.Run(s.Env, func(t *testing.T) {
			if !strings.HasPrefix(s.Env, "FLASHGATE_") {
				t.Errorf("variable %s does not start with FLASHGATE_", s.Env)
			}
			if s.Doc == "" {
				t.Errorf("%s has no doc", s.Env)
			}
			section, name, ok := strings.Cut(s.Key, ".")
			if !ok || section == "" || name == "" || strings.Contains(name, ".") {
				t.Fatalf("YAML key %q is not section.name", s.Key)
			}
			want := config.Default().Fields()[s.Key]

			// The default, given back through the environment, parses and
			// means the default.
			c, err := config.Load("", env(s.Env, s.Default))
			if err != nil {
				t.Fatalf("default %q via %s: %v", s.Default, s.Env, err)
			}
			if got := c.Fields()[s.Key]; got != want {
				t.Errorf("default via %s reads back as %q, want %q", s.Env, got, want)
			}

			// The same through the YAML file, under its nested key.
			body := fmt.Sprintf("%s:\n  %s: %q\n", section, name, s.Default)
			c, err = config.Load(writeYAML(t, body), env())
			if err != nil {
				t.Fatalf("default %q via YAML %s: %v", s.Default, s.Key, err)
			}
			if got := c.Fields()[s.Key]; got != want {
				t.Errorf("default via YAML %s reads back as %q, want %q", s.Key, got, want)
			}
		})
	}
}

// A secret is masked in the start-up log like every other.
func TestConfigFieldsMasksBuyerSecret(t *testing.T) {
	c, err := config.Load("", env("FLASHGATE_BUYER_JWT_SECRET", secret32))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Fields()["buyer.jwt_secret"]; v != "***" {
		t.Errorf("Fields()[buyer.jwt_secret] = %q, want ***", v)
	}
}

// Zero-loss mode is off unless asked for, from either source.
func TestZeroLossSetting(t *testing.T) {
	if config.Default().Redis.ZeroLoss {
		t.Fatal("redis.zero_loss is on by default")
	}
	for _, tt := range []struct {
		name, yaml string
		env        []string
		want       bool
	}{
		{name: "env true", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", "true"}, want: true},
		{name: "env TRUE", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", " TRUE "}, want: true},
		{name: "yaml true", yaml: "redis:\n  zero_loss: true\n", want: true},
		{name: "env false over yaml true", yaml: "redis:\n  zero_loss: true\n", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", "false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			c, err := config.Load(path, env(tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			if c.Redis.ZeroLoss != tt.want {
				t.Errorf("redis.zero_loss = %v, want %v", c.Redis.ZeroLoss, tt.want)
			}
			if got := c.Fields()["redis.zero_loss"]; got != strconv.FormatBool(tt.want) {
				t.Errorf("Fields: redis.zero_loss = %q", got)
			}
		})
	}
}
