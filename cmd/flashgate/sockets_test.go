package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// waitStoppedAndRead waits until p, sent SIGSTOP, is stopped, and every
// byte it wrote on its connections to the servers at addrs has been read
// by them: nothing left unacknowledged on its side (tx_queue of
// /proc/net/tcp) nor unread on the server's (rx_queue). A Redis runs the
// commands it read before it reads the next client's, so a look at Redis
// after this sees everything the frozen process asked of it. It fails the
// test when that is not so within 10 s.
func waitStoppedAndRead(t *testing.T, p *proc, addrs []string) {
	t.Helper()
	servers := map[string]bool{}
	for _, a := range addrs {
		servers[a] = true
	}
	pid := p.cmd.Process.Pid
	var why string
	defer func() {
		if t.Failed() { // WaitFor failed: say what was left
			t.Logf("the last look: %s", why)
		}
	}()
	localstack.WaitFor(t, 10*time.Second, fmt.Sprintf("%s (pid %d) stopped, with what it sent to %v read", p.name, pid, addrs), func() bool {
		why = sentUnread(pid, servers)
		return why == ""
	})
}

// sentUnread says what keeps process pid from being stopped with all it
// sent to servers read, "" when nothing does.
func sentUnread(pid int, servers map[string]bool) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err.Error()
	}
	// pid (comm) state …: comm may hold blanks and parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	if f := strings.Fields(rest); len(f) == 0 || f[0] != "T" {
		return "not stopped yet: " + strings.TrimSpace(rest[:min(len(rest), 3)])
	}
	return unread(pid, servers)
}

// unread says what process pid sent to servers and they have not read
// yet, "" when nothing: bytes unacknowledged on its side of a connection
// to one of them, or unread on the server's.
func unread(pid int, servers map[string]bool) string {
	mine, err := socketInodes(pid)
	if err != nil {
		return err.Error()
	}
	conns, err := tcpConns()
	if err != nil {
		return err.Error()
	}
	byEnds := map[[2]string]tcpConn{}
	for _, c := range conns {
		byEnds[[2]string{c.local, c.remote}] = c
	}
	for _, c := range conns {
		if !mine[c.inode] || c.state != tcpEstablished || !servers[c.remote] {
			continue
		}
		if c.tx > 0 {
			return fmt.Sprintf("%d bytes to %s not acknowledged", c.tx, c.remote)
		}
		if peer, ok := byEnds[[2]string{c.remote, c.local}]; ok && peer.rx > 0 {
			return fmt.Sprintf("%d bytes unread by %s", peer.rx, c.remote)
		}
	}
	return ""
}

// socketInodes are the inodes of the sockets process pid has open.
func socketInodes(pid int) (map[string]bool, error) {
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out, nil
}

// tcpEstablished is TCP_ESTABLISHED as /proc/net/tcp writes it.
const tcpEstablished = "01"

// tcpConn is a line of /proc/net/tcp or tcp6: both ends as host:port,
// the state, the bytes unacknowledged (tx) and unread (rx), the inode.
type tcpConn struct {
	local, remote, state, inode string
	tx, rx                      int64
}

// tcpConns reads the TCP sockets of this network namespace.
func tcpConns() ([]tcpConn, error) {
	var out []tcpConn
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode …
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 {
				continue
			}
			tx, rx, _ := strings.Cut(fl[4], ":")
			c := tcpConn{local: procAddr(fl[1]), remote: procAddr(fl[2]), state: fl[3], inode: fl[9]}
			c.tx, _ = strconv.ParseInt(tx, 16, 64)
			c.rx, _ = strconv.ParseInt(rx, 16, 64)
			out = append(out, c)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// procAddr reads an address of /proc/net/tcp ("0100007F:1F90": the IP in
// 32-bit words of host byte order, little-endian here; the port) as
// host:port, an IPv4-mapped IPv6 address as its IPv4 one.
func procAddr(s string) string {
	h, p, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	port, err2 := strconv.ParseUint(p, 16, 16)
	if err != nil || err2 != nil || len(b)%4 != 0 {
		return s
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	ip := net.IP(b)
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
}

func TestProcAddr(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"IPv4", "0100007F:1F90", "127.0.0.1:8080"},
		{"IPv4-mapped IPv6", "0000000000000000FFFF00000100007F:18EB", "127.0.0.1:6379"},
		{"IPv6 loopback", "00000000000000000000000001000000:0050", "[::1]:80"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := procAddr(tt.in); got != tt.want {
				t.Errorf("procAddr(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// A stopped process whose bytes a server has not read yet is not done;
// once the server read them, it is.
func TestWaitStoppedAndRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	const sent = 1000
	p := &proc{name: "writer", exited: make(chan struct{})}
	p.cmd = exec.Command("bash", "-c", fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%s; head -c %d /dev/zero >&3; exec sleep 60`, port, sent))
	if err := p.cmd.Start(); err != nil {
		t.Skipf("bash: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	defer func() { _ = p.cmd.Process.Kill(); <-p.exited }()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	servers := map[string]bool{ln.Addr().String(): true}
	localstack.WaitFor(t, 10*time.Second, fmt.Sprintf("the writer's %d bytes in the server's socket", sent), func() bool {
		conns, err := tcpConns()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range conns {
			if c.local == conn.LocalAddr().String() && c.remote == conn.RemoteAddr().String() {
				return c.rx == sent
			}
		}
		return false
	})
	if why := sentUnread(p.cmd.Process.Pid, servers); !strings.HasPrefix(why, "not stopped") {
		t.Fatalf("before SIGSTOP: %q, want not stopped", why)
	}
	p.signal(t, syscall.SIGSTOP)
	localstack.WaitFor(t, 10*time.Second, "the writer stopped, its bytes unread", func() bool {
		return strings.HasPrefix(sentUnread(p.cmd.Process.Pid, servers), fmt.Sprintf("%d bytes unread by", sent))
	})
	if _, err := io.ReadFull(conn, make([]byte, sent)); err != nil {
		t.Fatal(err)
	}
	waitStoppedAndRead(t, p, []string{ln.Addr().String()})
}
