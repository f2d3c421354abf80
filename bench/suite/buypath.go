package main

// The buy path on one hot sale and the sold-out path, each against the bare
// handler (the ceiling); what buyer authentication costs on both; the tail
// latency at half the peak rate.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/internal/localstack"
)

// Loads of the buy path: a sale that never sells out and one that is sold
// out, neither ever refusing a buyer over the limit.
var (
	activeSale  = bench.Options{Stock: 1_000_000_000, Users: 1_000_000_000}
	soldOutSale = bench.Options{Stock: 0, Users: 1_000_000_000}
)

// measureBuyPath is the buy part: the bare handler, the gateway with
// batching on (the main run) and off, and the sold-out path.
func (s *suite) measureBuyPath(ctx context.Context) error {
	const buy, soldOut = "buy path, one hot sale", "sold-out path"
	bareAcc, err := s.measureBare(ctx, "accepted")
	if err != nil {
		return err
	}
	ceiling := s.add(reqRow(buy, "bare fasthttp handler (ceiling)", bareAcc))
	onRep, err := s.measureGateway(ctx, "active", nil, activeSale)
	if err != nil {
		return err
	}
	s.peak = onRep
	offRep, err := s.measureGateway(ctx, "active", []string{"FLASHGATE_BATCH_MAX_SIZE=1"}, activeSale)
	if err != nil {
		return err
	}
	off := s.add(reqRow(buy, "gateway, batching off", offRep))
	r := reqRow(buy, "gateway, batching on", onRep)
	r.baseline, r.target = off, 2.5
	s.buyRow = s.add(r)
	r = reqRow(buy, "gateway, batching on (vs ceiling)", onRep)
	r.baseline, r.target = ceiling, 0.6
	s.add(r)

	bareSO, err := s.measureBare(ctx, "sold_out")
	if err != nil {
		return err
	}
	ceiling = s.add(reqRow(soldOut, "bare fasthttp handler, 410 (ceiling)", bareSO))
	so, err := s.measureGateway(ctx, "sold-out", nil, soldOutSale)
	if err != nil {
		return err
	}
	r = reqRow(soldOut, "gateway, sold-out sale", so)
	r.baseline, r.target = ceiling, 0.9
	s.soldOutRow = s.add(r)
	return nil
}

// measureAuth measures the buy path and the sold-out path with buyer
// authentication on (HS256, a token per simulated buyer, signed by the load
// generator with the secret the gateway was given), each beside the same
// path with it off: the buy part's rows, or measured here when it did not
// run.
func (s *suite) measureAuth(ctx context.Context) error {
	const group = "buyer authentication"
	if s.buyRow == nil {
		rep, err := s.measureGateway(ctx, "active", nil, activeSale)
		if err != nil {
			return err
		}
		s.buyRow = s.add(reqRow(group, "gateway, batching on", rep))
	}
	if s.soldOutRow == nil {
		rep, err := s.measureGateway(ctx, "sold-out", nil, soldOutSale)
		if err != nil {
			return err
		}
		s.soldOutRow = s.add(reqRow(group, "gateway, sold-out sale", rep))
	}
	var key [24]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	secret := hex.EncodeToString(key[:]) // 48 bytes: above the gateway's minimum of 32
	env := []string{"FLASHGATE_BUYER_JWT_SECRET=" + secret}
	for _, m := range []struct {
		name     string
		baseline *row
		o        bench.Options
		want     string // the status every answer must have
	}{
		{"gateway, batching on, buyer authentication on (HS256)", s.buyRow, activeSale, "accepted"},
		{"gateway, sold-out sale, buyer authentication on (HS256)", s.soldOutRow, soldOutSale, "sold_out"},
	} {
		m.o.JWTSecret = secret
		rep, err := s.measureGateway(ctx, "auth-"+m.want, env, m.o)
		if err != nil {
			return err
		}
		// A token the gateway refused would make this a measurement of
		// 401s: every answer must be the one auth off gets.
		if err := only(rep, m.want); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		r := reqRow(group, m.name, rep)
		r.baseline = m.baseline
		s.add(r)
	}
	s.notes = append(s.notes, "Buyer authentication on: every request carries an HS256 JWT for its own buyer (a fresh buyer each "+
		"request, so no token is ever seen twice), which the gateway verifies before anything else; "+
		"the ratio is the throughput kept against the same path with authentication off. "+
		"`go test -bench 'SoldOutHandlerAuth|BuyerToken' ./gateway/` shows the check alone per algorithm.")
	return nil
}

// measureTail is the tail part: the gateway at half the peak rate of the
// main run (measured here when the buy part did not run), open loop.
func (s *suite) measureTail(ctx context.Context) error {
	peak := s.peak
	if peak == nil {
		var err error
		if peak, err = s.measureGateway(ctx, "active", nil, activeSale); err != nil {
			return err
		}
	}
	o := activeSale
	o.Rate = peak.Throughput / 2
	half, err := s.measureGateway(ctx, "active", nil, o)
	if err != nil {
		return err
	}
	ratio := float64(half.All.P99) / float64(max(half.All.P50, 1))
	s.add(row{group: "tail latency", name: fmt.Sprintf("gateway at half the peak rate (%.0f req/s, open loop): p99/p50", o.Rate),
		value: ratio, unit: "× p50", p50: half.All.P50, p99: half.All.P99})
	s.notes = append(s.notes, fmt.Sprintf("Target p99 ≤ 10 × p50 at half the peak rate: p99/p50 = %.1f (%s).", ratio, verdict(ratio <= 10)))
	return nil
}

// measureBare loads the bare handler answering reply, on the servers' CPU.
func (s *suite) measureBare(ctx context.Context, reply string) (*bench.Report, error) {
	p, url, err := s.startBare(ctx, reply, cpuServer, "bare-"+reply)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	return bench.Run(ctx, bench.Options{URL: url, Raw: true, Conns: s.o.conns, Duration: s.o.dur,
		Users: 1_000_000_000, Stock: 1, NoKeys: true})
}

// startGateway starts a gateway of the suite on the servers' CPU with env,
// its relay finding no broker (the buy path alone: it waits instead of
// forwarding every order at the same time), and returns it and what stops
// it and removes its keys.
func (s *suite) startGateway(ctx context.Context, name string, env []string) (*gateway, func(), error) {
	prefix := newPrefix("bench")
	p, err := s.launch(ctx, proc{log: "gateway-" + name, args: []string{"gateway"}, cpu: cpuServer, prefix: prefix,
		env: append(env, "FLASHGATE_AMQP_URL="+s.svc.noBroker)})
	if err != nil {
		s.dropPrefix(prefix)
		return nil, nil, err
	}
	return newGateway(p), func() { p.Stop(); s.dropPrefix(prefix) }, nil
}

// gateway is a launched gateway's base URLs.
type gateway struct{ public, admin string }

func newGateway(p *localstack.Process) *gateway {
	return &gateway{public: "http://" + p.Public, admin: "http://" + p.Admin}
}

// measureGateway loads a gateway of its own (startGateway) with o: the
// same requests as the bare server gets (no idempotency keys, no duplicate
// clicks), for -duration on -conns connections; its checks must pass.
func (s *suite) measureGateway(ctx context.Context, name string, env []string, o bench.Options) (*bench.Report, error) {
	g, stop, err := s.startGateway(ctx, name, env)
	if err != nil {
		return nil, err
	}
	defer stop()
	o.URL, o.AdminURL, o.NoMySQL, o.Conns, o.Duration, o.NoKeys = g.public, g.admin, true, s.o.conns, s.o.dur, true
	rep, err := bench.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	if rep.Err() != nil {
		return nil, fmt.Errorf("%s: invariant check failed: %w", name, rep.Err())
	}
	return rep, nil
}

// only returns an error when any answer of rep is not status.
func only(rep *bench.Report, status string) error {
	for _, oc := range rep.Outcomes {
		if oc.Status != status && oc.Count > 0 {
			return fmt.Errorf("%d answers %s (want only %s)", oc.Count, oc.Status, status)
		}
	}
	return nil
}

// outcomeCount is the answers of rep with status.
func outcomeCount(rep *bench.Report, status string) int64 {
	for _, o := range rep.Outcomes {
		if o.Status == status {
			return o.Count
		}
	}
	return 0
}
