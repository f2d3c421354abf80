// Package deploy holds no code: its tests check the deployment files beside
// them (compose.yaml, nginx.conf, ../Dockerfile) against the code. No Docker
// engine runs where the tests run, so they check what can be checked without
// one: the compose file parsed and held against config/ (compose_test.go),
// nginx.conf parsed and held against the compose file (nginx_test.go), and
// the image's build step run as a plain `go build` (dockerfile_test.go).
// What no library of the module reads is parsed by hand, each syntax in a
// file of its own with its table test: compose's interpolation and port
// syntax (composesyntax_test.go), nginx's configuration syntax
// (nginxsyntax_test.go), Dockerfile instructions and their shell words
// (dockersyntax_test.go).
package deploy

import (
	"net"
	"os"
	"testing"
)

// readFile returns a file of the repository, relative to this folder.
func readFile(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
