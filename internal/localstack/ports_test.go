package localstack

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FreeAddrs hands out distinct loopback ports that can be listened on,
// below the kernel's ephemeral range (so that no connect and no listener
// on port 0 takes one meanwhile), and never the same port twice within
// reservedFor.
func TestFreeAddrs(t *testing.T) {
	lo, hi, err := candidatePorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 20 {
		addrs, err := FreeAddrs(3)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 3 {
			t.Fatalf("FreeAddrs(3) = %v", addrs)
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := strconv.Atoi(port)
			if host != "127.0.0.1" || p < lo || p >= hi {
				t.Fatalf("%s: want 127.0.0.1 and a port in [%d, %d)", a, lo, hi)
			}
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s not free: %v", a, err)
			}
			ln.Close()
		}
	}
}

// A port another process handed out a moment ago is not handed out again.
func TestReservePort(t *testing.T) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addrs[0])
	p, _ := strconv.Atoi(port)
	if ok, err := reservePort(p); ok || err != nil {
		t.Fatalf("port %d reserved twice: %v, %v", p, ok, err)
	}
}

// The ports the tests listen on stay clear of the local stack's: of every
// port stack.env names, and of the port 10000 above it (a Redis node's
// cluster bus, rabbitmqctl's distribution), which a service that a fault
// test stopped must find free when it starts again.
func TestTestPortsClearOfTheStack(t *testing.T) {
	for k, v := range stackEnv(t) {
		if !strings.Contains(k, "PORT") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("stack.env: %s=%s: %v", k, v, err)
			}
			for _, q := range []int{p, p + 10000} {
				if q >= testPortsLo && q < testPortsHi {
					t.Errorf("stack.env: %s=%s: port %d is in the tests' range [%d, %d)", k, v, q, testPortsLo, testPortsHi)
				}
			}
		}
	}
}

// Where the record cannot be written, FreeAddrs says so rather than
// handing out a port no other process knows is taken.
func TestFreeAddrsUnwritableRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "flashgate-ports"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", dir)
	if addrs, err := FreeAddrs(1); err == nil || !strings.Contains(err.Error(), "flashgate-ports") {
		t.Fatalf("FreeAddrs with no record: %v, %v; want an error naming the record", addrs, err)
	}
}
