package localstack

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FreeAddrs returns n distinct loopback addresses that were free a moment
// ago, for a process about to be started to listen on.
//
// A port is free between this call and the process's bind only if nobody
// else takes it meanwhile, and on a machine that runs the tests of several
// packages at once plenty of sockets are being opened. So the ports come
// from a range of their own, [testPortsLo, testPortsHi): below the
// kernel's ephemeral range, so that no connect and no listener on port 0,
// in any process, is given one of them, and clear of the local stack's
// ports, so that a service stopped by a fault test finds its own free when
// it starts again. What remains is FreeAddrs in another process picking
// the same port in that moment: a port handed out is recorded under the
// temporary folder and not handed out again, by any process, for
// reservedFor. Each port is checked by listening on it, all held open
// until the last is chosen. A start must still tell a port taken from
// success (a launch fails when the process exits at start).
func FreeAddrs(n int) ([]string, error) {
	lo, hi, err := candidatePorts()
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 0, n)
	for tries := 0; len(addrs) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("localstack: no free loopback port in %d-%d after %d tries", lo, hi-1, tries)
		}
		port := lo + rand.IntN(hi-lo)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		defer ln.Close()
		if ok, err := reservePort(port); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// reservedFor is how long a port FreeAddrs handed out stays out of its
// hands, in every process: longer than any process takes to start.
const reservedFor = 2 * time.Minute

// reservePort records port as handed out now, and reports false when some
// process did so within reservedFor. An error is a record that cannot be
// written (the temporary folder is not writable): no port is handed out.
func reservePort(port int) (bool, error) {
	dir := filepath.Join(os.TempDir(), "flashgate-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return false, fmt.Errorf("localstack: ports handed out are recorded in %s: %w", dir, err)
	}
	name := filepath.Join(dir, strconv.Itoa(port))
	if fi, err := os.Stat(name); err == nil && time.Since(fi.ModTime()) < reservedFor {
		return false, nil
	}
	if err := os.WriteFile(name, nil, 0o666); err != nil {
		return false, fmt.Errorf("localstack: ports handed out are recorded in %s: %w", dir, err)
	}
	now := time.Now()
	if err := os.Chtimes(name, now, now); err != nil {
		return false, fmt.Errorf("localstack: ports handed out are recorded in %s: %w", dir, err)
	}
	return true, nil
}

// testPortsLo and testPortsHi bound the ports FreeAddrs picks from,
// [testPortsLo, testPortsHi): above every port of the local stack
// (deploy/local/stack.env, whose test holds it clear of this range) and
// 10000 above them, where Redis puts a cluster bus and rabbitmqctl its
// distribution; below the Erlang distribution ports, Sentinel's ports and
// the kernel's ephemeral range (32768 by default).
const testPortsLo, testPortsHi = 18000, 25000

// candidatePorts is the range [lo, hi) FreeAddrs picks from: the test
// ports, cut at the kernel's ephemeral range where a machine starts it
// lower than usual.
func candidatePorts() (lo, hi int, err error) {
	lo, hi = testPortsLo, testPortsHi
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = min(hi, v)
			}
		}
	}
	if hi-lo < 1000 {
		return 0, 0, fmt.Errorf("localstack: the kernel's ephemeral ports (net.ipv4.ip_local_port_range) start at %d, "+
			"inside the ports the tests listen on (%d-%d); start them at %d or above", hi, testPortsLo, testPortsHi-1, testPortsHi)
	}
	return lo, hi, nil
}
