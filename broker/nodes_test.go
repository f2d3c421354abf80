package broker

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestRingRotation: a round tries the nodes in turn from the start and the
// next round starts at the node that worked, or after the node that failed
// last (its dial, or its session's connection).
func TestRingRotation(t *testing.T) {
	r := &ring{nodes: []string{"amqp://u:pw@a/", "amqp://u:pw@b/", "amqp://u:pw@c/"}}
	for _, step := range []struct {
		name  string
		lost  int // before the round: the session on this node lost its connection; -1: none
		down  string
		tried string
		got   int // -1: the round fails
	}{
		{"a down: a, then b", -1, "a", "ab", 1},
		{"from b, which worked: a is not tried again", -1, "a", "b", 1},
		{"b's session lost its connection: from c", 1, "", "c", 2},
		{"every node down: from c, round to b", -1, "abc", "cab", -1},
		{"after a failed round: from after b, the last to fail", -1, "ab", "c", 2},
		{"c down: round to a", -1, "c", "ca", 0},
		{"a session on a that ended with its connection open: from a", -1, "", "a", 0},
	} {
		if step.lost >= 0 {
			r.failed(step.lost)
		}
		tried := ""
		got, err := r.round(context.Background(), func(node string) error {
			name := node[len("amqp://u:pw@") : len(node)-1]
			tried += name
			if strings.Contains(step.down, name) {
				return errors.New(name + " is down")
			}
			return nil
		})
		if tried != step.tried || got != step.got || (err != nil) != (step.got < 0) {
			t.Fatalf("%s: tried %q, got node %d (%v); want tried %q, node %d", step.name, tried, got, err, step.tried, step.got)
		}
	}
}

var errDown = errors.New("down")

// TestRoundError: the error of a failed round names each node tried, its
// password masked, with its error; with one node it is that node's error
// as it is (as before lists); a round stops when ctx ends.
func TestRoundError(t *testing.T) {
	fail := func(string) error { return errDown }

	one := &ring{nodes: []string{"amqp://u:one-s3cret@a/"}}
	if _, err := one.round(context.Background(), fail); err != errDown {
		t.Errorf("one node: %v, want its error as it is", err)
	}

	three := &ring{nodes: []string{"amqp://u:a-s3cret@a:5672/", "amqp://u:b-s3cret@b:5672/vh", "amqp://c:5672/"}}
	_, err := three.round(context.Background(), fail)
	if err == nil {
		t.Fatal("a round of dead nodes succeeded")
	}
	msg := err.Error()
	for _, w := range []string{"3 of 3 tried", "amqp://u:xxx@a:5672/: down", "amqp://u:xxx@b:5672/vh: down", "amqp://c:5672/: down"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error %q shows a password", msg)
	}
	if !errors.Is(err, errDown) {
		t.Errorf("errors.Is(%v, errDown) = false", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var tried []string
	_, err = three.round(ctx, func(node string) error {
		tried = append(tried, node)
		cancel()
		return ctx.Err()
	})
	if len(tried) != 1 || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "1 of 3 tried") {
		t.Errorf("ctx ended during the round: tried %q, error %v; want 1 node tried", tried, err)
	}
	if !reflect.DeepEqual(three.nodes, []string{"amqp://u:a-s3cret@a:5672/", "amqp://u:b-s3cret@b:5672/vh", "amqp://c:5672/"}) {
		t.Errorf("the ring's nodes changed: %q", three.nodes)
	}
}
