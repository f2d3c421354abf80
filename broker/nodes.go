package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/flashgate/flashgate/config"
)

// ring is the nodes of amqp.url in the order a connect tries them, and the
// node the next connect starts at: the one after the node that failed last,
// which after a connect is the node that worked. A dead node (whose dial
// may take the whole handshake timeout) thus costs one connect its
// timeout, not every reconnect. A ring belongs to one goroutine.
type ring struct {
	nodes []string
	start int
}

func newRing(c config.AMQP) *ring { return &ring{nodes: c.Nodes()} }

// round calls try on each node once, in turn from the start, until one
// succeeds, and returns that node's index; the next round starts there.
// When every node fails, or ctx ends before the next is tried, it returns
// an error naming each node tried (password masked) with its error, or,
// with one node only, that node's error as it is.
func (r *ring) round(ctx context.Context, try func(node string) error) (int, error) {
	n, start := len(r.nodes), r.start
	e := &nodesError{of: n}
	for k := range n {
		if k > 0 && ctx.Err() != nil {
			break
		}
		i := (start + k) % n
		err := try(r.nodes[i])
		if err == nil {
			r.start = i
			return i, nil
		}
		r.failed(i)
		if n == 1 {
			return -1, err
		}
		e.nodes = append(e.nodes, config.MaskURL(r.nodes[i]))
		e.errs = append(e.errs, err)
	}
	return -1, e
}

// failed makes the next round start at the node after node i: i's dial
// failed, or its session lost its connection.
func (r *ring) failed(i int) { r.start = (i + 1) % len(r.nodes) }

// nodesError is a round's error when a list of nodes was tried and none
// connected: each node tried, masked, with its error.
type nodesError struct {
	of    int // nodes in the list
	nodes []string
	errs  []error
}

func (e *nodesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "broker: no node connected (%d of %d tried)", len(e.nodes), e.of)
	for i, node := range e.nodes {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + node + ": " + strings.TrimPrefix(e.errs[i].Error(), "broker: "))
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see each node's error.
func (e *nodesError) Unwrap() []error { return e.errs }
