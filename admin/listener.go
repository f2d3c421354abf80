package admin

import "net"

// ListenerURL turns a listener's address (a setting such as http.addr or
// admin.addr) into the http URL that reaches it from the same machine. A
// listener on every interface (":8081", "0.0.0.0:8081", "[::]:8081") is
// reached on 127.0.0.1: flashgate's listeners are Go's net.Listen("tcp"),
// which on "::" opens a dual-stack socket, or an IPv4 one on a host without
// IPv6, so 127.0.0.1 reaches either, while ::1 fails wherever IPv6 is
// disabled (as in many containers, where `flashgate admin health` is the
// healthcheck). Any other host is kept; an address without a port is used
// as it is.
func ListenerURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
