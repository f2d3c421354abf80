package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	adminapi "github.com/flashgate/flashgate/admin"
)

// RoomFigures are the figures of a run with a waiting room (API.md,
// "Waiting room"; DESIGN.md invariant 11): the crowd's traffic, and what
// the buyers saw of their places and their admission, which the checks
// of VerifyRoom compare. Durations are nanoseconds in JSON.
type RoomFigures struct {
	Mode           string        `json:"mode"`
	AdmitPerSecond int64         `json:"admit_per_second"`
	PassSeconds    int64         `json:"pass_seconds"`
	StartsAfter    time.Duration `json:"starts_after_ns"` // the sale's start after the load's; ≤ 0: open from the start
	Buyers         int           `json:"buyers"`

	JoinRequests   int64         `json:"join_requests"`
	JoinTried      int64         `json:"join_tried"`    // buyers whose join was sent
	Joined         int64         `json:"joined"`        // buyers whose join was answered with a queue view
	JoinFailures   int64         `json:"join_failures"` // joins answered otherwise (429, 503, …) or not at all
	JoinsPerSecond float64       `json:"joins_per_s"`   // the crowd's (not the late joiners'): placed ÷ (last placed − first join sent)
	JoinP50        time.Duration `json:"join_p50_ns"`
	JoinP99        time.Duration `json:"join_p99_ns"`
	Polls          int64         `json:"polls"`
	PollFailures   int64         `json:"poll_failures"`
	PollsPerSecond float64       `json:"polls_per_s"` // over the whole load
	PollP50        time.Duration `json:"poll_p50_ns"`
	PollP99        time.Duration `json:"poll_p99_ns"`
	PollRefused    int64         `json:"polls_refused"` // polls answered not_admitted, with the gateway's own ticket

	Admitted          int64 `json:"admitted"`             // buyers seen admitted
	Buys              int64 `json:"buys"`                 // buy requests
	NotAdmitted       int64 `json:"not_admitted"`         // buys answered not_admitted
	NotAdmittedInPass int64 `json:"not_admitted_in_pass"` // of them, answered before the buyer's pass_until
	Moved             int64 `json:"positions_moved"`      // buyers whose position changed once given
	Shared            int64 `json:"positions_shared"`     // positions given to more than one buyer
	OutOfTurn         int64 `json:"admitted_out_of_turn"` // see AdmittedOutOfTurn

	// fifo: pairs of joins that did not overlap, placed the other way round.
	Inversions int64 `json:"inversions"`
	// random: joins answered before the start (with the place they were
	// given at the start) and joins sent after it; late joiners placed
	// ahead of a pre-start joiner, late joiners out of join order, and
	// Spearman's correlation of the pre-start joiners' join order and
	// places (nil: fewer than two), with its z = ρ·√(n−1).
	PreStart       int64    `json:"pre_start_joins"`
	Late           int64    `json:"late_joins"`
	LateAhead      int64    `json:"late_ahead"`
	LateInversions int64    `json:"late_inversions"`
	Spearman       *float64 `json:"spearman,omitempty"`
	SpearmanZ      *float64 `json:"spearman_z,omitempty"`

	Stock         int64 `json:"stock"`
	AcceptedUnits int64 `json:"accepted_units"`

	// From the admin view after the load.
	ViewErr      string `json:"view_error,omitempty"`
	ViewJoined   int64  `json:"view_joined"`
	ViewAdmitted int64  `json:"view_admitted"`
}

// minSpearman is the fewest pre-start joiners whose correlation is
// checked; spearmanZ the largest |z| taken for chance: under a uniform
// order z is about standard normal, and |z| > 5 comes once in 1.7 million
// runs.
const (
	minSpearman = 30
	spearmanZ   = 5
)

// figures computes the room's figures once the load has stopped: the
// workers are gone, so the buyers' records are still.
func (r *roomLoad) figures(elapsed time.Duration, workers []*roomWorker) RoomFigures {
	rf := RoomFigures{Mode: r.o.WaitingRoom, AdmitPerSecond: r.o.AdmitPerSecond, PassSeconds: r.o.PassSeconds,
		StartsAfter: time.Duration(r.startAt), Buyers: len(r.buyers), Stock: r.o.Stock,
		JoinRequests: r.joins.Load(), JoinFailures: r.joinFails.Load(), Polls: r.polls.Load(), PollFailures: r.pollFails.Load(),
		PollRefused: r.pollRefused.Load(), Admitted: r.admitted.Load(),
		NotAdmitted: r.notAdmittedInPass.Load() + r.notAdmittedLate.Load(), NotAdmittedInPass: r.notAdmittedInPass.Load()}
	var jh, ph Histogram
	for _, w := range workers {
		jh.Merge(&w.joinHist)
		ph.Merge(&w.pollHist)
	}
	rf.JoinP50, rf.JoinP99, rf.PollP50, rf.PollP99 = jh.Quantile(0.5), jh.Quantile(0.99), ph.Quantile(0.5), ph.Quantile(0.99)
	if s := elapsed.Seconds(); s > 0 {
		rf.PollsPerSecond = float64(rf.Polls) / s
	}

	var joins, pre, late []Join
	var sightings []Sighting
	seen := map[int64]int{}
	for _, b := range r.buyers {
		if b.joinSent > 0 {
			rf.JoinTried++
		}
		if b.outcome >= 0 {
			rf.Buys++
		}
		if b.moved {
			rf.Moved++
		}
		if b.joinAnswered == 0 {
			continue
		}
		rf.Joined++
		j := Join{Sent: b.joinSent, Answered: b.joinAnswered, Position: b.position}
		joins = append(joins, j)
		if b.position > 0 {
			seen[b.position]++
			sightings = append(sightings, Sighting{Position: b.position, LastWaiting: b.lastWaiting, AdmittedAfter: b.admittedAt})
		}
		if r.startAt > 0 {
			switch {
			case j.Answered < r.startAt:
				pre = append(pre, j)
			case j.Sent > r.startAt:
				late = append(late, j)
			}
		}
	}
	for _, n := range seen {
		if n > 1 {
			rf.Shared += int64(n)
		}
	}
	if first, last := r.firstJoin.Load(), r.lastJoin.Load(); last > first {
		rf.JoinsPerSecond = float64(r.crowdJoined.Load()) / time.Duration(last-first).Seconds()
	}
	rf.OutOfTurn = AdmittedOutOfTurn(sightings)
	if rf.Mode == adminapi.RoomFIFO {
		rf.Inversions = Inversions(joins)
		return rf
	}
	rf.Late, rf.LateInversions = int64(len(late)), Inversions(late)
	var xs, ys []float64
	var front int64
	for _, j := range pre {
		if j.Position > 0 {
			xs, ys = append(xs, float64(j.Sent)), append(ys, float64(j.Position))
			front = max(front, j.Position)
		}
	}
	rf.PreStart = int64(len(xs))
	for _, j := range late {
		if j.Position > 0 && j.Position <= front {
			rf.LateAhead++
		}
	}
	if rho := Spearman(xs, ys); !math.IsNaN(rho) {
		z := rho * math.Sqrt(float64(len(xs)-1))
		rf.Spearman, rf.SpearmanZ = &rho, &z
	}
	return rf
}

// VerifyRoom returns the checks of a run with a waiting room, in a fixed
// order. It is a pure function of rf, so that each verdict can be tested
// on made-up figures.
func VerifyRoom(rf RoomFigures) []Check {
	var out []Check
	add := func(name string, ok bool, detail string, args ...any) {
		r := Fail
		if ok {
			r = Pass
		}
		out = append(out, Check{Name: name, Result: r, Detail: fmt.Sprintf(detail, args...)})
	}
	skip := func(name, why string) { out = append(out, Check{Name: name, Result: Skip, Detail: why}) }

	add("202s ≤ stock (waiting room)", rf.AcceptedUnits <= rf.Stock, "%d units accepted, stock %d", rf.AcceptedUnits, rf.Stock)
	add("no not_admitted within an admitted buyer's pass", rf.NotAdmittedInPass == 0,
		"%d of %d buys refused before their pass_until (%d refused after it)", rf.NotAdmittedInPass, rf.Buys, rf.NotAdmitted-rf.NotAdmittedInPass)
	add("every poll's ticket accepted", rf.PollRefused == 0, "%d polls answered not_admitted", rf.PollRefused)
	add("admission in position order", rf.OutOfTurn == 0, "%d buyers seen waiting after one behind them was seen admitted", rf.OutOfTurn)
	add("a position never changes once given", rf.Moved == 0, "%d buyers saw theirs change", rf.Moved)
	add("no position given twice", rf.Shared == 0, "%d buyers share a position", rf.Shared)
	switch rf.Mode {
	case adminapi.RoomFIFO:
		add("fifo: joins that did not overlap placed in join order", rf.Inversions == 0,
			"%d inversions among %d joins", rf.Inversions, rf.Joined)
	case adminapi.RoomRandom:
		const behind, order, uniform = "random: late joiners behind the pre-queue", "random: late joiners in join order",
			"random: pre-queue places unrelated to join order"
		if rf.Late == 0 || rf.PreStart == 0 {
			skip(behind, fmt.Sprintf("%d late joins, %d pre-start joins with a place", rf.Late, rf.PreStart))
		} else {
			add(behind, rf.LateAhead == 0, "%d of %d late joiners placed ahead of a pre-start joiner", rf.LateAhead, rf.Late)
		}
		add(order, rf.LateInversions == 0, "%d inversions among %d late joins", rf.LateInversions, rf.Late)
		if rf.SpearmanZ == nil || rf.PreStart < minSpearman {
			skip(uniform, fmt.Sprintf("%d pre-start joins with a place; at least %d wanted", rf.PreStart, minSpearman))
		} else {
			add(uniform, math.Abs(*rf.SpearmanZ) <= spearmanZ, "Spearman ρ %.4f over %d joins, z = ρ·√(n−1) = %.2f (|z| ≤ %d)",
				*rf.Spearman, rf.PreStart, *rf.SpearmanZ, spearmanZ)
		}
	}
	if rf.ViewErr != "" {
		out = append(out, Check{"admin view: joined and admitted", Fail, "admin view: " + rf.ViewErr})
	} else {
		add("admin view: joined and admitted", rf.ViewJoined >= rf.Joined && rf.ViewJoined <= rf.JoinTried && rf.ViewAdmitted >= rf.Admitted,
			"joined %d (buyers answered a place %d, sent a join %d), admitted %d (seen admitted %d)",
			rf.ViewJoined, rf.Joined, rf.JoinTried, rf.ViewAdmitted, rf.Admitted)
	}
	return out
}

// writeText writes the room's part of the text report.
func (rf *RoomFigures) writeText(b *strings.Builder) {
	start := "the sale open from the start"
	if rf.StartsAfter > 0 {
		start = "the sale starting after " + round(rf.StartsAfter)
	}
	fmt.Fprintf(b, "waiting room %s: %d buyers, %d admitted a second, %ds passes, %s\n", rf.Mode, rf.Buyers, rf.AdmitPerSecond, rf.PassSeconds, start)
	fmt.Fprintf(b, "joins: %d buyers placed (%d requests, %d failed) at %.0f joins/s, p50 %s p99 %s\n",
		rf.Joined, rf.JoinRequests, rf.JoinFailures, rf.JoinsPerSecond, round(rf.JoinP50), round(rf.JoinP99))
	fmt.Fprintf(b, "polls: %d (%d failed, %d refused) at %.0f polls/s, p50 %s p99 %s\n",
		rf.Polls, rf.PollFailures, rf.PollRefused, rf.PollsPerSecond, round(rf.PollP50), round(rf.PollP99))
	fmt.Fprintf(b, "admission: %d buyers seen admitted, %d buys, %d not_admitted (%d within the pass)\n",
		rf.Admitted, rf.Buys, rf.NotAdmitted, rf.NotAdmittedInPass)
	switch rf.Mode {
	case adminapi.RoomFIFO:
		fmt.Fprintf(b, "fairness: %d inversions between joins that did not overlap; %d admitted out of turn\n", rf.Inversions, rf.OutOfTurn)
	case adminapi.RoomRandom:
		rho := "n/a"
		if rf.Spearman != nil {
			rho = fmt.Sprintf("%.4f (z %.2f)", *rf.Spearman, *rf.SpearmanZ)
		}
		fmt.Fprintf(b, "fairness: %d pre-start joins, Spearman ρ of join order and place %s; %d late joins, %d placed ahead, %d out of order; %d admitted out of turn\n",
			rf.PreStart, rho, rf.Late, rf.LateAhead, rf.LateInversions, rf.OutOfTurn)
	}
	if rf.ViewErr == "" {
		fmt.Fprintf(b, "admin view: joined %d, admitted %d\n", rf.ViewJoined, rf.ViewAdmitted)
	}
}
