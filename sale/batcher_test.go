package sale

import (
	"github.com/VictoriaMetrics/metrics"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBatcherDispatch is the batcher's rule of which batches leave, on its
// state alone (no Redis: the rule is the gateway's own). The buckets of a
// sale share its parallel calls, so that their batches grow as a sale of
// one bucket's do; a bucket with a full batch sends it besides.
func TestBatcherDispatch(t *testing.T) {
	now := time.Now()
	// A spec is one queue: its id, its calls out, and its waiting calls
	// by name; a name ending in '!' has waited past its deadline. Calls are
	// given deadlines in the order named across all queues of a row, so the
	// first named has waited longest.
	type spec struct {
		id    string
		out   int
		calls string
	}
	rows := []struct {
		name              string
		maxSize, parallel int
		queues            []spec
		want              []string // batches that leave, each as its calls joined by ' '
		wantExpired       string
		wantLeft          []string // id=waiting… of the queues kept, in order
	}{
		{name: "an idle sale's buyer leaves at once, alone", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1"}},
			want:   []string{"a1"}, wantLeft: []string{"A="}},
		{name: "while a call of the sale is out, another bucket's buyers wait", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 1, ""}, {"B", 0, "b1 b2"}},
			want:   nil, wantLeft: []string{"A=", "B=b1 b2"}},
		{name: "when the calls are back, the bucket waiting longest goes first, and only it", maxSize: 4, parallel: 1,
			queues: []spec{{"C", 0, "c1 c2"}, {"B", 0, "b1"}},
			want:   []string{"c1 c2"}, wantLeft: []string{"C=", "B=b1"}},
		{name: "the order of the queues does not decide, the wait does", maxSize: 4, parallel: 1,
			queues: []spec{{"B", 0, ""}, {"C", 0, "c1"}, {"D", 0, "d1 d2 d3"}},
			want:   []string{"c1"}, wantLeft: []string{"C=", "D=d1 d2 d3"}},
		{name: "a full batch leaves besides the call out", maxSize: 3, parallel: 1,
			queues: []spec{{"A", 1, ""}, {"B", 0, "b1 b2 b3 b4"}, {"C", 0, "c1 c2"}},
			want:   []string{"b1 b2 b3"}, wantLeft: []string{"A=", "B=b4", "C=c1 c2"}},
		{name: "every bucket with a full batch leaves", maxSize: 2, parallel: 1,
			queues: []spec{{"A", 1, ""}, {"B", 0, "b1 b2"}, {"C", 0, "c1 c2 c3"}},
			want:   []string{"b1 b2", "c1 c2"}, wantLeft: []string{"A=", "B=", "C=c3"}},
		{name: "a full batch waits while its own bucket has its calls out", maxSize: 2, parallel: 1,
			queues: []spec{{"B", 1, "b1 b2 b3"}},
			want:   nil, wantLeft: []string{"B=b1 b2 b3"}},
		{name: "a sale of one bucket: one call out at a time, full or not", maxSize: 2, parallel: 1,
			queues: []spec{{"S", 1, "s1 s2 s3 s4 s5"}},
			want:   nil, wantLeft: []string{"S=s1 s2 s3 s4 s5"}},
		{name: "a batch is at most maxSize", maxSize: 3, parallel: 1,
			queues: []spec{{"S", 0, "s1 s2 s3 s4 s5"}},
			want:   []string{"s1 s2 s3"}, wantLeft: []string{"S=s4 s5"}},
		{name: "parallel 2: two calls, the longest waiting first, even of one bucket", maxSize: 2, parallel: 2,
			queues: []spec{{"A", 0, "a1 a2 a3"}, {"B", 0, "b1"}},
			want:   []string{"a1 a2", "a3"}, wantLeft: []string{"A=", "B=b1"}},
		{name: "reservations past their deadline are answered, never sent", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1! a2! a3"}},
			want:   []string{"a3"}, wantExpired: "a1! a2!", wantLeft: []string{"A="}},
		{name: "a queue of expired ones only gives its turn to the next", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, "a1!"}, {"B", 0, "b1"}},
			want:   []string{"b1"}, wantExpired: "a1!", wantLeft: []string{"B="}},
		{name: "queues with nobody waiting and no call out are dropped", maxSize: 4, parallel: 1,
			queues: []spec{{"A", 0, ""}, {"B", 1, ""}, {"C", 0, ""}},
			want:   nil, wantLeft: []string{"B="}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			b := newBatcher[string, string](nil, Batching{MaxSize: row.maxSize, Calls: row.parallel}, time.Second, metrics.NewSet(), "test", "items")
			sq := &saleQueue[string, string]{}
			names := map[*call[string, string]]string{}
			n := 0
			for _, sp := range row.queues {
				q := &queue[string, string]{id: sp.id, out: sp.out}
				sq.out += sp.out
				for _, name := range strings.Fields(sp.calls) {
					n++
					c := &call[string, string]{deadline: now.Add(time.Duration(n) * time.Millisecond), done: make(chan bool, 1)}
					if strings.HasSuffix(name, "!") {
						c.deadline = now.Add(-time.Duration(100-n) * time.Millisecond)
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
