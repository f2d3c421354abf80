package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestCrowd joins a crowd to a stand-in room and polls it: the counts add
// up, each connection polls with its own buyer's ticket, and a ticket the
// room never gave is refused.
func TestCrowd(t *testing.T) {
	f := &fakeRoom{mode: "fifo", rate: 1, pass: 30 * time.Second}
	base := startFakeRoom(t, f)
	f.mu.Lock()
	f.created, f.stock, f.start = true, 10, time.Now()
	f.mu.Unlock()
	ctx := context.Background()
	o := CrowdOptions{URL: base, Sale: "s", Conns: 4, Duration: 5 * time.Second, Prefix: "c", Users: 300, Keep: 20}
	j, err := CrowdJoin(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if j.Statuses["waiting"]+j.Statuses["admitted"] != 300 {
		t.Errorf("joins: %v, want 300 waiting or admitted", j.Statuses)
	}
	f.mu.Lock()
	placed := len(f.place)
	f.mu.Unlock()
	if j.Requests != 300 || placed != 300 {
		t.Errorf("%d joins sent, the room placed %d; want 300", j.Requests, placed)
	}
	for i, tk := range j.Tickets {
		if tk != fmt.Sprintf("t-c%d", i) {
			t.Errorf("ticket %d: %q", i, tk)
		}
	}
	o.Duration = 300 * time.Millisecond
	users := []string{"c10", "c11", "c12", "c13"}
	p, err := CrowdPoll(ctx, o, j.Tickets[10:14], users)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Only("waiting"); err != nil || p.PerSecond <= 0 {
		t.Errorf("polls: %v, %v, %.0f/s", err, p.Statuses, p.PerSecond)
	}
	p, err = CrowdPoll(ctx, o, []string{"t-x1", "t-x2", "t-x3", "t-x4"}, users)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Only("not_admitted"); err != nil {
		t.Errorf("polls with foreign tickets: %v", err)
	}
	if _, err := CrowdPoll(ctx, o, j.Tickets[:3], users); !errors.Is(err, ErrOptions) {
		t.Errorf("3 tickets for 4 connections: %v, want ErrOptions", err)
	}
	if _, err := CrowdJoin(ctx, CrowdOptions{URL: "http://10.1.2.3:80", Sale: "s"}); !errors.Is(err, ErrOptions) {
		t.Errorf("a remote target: %v, want ErrOptions", err)
	}
}
