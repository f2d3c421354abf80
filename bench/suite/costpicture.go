package main

// The report's picture (pictureName): one more sale of the cost part,
// drawn whole, from the first buy to its last row in MySQL.

import (
	"fmt"
	"time"

	"github.com/flashgate/flashgate/bench"
)

// The picture's sale (costRun.picture): its crowd goes on this long past
// the sell-out, answered sold_out, and its outbox and rows in MySQL are
// read this often.
// It has pictureUsers buyers a unit.
const (
	pictureTail     = 2 * time.Second
	pictureSampling = 200 * time.Millisecond
	pictureUsers    = 5
)

// pictureGaps says what the picture's sale lacks of a whole sale, for the
// report to say so under it: a timeline, a sell-out, sold_out answers
// after it, the outbox drained, the rows in MySQL reaching the stock and
// never going back. None: the picture tells the whole sale.
func pictureGaps(r *bench.Report) []string {
	if r == nil || r.Timeline == nil {
		return []string{"no timeline"}
	}
	tl := r.Timeline
	var gaps []string
	if r.SoldOutAfter <= 0 {
		gaps = append(gaps, "the load never saw the sale sold out")
	}
	var accepted, soldOut, after int64
	for _, s := range tl.Seconds {
		accepted += s.Accepted
		soldOut += s.SoldOut
		if time.Duration(s.At)*time.Second >= r.SoldOutAfter {
			after += s.SoldOut
		}
	}
	if accepted != r.Stock {
		gaps = append(gaps, fmt.Sprintf("the timeline counts %d 202s for a stock of %d", accepted, r.Stock))
	}
	if soldOut == 0 || after == 0 {
		gaps = append(gaps, "no sold_out answer after the sell-out")
	}
	if n := len(tl.Outbox); n == 0 || tl.Outbox[n-1].Value != 0 {
		gaps = append(gaps, "the outbox was not seen drained")
	}
	if n := len(tl.Rows); n == 0 || tl.Rows[n-1].Value != r.Stock {
		gaps = append(gaps, "the rows in MySQL were not seen reaching the stock")
	}
	for i := 1; i < len(tl.Rows); i++ {
		if tl.Rows[i].Value < tl.Rows[i-1].Value {
			gaps = append(gaps, fmt.Sprintf("the rows in MySQL went back from %d to %d", tl.Rows[i-1].Value, tl.Rows[i].Value))
			break
		}
	}
	return gaps
}
