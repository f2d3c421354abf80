package main

// The cost part's paired mode (-cost-before): how an engineer shows a
// change's gain on a noisy machine. Two builds of flashgate run the same
// cost sale in turn, before then after, pair after pair; each stage's
// after ÷ before is taken within a pair, whose two runs are a minute
// apart, so that the machine's drift over the whole measurement weighs on
// both halves of each ratio alike.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// costPair is a before run and the after run right after it.
type costPair struct {
	place         placement
	before, after *costRun
}

// measureCostPair runs, in each placement, -cost-runs pairs of sales of
// the -cost-before binary then the -cost-after one (A B A B …), without
// baselines, and writes the section.
func (s *suite) measureCostPair(ctx context.Context, places []placement, notes []string) error {
	before, after, err := s.pairBins()
	if err != nil {
		return err
	}
	started := time.Now()
	var (
		pairs   []costPair
		retried []string
	)
	for _, p := range places {
		got, err := s.costPairs(ctx, p, before, after, &retried)
		if err != nil {
			return err
		}
		pairs = append(pairs, got...)
	}
	s.sections.cost = costPairSection(pairs, costPairSetup{before: before, after: after, costSetup: costSetup{orders: s.o.costOrders,
		consumers: s.o.costConsumers, conns: s.o.conns, notes: append(notes, retried...), took: time.Since(started)}})
	fmt.Fprint(os.Stderr, "\n"+s.sections.cost)
	return nil
}

// pairBins are the binaries of the paired mode, as absolute paths: the
// after one is -cost-after, or the suite's build of this tree.
func (s *suite) pairBins() (before, after string, err error) {
	before, after = s.o.costBefore, s.bin
	if s.o.costAfter != "" {
		after = s.o.costAfter
	}
	for _, p := range []*string{&before, &after} {
		if *p, err = filepath.Abs(*p); err != nil {
			return "", "", err
		}
		fi, err := os.Stat(*p)
		if err != nil {
			return "", "", fmt.Errorf("paired mode: %w", err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("paired mode: %s is not an executable file", *p)
		}
	}
	return before, after, nil
}

// costPairs runs the pairs of one placement, the load placed for them.
func (s *suite) costPairs(ctx context.Context, p placement, before, after string, retried *[]string) ([]costPair, error) {
	back, err := placeLoad(p.load)
	if err != nil {
		return nil, err
	}
	defer back()
	var pairs []costPair
	for i := range s.o.costRuns {
		pr := costPair{place: p, before: &costRun{place: p, bin: before}, after: &costRun{place: p, bin: after}}
		for _, half := range []struct {
			name string
			r    *costRun
		}{{"before", pr.before}, {"after", pr.after}} {
			if err := s.costRetried(ctx, half.r, fmt.Sprintf("%s pair %d, %s", p.name, i+1, half.name), retried, s.costSale); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(os.Stderr, "cost pair %d, %s: all servers %.1f → %.1f µs/order (%.2f×)\n",
			i+1, p.name, pr.before.servers, pr.after.servers, pr.after.servers/max(pr.before.servers, 1e-9))
		pairs = append(pairs, pr)
	}
	return pairs, nil
}

// costPairSetup is what the paired section says of its runs.
type costPairSetup struct {
	costSetup
	before, after string
}

// costPairSection is the paired mode's section: per placement, each
// stage's medians before and after and the pairs' after ÷ before.
func costPairSection(pairs []costPair, c costPairSetup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Cost per order, before and after\n\n"+
		"The cost sale (%d orders, one unit per buyer, %d buyers, %d connections, %d consumer(s), the load stopping at the first sold_out) "+
		"run by two builds of flashgate in turn, before then after, pair after pair, in each placement: before is `%s`, after is `%s`. "+
		"CPU is utime + stime of each process from `/proc/PID/stat`, from just before the first buy to the last order in MySQL, per accepted order. "+
		"Before and after are **medians over the runs, min–max in brackets**; after ÷ before is **taken within each pair** (the after run ÷ "+
		"the before run just ahead of it) and given as the median of the pairs, min–max in brackets. A change shows beyond the noise when the "+
		"whole range of after ÷ before is on one side of 1 in %d pairs or more (every one of N pairs on one side by chance alone: 2 in 2^N, 6%% for %d): "+
		"a gain is less CPU, or more orders/s.\n", c.orders, c.orders*2, c.conns, c.consumers, c.before, c.after, minPairs, minPairs)
	all, gateway, rds, rabbit, cons, maria, client := costStages(c.consumers)
	rate := costStage{"**orders/s**, first 202 → last MySQL row", func(r *costRun) float64 { return r.rate }}
	stages := []costStage{all, gateway, rds, rabbit, cons, maria, client, rate}
	var places []placement
	for _, p := range pairs {
		if len(places) == 0 || places[len(places)-1] != p.place {
			places = append(places, p.place)
		}
	}
	for _, p := range places {
		var bs, as []*costRun
		var ratios []costPair
		for _, pr := range pairs {
			if pr.place == p {
				bs, as, ratios = append(bs, pr.before), append(as, pr.after), append(ratios, pr)
			}
		}
		fmt.Fprintf(&b, "\n### %s, %d pair(s)\n\n%s.\n\n| stage | before | after | after ÷ before | pairs lower after | beyond the noise |\n| --- | ---: | ---: | ---: | ---: | --- |\n",
			upperFirst(p.name), len(ratios), upperFirst(p.what()))
		for _, st := range stages {
			ratio := func(pr costPair) float64 {
				if v := st.v(pr.before); v > 0 {
					return st.v(pr.after) / v
				}
				return 0
			}
			mid, lo, hi := medianOfRuns(ratios, ratio)
			says := pairVerdict(ratios, ratio, st.name == rate.name)
			format := "%.1f"
			if st.name == rate.name {
				format = "%.0f"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d of %d | %s |\n", st.name, summed(bs, st.v, format), summed(as, st.v, format),
				spread(mid, lo, hi, "%.2f×"), lower(ratios, ratio), len(ratios), says)
		}
		b.WriteString("\nEach pair (all servers µs per order, before → after): ")
		for i, pr := range ratios {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%.1f → %.1f", pr.before.servers, pr.after.servers)
		}
		b.WriteString(".\n")
	}
	b.WriteString("\n")
	for _, n := range c.notes {
		fmt.Fprintf(&b, "- %s.\n", upperFirst(n))
	}
	fmt.Fprintf(&b, "- No baselines in this mode: they are the cost part's without -cost-before. This part took %s.\n", c.took.Round(time.Second))
	return b.String()
}

// minPairs is how many pairs must all agree before the section calls a
// change a gain or a loss: the chance that N pairs of a change that does
// nothing all fall on one side is 2 in 2^N, 6% for 5.
const minPairs = 5

// lower counts the pairs whose after ÷ before is below 1.
func lower(pairs []costPair, ratio func(costPair) float64) int {
	n := 0
	for _, p := range pairs {
		if ratio(p) < 1 {
			n++
		}
	}
	return n
}

// pairVerdict says whether every pair shows a gain (less CPU; more when
// higherIsGain, as orders/s), a loss, or neither, with minPairs pairs or
// more.
func pairVerdict(pairs []costPair, ratio func(costPair) float64, higherIsGain bool) string {
	n, k := len(pairs), lower(pairs, ratio)
	higher := 0
	for _, p := range pairs {
		if ratio(p) > 1 {
			higher++
		}
	}
	gain, loss := k == n, higher == n
	if higherIsGain {
		gain, loss = loss, gain
	}
	switch {
	case n < minPairs && (gain || loss):
		return fmt.Sprintf("too few pairs to tell (%d; %d or more)", n, minPairs)
	case gain:
		return "gain"
	case loss:
		return "loss"
	}
	return "within the noise"
}
