package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Nodes returns the node URLs of a.URL in the order given: one URL, or the
// elements of a comma-separated list of the nodes of one RabbitMQ cluster,
// each trimmed of white space. A URL without a comma is one node, so the
// result is never empty. It checks nothing (Load has: no element is empty
// or malformed).
func (a AMQP) Nodes() []string {
	nodes := strings.Split(a.URL, ",")
	for i, n := range nodes {
		nodes[i] = strings.TrimSpace(n)
	}
	return nodes
}

// MaskURL returns raw, one AMQP URL or a comma-separated list of them, with
// the password of each replaced by "xxx", for logs and error messages. An
// element that is not a URL with an authority shows as "***": a password
// may hide anywhere in it.
func MaskURL(raw string) string {
	nodes := AMQP{URL: raw}.Nodes()
	for i, n := range nodes {
		nodes[i] = maskNode(n)
	}
	return strings.Join(nodes, ",")
}

func maskNode(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return "***"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// checkAMQPURL checks amqp.url: one URL, or a comma-separated list of them,
// each amqp:// or amqps:// with a host. An error names the element by its
// position and never quotes it: a malformed element may show its password.
func checkAMQPURL(v string) error {
	nodes := AMQP{URL: v}.Nodes()
	if len(nodes) == 1 {
		return checkNode(nodes[0])
	}
	for i, n := range nodes {
		if n == "" {
			return fmt.Errorf("element %d of %d is empty: want a comma-separated list of amqp://user:pass@host:port/vhost", i+1, len(nodes))
		}
		if err := checkNode(n); err != nil {
			return fmt.Errorf("element %d of %d: %w (in a list, a comma inside a URL is written %%2C)", i+1, len(nodes), err)
		}
	}
	return nil
}

// errAMQPForm is what a bad amqp.url element is told to look like.
var errAMQPForm = errors.New("want amqp://user:pass@host:port/vhost")

func checkNode(n string) error {
	u, err := url.Parse(n)
	switch {
	case err != nil:
		// err quotes n.
		return fmt.Errorf("not a URL (percent-encode reserved characters of the user and password): %w", errAMQPForm)
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return fmt.Errorf("scheme is not amqp or amqps: %w", errAMQPForm)
	case u.Host == "":
		return fmt.Errorf("no host: %w", errAMQPForm)
	}
	return nil
}
