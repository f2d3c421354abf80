package bench

import (
	"context"
	"testing"
	"time"
)

// The waiting room against a real gateway (in this process, on the Redis
// of `make up`, as run_test.go's): a crowd joins, polls at the pace the
// gateway asks and buys once admitted, and every check of the run must
// pass, the fairness ones included.

func TestRunWaitingRoomFIFO(t *testing.T) {
	g := startGateway(t)
	rep, err := Run(context.Background(), Options{
		URL: g.public, AdminURL: g.admin, Token: testToken, NoMySQL: true,
		WaitingRoom: "fifo", AdmitPerSecond: 200, PassSeconds: 30,
		Stock: 100, Users: 300, Conns: 16, UntilSoldOut: true, MaxDuration: 30 * time.Second, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	rf, f := rep.Room, rep.Figures
	if rf == nil {
		t.Fatal("no waiting-room figures")
	}
	if f.AcceptedUnits != 100 || f.RedisSold != 100 {
		t.Errorf("accepted %d, Redis sold %d; want 100", f.AcceptedUnits, f.RedisSold)
	}
	if rf.Joined < 100 || rf.Admitted < 100 || rf.Inversions != 0 || rf.NotAdmitted != 0 {
		t.Errorf("joined %d, admitted %d, inversions %d, not_admitted %d; want ≥ 100, ≥ 100, 0, 0",
			rf.Joined, rf.Admitted, rf.Inversions, rf.NotAdmitted)
	}
	if rf.ViewJoined < rf.Joined {
		t.Errorf("admin view joined %d, the run placed %d", rf.ViewJoined, rf.Joined)
	}
}

// TestRunWaitingRoomRandom: the sale starts 2 s after its creation; the
// crowd joins before, a tenth after, and the late tenth must queue behind.
func TestRunWaitingRoomRandom(t *testing.T) {
	g := startGateway(t)
	rep, err := Run(context.Background(), Options{
		URL: g.public, AdminURL: g.admin, Token: testToken, NoMySQL: true,
		WaitingRoom: "random", AdmitPerSecond: 300, PassSeconds: 30, RoomStartIn: 2 * time.Second,
		Stock: 150, Users: 400, Conns: 16, UntilSoldOut: true, MaxDuration: 40 * time.Second, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	rf := rep.Room
	if rf == nil {
		t.Fatal("no waiting-room figures")
	}
	if rep.Figures.AcceptedUnits != 150 {
		t.Errorf("accepted %d units, want 150", rep.Figures.AcceptedUnits)
	}
	if rf.PreStart < minSpearman || rf.Late == 0 || rf.Spearman == nil {
		t.Errorf("%d pre-start joiners placed, %d late, Spearman %v: the run saw too little of the pre-queue", rf.PreStart, rf.Late, rf.Spearman)
	}
}
