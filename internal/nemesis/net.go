package nemesis

// The network between the run's processes and its servers: a toxiproxy
// server run as a library in the test's process, with one proxy for each
// process and server, so that a fault may cut one gateway from Redis and
// leave the others be.

import (
	"context"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/flashgate/flashgate/internal/localstack"
)

// Net is the run's proxies. Its methods are safe for concurrent use.
type Net struct {
	srv *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // by name: process/server
	order   []string
}

// NewNet makes an empty network; Close stops every proxy it made.
func NewNet() *Net {
	return &Net{
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

// Proxy starts a proxy named name (process/server: "gateway-1/redis") on a
// free loopback port, in front of upstream (host:port), and returns its
// address. The port is localstack.FreeAddrs's, not the kernel's pick: a
// proxy disabled and enabled again listens on it once more, and a port
// from the ephemeral range may meanwhile go to any connection.
func (n *Net) Proxy(name, upstream string) (string, error) {
	addrs, err := localstack.FreeAddrs(1)
	if err != nil {
		return "", fmt.Errorf("proxy %s: %w", name, err)
	}
	p := toxiproxy.NewProxy(n.srv, name, addrs[0], upstream)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("proxy %s: %w", name, err)
	}
	n.mu.Lock()
	n.proxies[name] = p
	n.order = append(n.order, name)
	n.mu.Unlock()
	return p.Listen, nil
}

// Names returns the proxies' names, in the order they were made.
func (n *Net) Names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.order...)
}

func (n *Net) get(name string) (*toxiproxy.Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.proxies[name]
	if !ok {
		return nil, fmt.Errorf("no proxy %s", name)
	}
	return p, nil
}

// Toxic is one toxiproxy toxic: its type, the direction it acts on
// ("downstream": towards the process, "upstream": towards the server) and
// its attributes, as toxiproxy's API names them.
type Toxic struct {
	Type       string
	Stream     string
	Attributes map[string]int
}

func (t Toxic) String() string {
	var attrs []string
	for k, v := range t.Attributes {
		attrs = append(attrs, fmt.Sprintf("%s=%d", k, v))
	}
	return fmt.Sprintf("%s/%s{%s}", t.Type, t.Stream, strings.Join(attrs, ","))
}

// AddToxic puts t on the proxy named proxy, under the name toxic.
func (n *Net) AddToxic(proxy, toxic string, t Toxic) error {
	p, err := n.get(proxy)
	if err != nil {
		return err
	}
	var attrs []string
	for k, v := range t.Attributes {
		attrs = append(attrs, fmt.Sprintf("%q:%d", k, v))
	}
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`,
		toxic, t.Type, t.Stream, strings.Join(attrs, ","))
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("toxic %s on %s: %w", toxic, proxy, err)
	}
	return nil
}

// RemoveToxic takes the toxic named toxic off the proxy named proxy.
func (n *Net) RemoveToxic(ctx context.Context, proxy, toxic string) error {
	p, err := n.get(proxy)
	if err != nil {
		return err
	}
	return p.Toxics.RemoveToxic(ctx, toxic)
}

// Disable stops the proxy named name: its connections are closed and new
// ones refused, as when a link is down.
func (n *Net) Disable(name string) error {
	p, err := n.get(name)
	if err != nil {
		return err
	}
	p.Stop()
	return nil
}

// Enable starts the proxy named name again, on the same port.
func (n *Net) Enable(name string) error {
	p, err := n.get(name)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil && err != toxiproxy.ErrProxyAlreadyStarted {
		return fmt.Errorf("proxy %s: %w", name, err)
	}
	return nil
}

// Close stops every proxy, toxics and all, and waits for their
// connections to end.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range n.order {
		p := n.proxies[name]
		p.Toxics.ResetToxics(context.Background())
		p.Stop()
	}
}
