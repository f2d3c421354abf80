package main

// The sale page (API.md "Buyers in a browser"): a crowd refreshing
// GET /s/{sale} against the bare fasthttp handler answering as many bytes
// of HTML, in -room-runs rounds (bare, then gateway), as ratios of
// medians. The page is served from memory: the target is the buy path's.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
)

// targetPage is the page's rate ÷ the bare handler's.
const targetPage = 0.8

// measurePage is the sale page's part.
func (s *suite) measurePage(ctx context.Context) error {
	if s.o.roomRuns < 1 {
		return fmt.Errorf("-room-runs must be at least 1")
	}
	g, stop, err := s.startGateway(ctx, "page", nil)
	if err != nil {
		return err
	}
	defer stop()
	c, err := adminapi.New(g.admin, "")
	if err != nil {
		return err
	}
	stock := int64(1_000)
	if _, err := c.Create(ctx, "page", adminapi.SaleUpdate{Stock: &stock}); err != nil {
		return fmt.Errorf("create sale: %w", err)
	}
	size, headers, err := pageAnswer(ctx, g.public+"/s/page")
	if err != nil {
		return err
	}
	var bare, page []roomFig
	for round := range s.o.roomRuns {
		p, url, err := s.startBare(ctx, "page", cpuServer, "bare-page", append([]string{"-size", strconv.Itoa(size)}, headers...)...)
		if err != nil {
			return err
		}
		r, err := bench.CrowdPage(ctx, bench.CrowdOptions{URL: url, Sale: "page", Conns: s.o.conns, Duration: s.o.dur})
		p.Stop()
		if err != nil {
			return err
		}
		if err := r.Only("200"); err != nil {
			return fmt.Errorf("bare page: %w", err)
		}
		bare = append(bare, roomFig{r.PerSecond, r.P50, r.P99})
		r, err = bench.CrowdPage(ctx, bench.CrowdOptions{URL: g.public, Sale: "page", Conns: s.o.conns, Duration: s.o.dur})
		if err != nil {
			return err
		}
		if err := r.Only("200"); err != nil {
			return fmt.Errorf("gateway page: %w", err)
		}
		page = append(page, roomFig{r.PerSecond, r.P50, r.P99})
		fmt.Fprintf(os.Stderr, "sale page, round %d: bare %.0f/s, gateway %.0f/s (%d bytes)\n", round+1, bare[round].v, page[round].v, size)
	}
	b, pg := medianFig(bare), medianFig(page)
	base := s.add(row{group: "sale page", name: fmt.Sprintf("bare fasthttp handler, %d bytes of HTML (ceiling of the page)", size),
		value: b.v, unit: "req/s", p50: b.p50, p99: b.p99})
	s.add(row{group: "sale page", name: "gateway, GET /s/{sale} (the built-in page, " + strconv.Itoa(size) + " bytes)",
		value: pg.v, unit: "req/s", p50: pg.p50, p99: pg.p99, baseline: base, target: targetPage})
	return nil
}

// pageAnswer reads the page at url: its size, and its headers as the
// bare handler's -header flags (those fasthttp sets itself aside), so that
// the ceiling answers the same bytes.
func pageAnswer(ctx context.Context, url string) (int, []string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil || res.StatusCode != 200 {
		return 0, nil, fmt.Errorf("GET %s: %d %v", url, res.StatusCode, err)
	}
	var flags []string
	for name, vs := range res.Header {
		switch name {
		case "Date", "Content-Length", "Content-Type", "Server":
			continue
		}
		for _, v := range vs {
			flags = append(flags, "-header", name+": "+v)
		}
	}
	return len(body), flags, nil
}
