package config_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

// TestAMQPNodes: amqp.url is one URL or a list of a cluster's nodes, from
// the environment or the file (a YAML list is a comma-separated one); URL
// keeps the value as given and Nodes splits it, in order, trimmed.
func TestAMQPNodes(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string
	}{
		{name: "default: one node", want: []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{name: "one url", env: []string{"FLASHGATE_AMQP_URL", "amqps://u:p@rabbit:5671/vh"},
			want: []string{"amqps://u:p@rabbit:5671/vh"}},
		{name: "a list of three",
			env:  []string{"FLASHGATE_AMQP_URL", "amqp://u:p@r1:5672/vh,amqp://u:p@r2:5672/vh,amqps://u:p@r3:5671/vh"},
			want: []string{"amqp://u:p@r1:5672/vh", "amqp://u:p@r2:5672/vh", "amqps://u:p@r3:5671/vh"}},
		{name: "blanks around the elements",
			env:  []string{"FLASHGATE_AMQP_URL", " amqp://r1/ , amqp://r2/ "},
			want: []string{"amqp://r1/", "amqp://r2/"}},
		{name: "an escaped comma is inside a password, not between nodes",
			env:  []string{"FLASHGATE_AMQP_URL", "amqp://u:a%2Cb@r1/,amqp://u:a%2Cb@r2/"},
			want: []string{"amqp://u:a%2Cb@r1/", "amqp://u:a%2Cb@r2/"}},
		{name: "a yaml list", yaml: "amqp:\n  url:\n    - amqp://u:p@r1:5672/\n    - amqp://u:p@r2:5672/\n",
			want: []string{"amqp://u:p@r1:5672/", "amqp://u:p@r2:5672/"}},
		{name: "a yaml flow list", yaml: "amqp:\n  url: [amqp://r1/, amqp://r2/]\n",
			want: []string{"amqp://r1/", "amqp://r2/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			c, err := config.Load(path, env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := c.AMQP.Nodes(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Nodes() = %q, want %q (URL %q)", got, tt.want, c.AMQP.URL)
			}
		})
	}
}

// TestAMQPURLErrors: a list with an empty or a bad element is refused, and
// the error says which element (its position), never its password.
func TestAMQPURLErrors(t *testing.T) {
	const good = "amqp://u:good-s3cret@r1:5672/"
	tests := []struct {
		name   string
		url    string
		want   []string // besides the setting's names
		secret string
	}{
		{name: "trailing comma", url: good + ",", want: []string{"element 2 of 2 is empty"}},
		{name: "leading comma", url: "," + good, want: []string{"element 1 of 2 is empty"}},
		{name: "two commas", url: good + ", ," + good, want: []string{"element 2 of 3 is empty"}},
		{name: "wrong scheme in a list", url: good + ",http://u:bad-s3cret@r2/",
			want: []string{"element 2 of 2", "amqp or amqps"}, secret: "bad-s3cret"},
		{name: "no host in a list", url: good + ",amqp:///vh," + good,
			want: []string{"element 2 of 3", "no host"}},
		{name: "not a url in a list", url: "amqp://u:bad%zzs3cret@r0/," + good,
			want: []string{"element 1 of 2", "not a URL"}, secret: "s3cret"},
		{name: "no scheme in a list", url: good + ",guest:bad-s3cret@r2:5672",
			want: []string{"element 2 of 2"}, secret: "bad-s3cret"},
		{name: "an unescaped comma splits a password", url: "amqp://u:bad,s3cret@r1/",
			want: []string{"element 1 of 2", "%2C"}, secret: "s3cret"},
		{name: "only a comma", url: ",", want: []string{"element 1 of 2 is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load("", env("FLASHGATE_AMQP_URL", tt.url))
			if err == nil {
				t.Fatalf("Load succeeded (nodes %q), want an error", c.AMQP.Nodes())
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			msg := err.Error()
			for _, w := range append([]string{"FLASHGATE_AMQP_URL", "amqp.url"}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			for _, s := range []string{"good-s3cret", tt.secret} {
				if s != "" && strings.Contains(msg, s) {
					t.Errorf("error %q shows the secret %q", msg, s)
				}
			}
		})
	}
}

// TestAMQPURLMasked: the start-up log (Fields) and MaskURL, which the broker
// names nodes with, mask the password of every element of a list and keep
// the rest of each.
func TestAMQPURLMasked(t *testing.T) {
	list := "amqp://u1:first-s3cret@r1:5672/vh, amqps://u2:second%40s3cret@r2:5671/vh,amqp://r3:5672/"
	c, err := config.Load("", env("FLASHGATE_AMQP_URL", list))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := "amqp://u1:xxx@r1:5672/vh,amqps://u2:xxx@r2:5671/vh,amqp://r3:5672/"
	if got := c.Fields()["amqp.url"]; got != want {
		t.Errorf("Fields()[amqp.url] = %q, want %q", got, want)
	}
	all := fmt.Sprint(c.Fields())
	for _, s := range []string{"first-s3cret", "second%40s3cret", "second@s3cret", "s3cret"} {
		if strings.Contains(all, s) {
			t.Errorf("Fields shows the secret %q", s)
		}
	}
	for _, tt := range []struct{ name, in, want string }{
		{"one url", "amqp://u:pw@r1:5672/", "amqp://u:xxx@r1:5672/"},
		{"no password", "amqp://u@r1:5672/", "amqp://u@r1:5672/"},
		{"each of a list", "amqp://u:pw@r1/,amqp://u:pw@r2/", "amqp://u:xxx@r1/,amqp://u:xxx@r2/"},
		{"an element that is not a url", "amqp://u:pw@r1/,amqp://u:p%zzw@r2/", "amqp://u:xxx@r1/,***"},
		{"an element without an authority", "amqp:u:pw@r1", "***"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := config.MaskURL(tt.in); got != tt.want {
				t.Errorf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
