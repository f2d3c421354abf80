package main

// The waiting room (API.md "Waiting room", DESIGN.md "The waiting room"):
// what a crowd that waits costs, against what the gateway's other paths
// cost, in one run, as ratios of medians of -room-runs rounds. Each round
// measures, in this order, with the same client (bench's crowd loads and
// load generator) and the same connections:
//
//   - the bare fasthttp handler answering a waiting buyer's queue view to
//     the same polls (the ceiling of a poll);
//   - the reserve path: accepted buys on a big sale without a waiting
//     room (a gateway of its own, as measureGateway runs it);
//   - on a gateway of its own, a sale with a fifo room admitting one buyer
//     a second: the joins of distinct buyers for -duration, then the polls
//     of buyers placed behind roomAhead others (so that everyone stays
//     waiting), each connection with a ticket of its own;
//   - with buyer authentication on (HS256): the sold-out path, then the
//     same joins and polls, every request with its buyer's token.
//
// Then, once, the fairness of both modes, from `flashgate bench
// --waiting-room`'s checks on a gateway of its own: fifo's inversions
// between joins that did not overlap, and random's rank correlation of the
// pre-queue's places with the join order.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
)

const (
	// roomAhead is how many buyers the pollers are placed behind: at one
	// admitted a second, none of them is admitted while the suite runs.
	roomAhead = 1000
	// The targets: polls of waiting buyers against the bare handler,
	// joins against the reserve path's accepted buys; with buyer
	// authentication on, the same two against the authenticated sold-out
	// path.
	targetPolls = 0.8
	targetJoins = 0.5
)

// Names of the waiting room's rows.
const (
	rowRoomBare     = "bare fasthttp handler, queue view (ceiling of a poll)"
	rowRoomReserve  = "gateway, reserve path (accepted buys, no waiting room)"
	rowRoomPolls    = "gateway, polls of waiting buyers"
	rowRoomJoins    = "gateway, joins of distinct buyers"
	rowRoomSoldAuth = "gateway, sold-out sale, buyer authentication on (HS256), room rounds"
	rowRoomPollAuth = "gateway, polls of waiting buyers, buyer authentication on (HS256)"
	rowRoomJoinAuth = "gateway, joins of distinct buyers, buyer authentication on (HS256)"
)

// roomFig is one figure of one round.
type roomFig struct {
	v        float64
	p50, p99 time.Duration
}

// measureRoom is the waiting-room part: -room-runs rounds, the fairness
// runs, then the rows of the main table and the section.
func (s *suite) measureRoom(ctx context.Context) error {
	if s.o.roomRuns < 1 || s.o.roomUsers < 100 {
		return errors.New("-room-runs must be at least 1 and -room-users at least 100")
	}
	var key [24]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	secret := hex.EncodeToString(key[:])
	auth := []string{"FLASHGATE_BUYER_JWT_SECRET=" + secret}
	figs := map[string][]roomFig{}
	for round := range s.o.roomRuns {
		add := func(name string, f roomFig) {
			figs[name] = append(figs[name], f)
			fmt.Fprintf(os.Stderr, "waiting room, round %d: %-70s %10.0f/s p50 %v p99 %v\n", round+1, name, f.v, f.p50, f.p99)
		}
		bare, err := s.measureBarePolls(ctx)
		if err != nil {
			return fmt.Errorf("round %d, bare polls: %w", round+1, err)
		}
		add(rowRoomBare, bare)
		rep, err := s.measureGateway(ctx, "room-reserve", nil, activeSale)
		if err != nil {
			return fmt.Errorf("round %d, reserve path: %w", round+1, err)
		}
		add(rowRoomReserve, roomFig{rep.Throughput, rep.All.P50, rep.All.P99})
		joins, polls, err := s.measureRoomCrowd(ctx, "room", nil, "")
		if err != nil {
			return fmt.Errorf("round %d: %w", round+1, err)
		}
		add(rowRoomJoins, joins)
		add(rowRoomPolls, polls)
		so := soldOutSale
		so.JWTSecret = secret
		rep, err = s.measureGateway(ctx, "room-auth-sold-out", auth, so)
		if err != nil {
			return fmt.Errorf("round %d, sold-out path with authentication: %w", round+1, err)
		}
		if so := outcomeCount(rep, "sold_out"); so != rep.Requests {
			return fmt.Errorf("round %d, sold-out path with authentication: %d of %d answers sold_out", round+1, so, rep.Requests)
		}
		add(rowRoomSoldAuth, roomFig{rep.Throughput, rep.All.P50, rep.All.P99})
		joins, polls, err = s.measureRoomCrowd(ctx, "room-auth", auth, secret)
		if err != nil {
			return fmt.Errorf("round %d, with authentication: %w", round+1, err)
		}
		add(rowRoomJoinAuth, joins)
		add(rowRoomPollAuth, polls)
	}
	add := func(name string, baseline *row, target float64) *row {
		m := medianFig(figs[name])
		return s.add(row{group: "waiting room", name: name, value: m.v, unit: "req/s", p50: m.p50, p99: m.p99, baseline: baseline, target: target})
	}
	bare := add(rowRoomBare, nil, 0)
	add(rowRoomPolls, bare, targetPolls)
	reserve := add(rowRoomReserve, nil, 0)
	add(rowRoomJoins, reserve, targetJoins)
	soldAuth := add(rowRoomSoldAuth, nil, 0)
	add(rowRoomPollAuth, soldAuth, targetPolls)
	add(rowRoomJoinAuth, soldAuth, targetJoins)

	fifo, random, err := s.measureRoomFairness(ctx)
	if err != nil {
		return fmt.Errorf("fairness: %w", err)
	}
	s.sections.room = roomSection(figs, fifo, random, s.o.roomRuns, s.o.conns, s.o.dur)
	fmt.Fprint(os.Stderr, "\n"+s.sections.room)
	return nil
}

// medianFig is the round whose figure is the median (the lower middle of
// an even count), latencies and all.
func medianFig(fs []roomFig) roomFig {
	if len(fs) == 0 {
		return roomFig{}
	}
	sorted := slices.Clone(fs)
	slices.SortFunc(sorted, func(a, b roomFig) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	return sorted[(len(sorted)-1)/2]
}

// measureBarePolls is the ceiling of a poll: the bare handler answering
// a queue view, polled as measureRoomCrowd polls a gateway.
func (s *suite) measureBarePolls(ctx context.Context) (roomFig, error) {
	p, url, err := s.startBare(ctx, "waiting", cpuServer, "bare-waiting")
	if err != nil {
		return roomFig{}, err
	}
	defer p.Stop()
	tickets, users := make([]string, s.o.conns), make([]string, s.o.conns)
	for i := range tickets {
		// A ticket of a gateway's length; the bare handler reads none.
		tickets[i], users[i] = strings.Repeat("A", 96), "p"+strconv.Itoa(i)
	}
	r, err := bench.CrowdPoll(ctx, bench.CrowdOptions{URL: url, Sale: "bench", Conns: s.o.conns, Duration: s.o.dur}, tickets, users)
	if err != nil {
		return roomFig{}, err
	}
	if err := r.Only("waiting"); err != nil {
		return roomFig{}, err
	}
	return roomFig{r.PerSecond, r.P50, r.P99}, nil
}

// measureRoomCrowd measures the joins and then the polls of one fifo
// sale admitting one buyer a second, on a gateway of its own started with
// env (with secret: every request carries its buyer's token).
func (s *suite) measureRoomCrowd(ctx context.Context, name string, env []string, secret string) (joins, polls roomFig, err error) {
	g, stop, err := s.startGateway(ctx, name, env)
	if err != nil {
		return joins, polls, err
	}
	defer stop()
	c, err := adminapi.New(g.admin, "")
	if err != nil {
		return joins, polls, err
	}
	var b [6]byte
	rand.Read(b[:])
	sale := "room-" + hex.EncodeToString(b[:])
	stock, one, pass, fifo := int64(1_000_000_000), int64(1), int64(adminapi.MaxPassSeconds), adminapi.RoomFIFO
	v, err := c.Create(ctx, sale, adminapi.SaleUpdate{Stock: &stock, WaitingRoom: &fifo, AdmitPerSecond: &one, PassSeconds: &pass})
	if err != nil {
		return joins, polls, fmt.Errorf("create sale %s: %w", sale, err)
	}
	if v.WaitingRoom != fifo || v.AdmitPerSecond != one {
		return joins, polls, fmt.Errorf("create sale %s: waiting room %q at %d/s in the answer (a gateway without waiting rooms?)", sale, v.WaitingRoom, v.AdmitPerSecond)
	}
	keep := roomAhead + s.o.conns
	o := bench.CrowdOptions{URL: g.public, Sale: sale, Conns: s.o.conns, Duration: s.o.dur, Prefix: "j", Keep: keep, JWTSecret: secret}
	j, err := bench.CrowdJoin(ctx, o)
	if err != nil {
		return joins, polls, err
	}
	// A view for every join: waiting, or admitted for the first few
	// places (one a second).
	if n := j.Statuses["waiting"] + j.Statuses["admitted"]; n != j.Requests || j.Statuses["admitted"] > 100 {
		return joins, polls, fmt.Errorf("joins: %d requests, answers %v (want queue views, nearly all waiting)", j.Requests, j.Statuses)
	}
	if j.Requests < int64(keep) {
		return joins, polls, fmt.Errorf("joins: %d in %v, fewer than the %d the polls need", j.Requests, s.o.dur, keep)
	}
	tickets, users := j.Tickets[roomAhead:keep], make([]string, s.o.conns)
	for i := range users {
		users[i] = "j" + strconv.Itoa(roomAhead+i)
		if tickets[i] == "" {
			return joins, polls, fmt.Errorf("joins: no ticket for buyer %s", users[i])
		}
	}
	p, err := bench.CrowdPoll(ctx, o, tickets, users)
	if err != nil {
		return joins, polls, err
	}
	if err := p.Only("waiting"); err != nil {
		return joins, polls, fmt.Errorf("polls: %w", err)
	}
	return roomFig{j.PerSecond, j.P50, j.P99}, roomFig{p.PerSecond, p.P50, p.P99}, nil
}

// measureRoomFairness runs `flashgate bench --waiting-room` once in each
// mode on a gateway of its own and returns their reports: a unit for each
// buyer and a fifth of them admitted a second, so that every buyer is let
// in (and so sees its place, which a random room's pre-queue sees only
// from the start on) before the sale sells out.
func (s *suite) measureRoomFairness(ctx context.Context) (fifo, random *bench.Report, err error) {
	g, stop, err := s.startGateway(ctx, "room-fairness", nil)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	users := s.o.roomUsers
	for _, m := range []struct {
		mode string
		in   time.Duration
		dst  **bench.Report
	}{{adminapi.RoomFIFO, 0, &fifo}, {adminapi.RoomRandom, 3 * time.Second, &random}} {
		rep, err := bench.Run(ctx, bench.Options{URL: g.public, AdminURL: g.admin, NoMySQL: true, NoKeys: true,
			WaitingRoom: m.mode, AdmitPerSecond: int64(users / 5), PassSeconds: 120, RoomStartIn: m.in,
			Stock: int64(users), Users: users, Conns: s.o.conns, UntilSoldOut: true, MaxDuration: 2 * time.Minute})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.mode, err)
		}
		if rep.Room == nil {
			return nil, nil, fmt.Errorf("%s: no waiting-room figures", m.mode)
		}
		fmt.Fprintf(os.Stderr, "waiting room, fairness %s: %d joined, %d inversions, checks: %v\n", m.mode, rep.Room.Joined, rep.Room.Inversions, rep.Err())
		*m.dst = rep
	}
	return fifo, random, nil
}

// roomSection is the report's section: each round's figures, and the
// fairness runs.
func roomSection(figs map[string][]roomFig, fifo, random *bench.Report, runs, conns int, dur time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Waiting room\n\n"+
		"%d round(s), each measuring in this order, %d keep-alive connections, %v closed loop each: the bare handler answering a queue view; "+
		"the reserve path (accepted buys on a sale without a waiting room); on a fifo sale admitting one buyer a second, the joins of distinct "+
		"buyers, then the polls of buyers placed behind %d others (each connection polling with a ticket of its own, every answer `waiting`); "+
		"then with buyer authentication on (HS256, every request with its buyer's token; a poller's token is the same at each poll, as a "+
		"buyer's would be) the sold-out path, the joins and the polls. The main table gives the median round.\n\n",
		runs, conns, dur, roomAhead)
	b.WriteString("| measurement | req/s, each round | median |\n| --- | --- | ---: |\n")
	for _, name := range []string{rowRoomBare, rowRoomPolls, rowRoomReserve, rowRoomJoins, rowRoomSoldAuth, rowRoomPollAuth, rowRoomJoinAuth} {
		vs := make([]float64, len(figs[name]))
		for i, f := range figs[name] {
			vs[i] = f.v
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f |\n", name, joinFloats(vs, "%.0f"), medianFig(figs[name]).v)
	}
	ratio := func(num, den string) float64 {
		d := medianFig(figs[den]).v
		if d == 0 {
			return 0
		}
		return medianFig(figs[num]).v / d
	}
	fmt.Fprintf(&b, "\n| ratio of medians | value | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&b, "| polls ÷ bare handler | %.2f× | ≥ %.1f× (%s) |\n", ratio(rowRoomPolls, rowRoomBare), targetPolls, verdict(ratio(rowRoomPolls, rowRoomBare) >= targetPolls))
	fmt.Fprintf(&b, "| joins ÷ reserve path | %.2f× | ≥ %.1f× (%s) |\n", ratio(rowRoomJoins, rowRoomReserve), targetJoins, verdict(ratio(rowRoomJoins, rowRoomReserve) >= targetJoins))
	fmt.Fprintf(&b, "| polls with authentication ÷ sold-out path with authentication | %.2f× | ≥ %.1f× (%s) |\n", ratio(rowRoomPollAuth, rowRoomSoldAuth), targetPolls, verdict(ratio(rowRoomPollAuth, rowRoomSoldAuth) >= targetPolls))
	fmt.Fprintf(&b, "| joins with authentication ÷ sold-out path with authentication | %.2f× | ≥ %.1f× (%s) |\n", ratio(rowRoomJoinAuth, rowRoomSoldAuth), targetJoins, verdict(ratio(rowRoomJoinAuth, rowRoomSoldAuth) >= targetJoins))

	fmt.Fprintf(&b, "\n### Fairness\n\n`flashgate bench --waiting-room` once in each mode: %d buyers, a unit for each, admitting %d a second "+
		"(so that every buyer is admitted and sees its place), %d connections; random's sale starts 3 s after its creation and a tenth of "+
		"the buyers join after the start.\n\n", fifo.Users, fifo.Room.AdmitPerSecond, conns)
	b.WriteString("| mode | buyers placed | joins/s | polls/s | figure | target | checks |\n| --- | ---: | ---: | ---: | --- | --- | --- |\n")
	checks := func(r *bench.Report) string {
		if err := r.Err(); err != nil {
			return "FAIL: " + strings.TrimPrefix(err.Error(), bench.ErrFailed.Error()+": ")
		}
		return "all passed"
	}
	f := fifo.Room
	fmt.Fprintf(&b, "| fifo | %d | %.0f | %.0f | %d inversions between joins that did not overlap | 0 (%s) | %s |\n",
		f.Joined, f.JoinsPerSecond, f.PollsPerSecond, f.Inversions, verdict(f.Inversions == 0), checks(fifo))
	r := random.Room
	rho := "n/a (too few pre-start joins placed)"
	if r.Spearman != nil {
		rho = fmt.Sprintf("Spearman ρ %.4f (z %.2f) over %d pre-start joins", *r.Spearman, *r.SpearmanZ, r.PreStart)
	}
	fmt.Fprintf(&b, "| random | %d | %.0f | %.0f | %s; %d late joins, %d placed ahead of the pre-queue | ρ near 0 (reported) | %s |\n",
		r.Joined, r.JoinsPerSecond, r.PollsPerSecond, rho, r.Late, r.LateAhead, checks(random))
	return b.String()
}
