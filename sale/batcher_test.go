package sale

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// TestBatcherDispatch is the batcher's rule of which batches leave, on its
// state alone (no Redis: the rule is the gateway's own). The buckets of a
// sale share its parallel calls, so that their batches grow as a sale of
// one bucket's do; a bucket with a full batch sends it besides.
func TestBatcherDispatch(t *testing.T) {
	now := time.Now()
	// A spec is one queue: its id, its calls out, and its waiting calls
	// by name; a name ending in '!' has waited past its deadline, one
	// ending in '~' past the linger (it was queued an hour ago). Calls are
	// given deadlines in the order named across all queues of a row, so the
	// first named has waited longest. last: how many the queue's last call
	// carried.
	type spec struct {
		id    string
		out   int
		calls string
		last  int
	}
	rows := []struct {
		name              string
		maxSize, parallel int
		linger            time.Duration
		queues            []spec
		want              []string // batches that leave, each as its calls joined by ' '
		wantExpired       string
		wantLeft          []string // id=waiting… of the queues kept, in order
	}{
		{name: "an idle sale's buyer leaves at once, alone", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1", 0}},
			want:   []string{"a1"}, wantLeft: []string{"A="}},
		{name: "while a call of the sale is out, another bucket's buyers wait", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 1, "", 0}, {"B", 0, "b1 b2", 0}},
			want:   nil, wantLeft: []string{"A=", "B=b1 b2"}},
		{name: "when the calls are back, the bucket waiting longest goes first, and only it", maxSize: 4, parallel: 1,
			queues: []spec{{"C", 0, "c1 c2", 0}, {"B", 0, "b1", 0}},
			want:   []string{"c1 c2"}, wantLeft: []string{"C=", "B=b1"}},
		{name: "the order of the queues does not decide, the wait does", maxSize: 4, parallel: 1,
			queues: []spec{{"B", 0, "", 0}, {"C", 0, "c1", 0}, {"D", 0, "d1 d2 d3", 0}},
			want:   []string{"c1"}, wantLeft: []string{"C=", "D=d1 d2 d3"}},
		{name: "a full batch leaves besides the call out", maxSize: 3, parallel: 1,
			queues: []spec{{"A", 1, "", 0}, {"B", 0, "b1 b2 b3 b4", 0}, {"C", 0, "c1 c2", 0}},
			want:   []string{"b1 b2 b3"}, wantLeft: []string{"A=", "B=b4", "C=c1 c2"}},
		{name: "every bucket with a full batch leaves", maxSize: 2, parallel: 1,
			queues: []spec{{"A", 1, "", 0}, {"B", 0, "b1 b2", 0}, {"C", 0, "c1 c2 c3", 0}},
			want:   []string{"b1 b2", "c1 c2"}, wantLeft: []string{"A=", "B=", "C=c3"}},
		{name: "a full batch waits while its own bucket has its calls out", maxSize: 2, parallel: 1,
			queues: []spec{{"B", 1, "b1 b2 b3", 0}},
			want:   nil, wantLeft: []string{"B=b1 b2 b3"}},
		{name: "a sale of one bucket: one call out at a time, full or not", maxSize: 2, parallel: 1,
			queues: []spec{{"S", 1, "s1 s2 s3 s4 s5", 0}},
			want:   nil, wantLeft: []string{"S=s1 s2 s3 s4 s5"}},
		{name: "a batch is at most maxSize", maxSize: 3, parallel: 1,
			queues: []spec{{"S", 0, "s1 s2 s3 s4 s5", 0}},
			want:   []string{"s1 s2 s3"}, wantLeft: []string{"S=s4 s5"}},
		{name: "parallel 2: two calls, the longest waiting first, even of one bucket", maxSize: 2, parallel: 2,
			queues: []spec{{"A", 0, "a1 a2 a3", 0}, {"B", 0, "b1", 0}},
			want:   []string{"a1 a2", "a3"}, wantLeft: []string{"A=", "B=b1"}},
		{name: "reservations past their deadline are answered, never sent", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1! a2! a3", 0}},
			want:   []string{"a3"}, wantExpired: "a1! a2!", wantLeft: []string{"A="}},
		{name: "a queue of expired ones only gives its turn to the next", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1!", 0}, {"B", 0, "b1", 0}},
			want:   []string{"b1"}, wantExpired: "a1!", wantLeft: []string{"B="}},
		{name: "queues with nobody waiting and no call out are dropped", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "", 0}, {"B", 1, "", 0}, {"C", 0, "", 0}},
			want:   nil, wantLeft: []string{"B="}},
		{name: "lingering: a batch smaller than its queue's last call waits for more", maxSize: 8, parallel: 1, linger: time.Hour,
			queues: []spec{{"S", 0, "s1 s2", 3}},
			want:   nil, wantLeft: []string{"S=s1 s2"}},
		{name: "lingering: a batch as large as the last call leaves at once", maxSize: 8, parallel: 1, linger: time.Hour,
			queues: []spec{{"S", 0, "s1 s2 s3", 3}},
			want:   []string{"s1 s2 s3"}, wantLeft: []string{"S="}},
		{name: "lingering: a full batch leaves at once", maxSize: 2, parallel: 1, linger: time.Hour,
			queues: []spec{{"S", 0, "s1 s2 s3", 5}},
			want:   []string{"s1 s2"}, wantLeft: []string{"S=s3"}},
		{name: "lingering: a batch whose first has waited the linger leaves", maxSize: 8, parallel: 1, linger: time.Minute,
			queues: []spec{{"S", 0, "s1~ s2", 5}},
			want:   []string{"s1~ s2"}, wantLeft: []string{"S="}},
		{name: "lingering: a lone request after a call of one leaves at once", maxSize: 8, parallel: 1, linger: time.Hour,
			queues: []spec{{"S", 0, "s1", 1}},
			want:   []string{"s1"}, wantLeft: []string{"S="}},
		{name: "lingering: another bucket that does not linger goes meanwhile", maxSize: 8, parallel: 1, linger: time.Hour,
			queues: []spec{{"A", 0, "a1 a2", 4}, {"B", 0, "b1", 0}},
			want:   []string{"b1"}, wantLeft: []string{"A=a1 a2", "B="}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			b := newBatcher[string, string](nil, Batching{MaxSize: row.maxSize, Calls: row.parallel, Linger: row.linger}, time.Second, metrics.NewSet(), "test", "items")
			sq := &saleQueue[string, string]{}
			names := map[*call[string, string]]string{}
			n := 0
			for _, sp := range row.queues {
				q := &queue[string, string]{id: sp.id, out: sp.out, last: sp.last}
				sq.out += sp.out
				for _, name := range strings.Fields(sp.calls) {
					n++
					c := &call[string, string]{since: now, deadline: now.Add(time.Duration(n) * time.Millisecond), done: make(chan bool, 1)}
					if strings.HasSuffix(name, "!") {
						c.deadline = now.Add(-time.Duration(100-n) * time.Millisecond)
					}
					if strings.HasSuffix(name, "~") {
						c.since = now.Add(-time.Hour)
					}
					names[c] = name
					q.waiting = append(q.waiting, c)
				}
				sq.queues = append(sq.queues, q)
			}
			out0 := sq.out
			leave, expired := b.dispatch(sq, now)

			var got []string
			for _, batch := range leave {
				var ns []string
				for _, c := range batch {
					ns = append(ns, names[c])
				}
				got = append(got, strings.Join(ns, " "))
				if !slices.Equal(batch[0].batch, batch) || batch[0].q == nil || batch[0].q.id != strings.ToUpper(names[batch[0]][:1]) {
					t.Errorf("batch %q: its first call does not carry it and its queue", got[len(got)-1])
				}
			}
			if !slices.Equal(got, row.want) {
				t.Errorf("batches leaving: %q, want %q", got, row.want)
			}
			var exp []string
			for _, c := range expired {
				exp = append(exp, names[c])
			}
			if e := strings.Join(exp, " "); e != row.wantExpired {
				t.Errorf("expired: %q, want %q", e, row.wantExpired)
			}
			var left []string
			outs := 0
			for _, q := range sq.queues {
				var ns []string
				for _, c := range q.waiting {
					ns = append(ns, names[c])
				}
				left = append(left, q.id+"="+strings.Join(ns, " "))
				outs += q.out
			}
			if !slices.Equal(left, row.wantLeft) {
				t.Errorf("queues left: %q, want %q", left, row.wantLeft)
			}
			if sq.out != out0+len(leave) || outs != sq.out {
				t.Errorf("calls out: sale %d, its queues %d, want %d (before) + %d (leaving)", sq.out, outs, out0, len(leave))
			}
		})
	}
}

// TestBatcherLingerWakes runs the batcher with a linger: a lone request
// leaves at once; the requests that came during its call leave together
// when it returns; then a request that came during that call lingers,
// and nothing but its own wake (no call returns, nobody else comes) sends
// it. Without that wake it would wait until its deadline (a minute) and be
// answered ErrUnavailable.
func TestBatcherLingerWakes(t *testing.T) {
	started := make(chan []string)
	release := make(chan struct{})
	do := func(_ context.Context, _ string, in []string, out []string) error {
		started <- slices.Clone(in)
		<-release
		copy(out, in)
		return nil
	}
	b := newBatcher(do, Batching{MaxSize: 8, Calls: 1, Linger: 20 * time.Millisecond}, time.Minute, metrics.NewSet(), "test", "items")
	type answer struct {
		in, out string
		err     error
	}
	answers := make(chan answer, 4)
	join := func(user string) {
		go func() {
			out, err := b.run("s", "s", user)
			answers <- answer{user, out, err}
		}()
	}
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			b.mu.Lock()
			sq := b.sales["s"]
			b.mu.Unlock()
			got := 0
			if sq != nil {
				sq.mu.Lock()
				for _, q := range sq.queues {
					got += len(q.waiting)
				}
				sq.mu.Unlock()
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests queued, want %d", got, n)
			}
		}
	}

	join("a")
	batches := [][]string{<-started}
	join("b")
	join("c")
	queued(2)
	release <- struct{}{} // a's call returns: b and c leave together
	batches = append(batches, <-started)
	join("d")
	queued(1)
	release <- struct{}{} // b and c's call returns: d lingers, then wakes
	batches = append(batches, <-started)
	release <- struct{}{}
	for _, batch := range batches {
		slices.Sort(batch) // b and c come in either order
	}
	want := [][]string{{"a"}, {"b", "c"}, {"d"}}
	if !slices.EqualFunc(batches, want, slices.Equal) {
		t.Errorf("batches %q, want %q", batches, want)
	}
	for range 4 {
		if a := <-answers; a.err != nil || a.out != a.in {
			t.Errorf("request %s: %q, %v", a.in, a.out, a.err)
		}
	}
}
