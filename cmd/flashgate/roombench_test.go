package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/bench"
)

// TestBenchWaitingRoom runs `flashgate bench --waiting-room` as an
// operator would, against a gateway and a consumer of a stack of its own:
// the crowd joins, polls and buys once admitted, every check passes (the
// fairness ones, and the 202s against Redis and MySQL), and the JSON
// report carries the room's figures. Once with buyer authentication on:
// joins, polls and buys then carry each buyer's token.
func TestBenchWaitingRoom(t *testing.T) {
	const secret = "room-bench-test-secret-0123456789abcdef"
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"fifo", nil, []string{"--waiting-room", "fifo"}},
		{"random", nil, []string{"--waiting-room", "random", "--room-start-in", "2s"}},
		{"fifo with buyer authentication", []string{"FLASHGATE_BUYER_JWT_SECRET=" + secret}, []string{"--waiting-room", "fifo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, tc.env...)
			g := s.startGateway(nil)
			s.startConsumers(1)
			args := append([]string{"bench", "--json", "--url", "http://" + g.public, "--admin-url", "http://" + g.admin,
				"--admit-per-second", "300", "--pass-seconds", "30", "--stock", "100", "--users", "300", "--conns", "16",
				"--max-duration", "40s", "--drain-timeout", "60s"}, tc.args...)
			out, code := s.command(args...)
			// The report is the JSON document on stdout; anything logged
			// on stderr comes before or after it.
			i, j := strings.Index(out, "{\n"), strings.LastIndex(out, "\n}")
			var rep bench.Report
			if i < 0 || j < i || json.Unmarshal([]byte(out[i:j+2]), &rep) != nil {
				t.Fatalf("flashgate bench: exit %d, no JSON report:\n%s", code, out)
			}
			if code != 0 || rep.Err() != nil {
				t.Errorf("flashgate bench: exit %d, %v\n%s", code, rep.Err(), out)
			}
			rf := rep.Room
			if rf == nil {
				t.Fatalf("no waiting_room in the report:\n%s", out)
			}
			if rep.Figures.AcceptedUnits != 100 || rep.Figures.MySQLUnits != 100 || !rep.MySQLChecked {
				t.Errorf("accepted %d units, MySQL %d (checked %v); want 100 in both", rep.Figures.AcceptedUnits, rep.Figures.MySQLUnits, rep.MySQLChecked)
			}
			if rf.Joined < 100 || rf.Admitted < 100 || rf.NotAdmittedInPass != 0 || rf.Inversions != 0 || rf.OutOfTurn != 0 {
				t.Errorf("joined %d, admitted %d, not_admitted in a pass %d, inversions %d, out of turn %d",
					rf.Joined, rf.Admitted, rf.NotAdmittedInPass, rf.Inversions, rf.OutOfTurn)
			}
			if rf.Mode == "random" && (rf.Late == 0 || rf.PreStart == 0 || rf.Spearman == nil) {
				t.Errorf("random: %d late joins, %d pre-start joins placed, Spearman %v", rf.Late, rf.PreStart, rf.Spearman)
			}
		})
	}
}
