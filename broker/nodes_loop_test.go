package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/retry"
)

// The tests of a list of nodes in amqp.url. The local stack has one
// RabbitMQ node; the others are a closed loopback port (nothing listens:
// refused), or a localstack.Proxy that forwards to the real node (a node
// whose connection can be cut) or to a closed port (a dead node that
// counts the attempts to reach it).

// realNode returns the first node of c.URL that answers: the local
// stack's RabbitMQ, unless FLASHGATE_AMQP_URL says otherwise.
func realNode(t *testing.T, c config.AMQP) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, node := range c.Nodes() {
		if conn, err := broker.Dial(ctx, node, "broker test"); err == nil {
			_ = conn.Close()
			return node
		}
	}
	t.Fatalf("no node of %s answers (run `make up`)", config.MaskURL(c.URL))
	return ""
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	addrs, err := localstack.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// at returns node with its host:port replaced by addr and its password by
// password ("": node's).
func at(t *testing.T, node, addr, password string) string {
	t.Helper()
	u, err := url.Parse(node)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	if password != "" {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	return u.String()
}

// A list whose first node is dead connects to the second, says so in
// Session.Node (masked), and the session works: a publish is confirmed and
// reaches the queue.
func TestOpenListSkipsDeadNode(t *testing.T) {
	c := testAMQP(t)
	real := realNode(t, c)
	c.URL = at(t, real, closedAddr(t), "dead-s3cret") + "," + real
	s := open(t, c)
	if want := config.MaskURL(real); s.Node != want {
		t.Errorf("Session.Node = %q, want %q", s.Node, want)
	}
	if err := s.Channel.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dc, err := s.Channel.PublishWithDeferredConfirmWithContext(ctx, c.Exchange, broker.RoutingKey, true, false,
		amqp.Publishing{Body: []byte("via the second node"), DeliveryMode: amqp.Persistent})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v, %v", ok, err)
	}
	if d := get(t, s.Channel, c.Queue); string(d.Body) != "via the second node" {
		t.Fatalf("queue holds %q", d.Body)
	}
}

// A list of dead nodes fails, with an error that names each, password
// masked; so does QueueDepth's connection.
func TestOpenListAllDead(t *testing.T) {
	c := config.Default().AMQP
	real := realNode(t, c)
	a, b := closedAddr(t), closedAddr(t)
	c.URL = at(t, real, a, "first-s3cret") + "," + at(t, real, b, "second-s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, openErr := broker.Open(ctx, c, "broker test")
	_, depthErr := broker.QueueDepth(ctx, c, "broker test")
	for what, err := range map[string]error{"Open": openErr, "QueueDepth": depthErr} {
		if err == nil {
			t.Fatalf("%s on dead nodes succeeded", what)
		}
		msg := err.Error()
		for _, node := range c.Nodes() {
			if masked := config.MaskURL(node); !strings.Contains(msg, masked+": ") {
				t.Errorf("%s: error %q does not name %s", what, msg, masked)
			}
		}
		if strings.Contains(msg, "s3cret") {
			t.Errorf("%s: error %q shows a password", what, msg)
		}
	}
}

// With a dead first node, the loop reaches the second and starts every
// reconnect there: the dead node is tried once, not at every session. The
// log names each session's node, masked.
func TestLoopStartsAtTheNodeThatWorked(t *testing.T) {
	c := testAMQP(t)
	real := realNode(t, c)
	dead := localstack.NewProxy(t, closedAddr(t))
	c.URL = at(t, real, dead.Addr(), "dead-s3cret") + "," + real
	core, logs := observer.New(zap.InfoLevel)
	l := &broker.Loop{AMQP: c, Name: "loop test", Log: zap.New(core), Lost: "nothing",
		Backoff: retry.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var nodes []string
	runLoop(t, ctx, l, func(ctx context.Context, s *broker.Session) error {
		if nodes = append(nodes, s.Node); len(nodes) < 4 {
			return errors.New("serve gave up") // the connection is still open
		}
		cancel()
		return nil
	})
	want := config.MaskURL(real)
	for i, n := range nodes {
		if n != want {
			t.Errorf("session %d on %q, want %q", i+1, n, want)
		}
	}
	if n := dead.Accepted(); n != 1 {
		t.Errorf("the dead node was tried %d times in 4 sessions, want once", n)
	}
	if l.Failures() != 0 {
		t.Errorf("failures %d, want 0: the round that skipped the dead node connected", l.Failures())
	}
	lines := logs.FilterMessage("connected to RabbitMQ").All()
	lines = append(lines, logs.FilterMessage("reconnected to RabbitMQ").All()...)
	if len(lines) != 4 {
		t.Fatalf("%d connected/reconnected lines, want 4", len(lines))
	}
	for _, e := range lines {
		if got := e.ContextMap()["node"]; got != want {
			t.Errorf("%q logs node %v, want %q", e.Message, got, want)
		}
	}
	if all := logs.All(); strings.Contains(fmtEntries(all), "s3cret") {
		t.Errorf("the log shows a password: %s", fmtEntries(all))
	}
}

// A session whose connection is lost (cut under it) sends the next
// connect to the next node; one that ended with its connection open (serve
// gave up) comes back to the same node.
func TestLoopMovesOnFromALostNode(t *testing.T) {
	c := testAMQP(t)
	real := realNode(t, c)
	u, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := localstack.NewProxy(t, u.Host), localstack.NewProxy(t, u.Host)
	a, b := at(t, real, pa.Addr(), ""), at(t, real, pb.Addr(), "")
	c.URL = a + "," + b
	l := &broker.Loop{AMQP: c, Name: "loop test", Lost: "nothing",
		Backoff: retry.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var nodes []string
	runLoop(t, ctx, l, func(ctx context.Context, s *broker.Session) error {
		switch nodes = append(nodes, s.Node); len(nodes) {
		case 1:
			return errors.New("serve gave up")
		case 2:
			pa.Cut()
			select {
			case <-s.Done():
			case <-time.After(30 * time.Second):
				t.Error("the session did not end when its connection was cut")
			}
			return s.Err()
		}
		cancel()
		return nil
	})
	want := []string{config.MaskURL(a), config.MaskURL(a), config.MaskURL(b)}
	if strings.Join(nodes, " ") != strings.Join(want, " ") {
		t.Errorf("sessions on %q, want %q", nodes, want)
	}
	if pa.Accepted() != 2 || pb.Accepted() != 1 {
		t.Errorf("connections: %d to the first node, %d to the second; want 2, 1", pa.Accepted(), pb.Accepted())
	}
}

// Each attempt tries every node of the list, and counts as one attempt of
// the backoff; the log's warning names each node, masked.
func TestLoopRoundIsOneAttempt(t *testing.T) {
	c := testAMQP(t)
	real := realNode(t, c)
	pa, pb := localstack.NewProxy(t, closedAddr(t)), localstack.NewProxy(t, closedAddr(t))
	c.URL = at(t, real, pa.Addr(), "a-s3cret") + "," + at(t, real, pb.Addr(), "b-s3cret")
	core, logs := observer.New(zap.InfoLevel)
	p := &pauses{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &broker.Loop{AMQP: c, Name: "loop test", Log: zap.New(core),
		Backoff: retry.Backoff{Min: 20 * time.Millisecond, Max: time.Second},
		Pause: func(ctx context.Context, d time.Duration) {
			if p.pause(ctx, d); len(p.all()) == 3 {
				cancel()
			}
		}}
	runLoop(t, ctx, l, func(context.Context, *broker.Session) error {
		t.Error("serve called without a session")
		return nil
	})
	if l.Failures() != 3 || pa.Accepted() != 3 || pb.Accepted() != 3 {
		t.Errorf("failures %d, attempts on the nodes %d and %d; want 3, 3, 3", l.Failures(), pa.Accepted(), pb.Accepted())
	}
	// One backoff step per attempt (equal jitter: each in the upper half).
	for i, step := range []time.Duration{20, 40, 80} {
		if got := p.all()[i]; got < step*time.Millisecond/2 || got > step*time.Millisecond {
			t.Errorf("pause %d: %v, want within [%v, %v]", i, got, step*time.Millisecond/2, step*time.Millisecond)
		}
	}
	warns := logs.FilterMessage("cannot connect to RabbitMQ").All()
	if len(warns) != 3 {
		t.Fatalf("%d cannot-connect lines, want 3", len(warns))
	}
	msg := fmtEntries(warns)
	for _, node := range c.Nodes() {
		if !strings.Contains(msg, config.MaskURL(node)) {
			t.Errorf("the warning does not name %s: %s", config.MaskURL(node), msg)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("the warning shows a password: %s", msg)
	}
}

// fmtEntries renders log entries with their fields, for looking for text.
func fmtEntries(es []observer.LoggedEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintln(&b, e.Message, e.ContextMap())
	}
	return b.String()
}
