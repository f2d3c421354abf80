package admin_test

import (
	"testing"

	"github.com/flashgate/flashgate/admin"
)

// TestListenerURL holds the cases of the two functions ListenerURL
// replaced (the CLI's listenerURL and the bench command's dialable), with
// the one answer for "::" they disagreed on.
func TestListenerURL(t *testing.T) {
	for _, tc := range []struct{ name, addr, want string }{
		{"IPv4 wildcard", "0.0.0.0:8081", "http://127.0.0.1:8081"},
		{"empty host", ":8081", "http://127.0.0.1:8081"},
		{"IPv6 wildcard: 127.0.0.1 reaches Go's dual-stack socket, ::1 needs IPv6", "[::]:8081", "http://127.0.0.1:8081"},
		{"IPv6 wildcard spelled out", "[0:0:0:0:0:0:0:0]:8081", "http://127.0.0.1:8081"},
		{"IPv4-mapped wildcard", "[::ffff:0.0.0.0]:8081", "http://127.0.0.1:8081"},
		{"loopback", "127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"IPv6 loopback", "[::1]:8081", "http://[::1]:8081"},
		{"an address", "10.1.2.3:8081", "http://10.1.2.3:8081"},
		{"an IPv6 address", "[fd00::1]:8081", "http://[fd00::1]:8081"},
		{"a name", "localhost:8081", "http://localhost:8081"},
		{"no port: as it is", "gateway", "http://gateway"},
	} {
		if got := admin.ListenerURL(tc.addr); got != tc.want {
			t.Errorf("%s: ListenerURL(%q) = %q, want %q", tc.name, tc.addr, got, tc.want)
		}
	}
}
