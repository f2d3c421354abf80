package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

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
