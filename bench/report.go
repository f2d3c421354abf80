package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Outcome is the count and latency of one answer status (or "error" for no
// answer, "all" for every request). Durations are nanoseconds in JSON.
type Outcome struct {
	Status string        `json:"status"`
	Code   int           `json:"code,omitempty"` // HTTP code
	Count  int64         `json:"count"`
	P50    time.Duration `json:"p50_ns"`
	P90    time.Duration `json:"p90_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

func outcomeOf(status string, code int, h *Histogram) Outcome {
	return Outcome{Status: status, Code: code, Count: int64(h.Count()),
		P50: h.Quantile(0.50), P90: h.Quantile(0.90), P99: h.Quantile(0.99), Max: h.Max()}
}

// Report is the result of one Run. Durations are time.Duration, which is
// nanoseconds in JSON; times "after" are measured from the start of the load.
type Report struct {
	Sale         string  `json:"sale_id"`
	Stock        int64   `json:"stock"`
	Limit        int64   `json:"per_user_limit"`
	Buckets      int64   `json:"buckets"`
	Users        int     `json:"users"`
	Conns        int     `json:"conns"`
	Rate         float64 `json:"rate"` // requests/s of the open loop; 0: closed loop
	DupRatio     float64 `json:"dup_ratio"`
	MySQLChecked bool    `json:"mysql_checked"`

	StoppedBy   string        `json:"stopped_by"` // sold-out, duration, max-duration or interrupt; with a waiting room also ended, every buyer done or no waiting room
	Interrupted bool          `json:"interrupted"`
	Elapsed     time.Duration `json:"elapsed_ns"` // of the load
	Requests    int64         `json:"requests"`
	Throughput  float64       `json:"requests_per_s"`
	Late        int64         `json:"late"`   // open loop: requests sent over 1 ms after their time
	Unsent      int64         `json:"unsent"` // open loop: requests due before the stop that were never sent
	MaxLag      time.Duration `json:"max_lag_ns"`
	FirstError  string        `json:"first_error,omitempty"`
	Outcomes    []Outcome     `json:"outcomes"`
	All         Outcome       `json:"all"`
	Replays     int64         `json:"idempotent_replays"` // 202s that repeated an earlier 202 for the same key

	SoldOutAfter    time.Duration `json:"sold_out_after_ns"`    // the last unit's 202 or the first sold_out, whichever came first; 0: not sold out
	LastAcceptAfter time.Duration `json:"last_accept_after_ns"` // latest 202
	MySQLAfter      time.Duration `json:"mysql_after_ns"`       // every order in MySQL; 0: not seen
	OutboxPending   int64         `json:"outbox_pending"`       // at the end of the load

	// With a payment window (seconds; 0: none): the fraction of the
	// accepted orders paid, and how late the gateway's sweeper expired the
	// others (nil when its metrics could not be read).
	PaymentWindow int64     `json:"payment_window"`
	PayRatio      float64   `json:"pay_ratio"`
	SweepLag      *SweepLag `json:"sweep_lag,omitempty"`

	Timeline *Timeline `json:"timeline,omitempty"` // with Options.Timeline

	// Room holds the waiting room's figures (Options.WaitingRoom); the
	// outcomes above are then the buys'.
	Room *RoomFigures `json:"waiting_room,omitempty"`

	Figures Figures  `json:"figures"`
	Checks  []Check  `json:"checks"`
	Notes   []string `json:"notes,omitempty"`

	unanswered int64
}

// Err returns nil when no check failed, otherwise an error wrapping
// ErrFailed that names the failed checks.
func (r *Report) Err() error {
	if names := failed(r.Checks); names != "" {
		return fmt.Errorf("%w: %s", ErrFailed, names)
	}
	return nil
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for a human.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %.0f req/s", r.Rate)
	}
	buckets := ""
	if r.Buckets > 1 {
		buckets = fmt.Sprintf(", %d buckets", r.Buckets)
	}
	fmt.Fprintf(&b, "sale %s: stock %d%s, limit %d, %d users, %d connections, %s, dup-ratio %.2f\n",
		r.Sale, r.Stock, buckets, r.Limit, r.Users, r.Conns, mode, r.DupRatio)
	what, unit := "requests", "req/s"
	if r.Room != nil {
		what, unit = "buys", "buys/s" // the joins and polls are the room's figures, below
	}
	fmt.Fprintf(&b, "load: %d %s in %s (stopped by %s): %.0f %s\n",
		r.Requests, what, round(r.Elapsed), r.StoppedBy, r.Throughput, unit)
	if r.Rate > 0 {
		fmt.Fprintf(&b, "late: %d requests sent over %v after their time (max lag %s), %d due but never sent; latency counts from the scheduled time\n",
			r.Late, lateAfter, round(r.MaxLag), r.Unsent)
	}
	if r.FirstError != "" {
		fmt.Fprintf(&b, "first error: %s\n", r.FirstError)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "status\tcode\tcount\tp50\tp90\tp99\tmax\t")
	for _, o := range append(append([]Outcome(nil), r.Outcomes...), r.All) {
		code := ""
		if o.Code != 0 {
			code = fmt.Sprint(o.Code)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", o.Status, code, o.Count, round(o.P50), round(o.P90), round(o.P99), round(o.Max))
	}
	tw.Flush()
	b.WriteString("\n")
	if r.Room != nil {
		r.Room.writeText(&b)
		b.WriteString("\n")
	}
	f := r.Figures
	fmt.Fprintf(&b, "accepted: %d orders, %d units (%d idempotent replays)\n", f.AcceptedOrders, f.AcceptedUnits, r.Replays)
	if r.SoldOutAfter > 0 {
		fmt.Fprintf(&b, "sold out after %s (the last unit's 202 or the first sold_out); last 202 after %s\n", round(r.SoldOutAfter), round(r.LastAcceptAfter))
	} else {
		fmt.Fprintf(&b, "not sold out; last 202 after %s\n", round(r.LastAcceptAfter))
	}
	if f.RedisErr == "" {
		fmt.Fprintf(&b, "Redis: stock %d, sold %d, remaining %d, outbox pending %d\n", f.RedisStock, f.RedisSold, f.RedisRemaining, r.OutboxPending)
	}
	switch {
	case !r.MySQLChecked:
		b.WriteString("MySQL: not checked (--no-mysql)\n")
	case f.MySQLErr != "":
		fmt.Fprintf(&b, "MySQL: %s\n", f.MySQLErr)
	case r.MySQLAfter > 0 && f.Payment:
		fmt.Fprintf(&b, "MySQL: %d rows, %d units (%d live); every order in MySQL, read after the payment window, %s after the start\n",
			f.MySQLRows, f.MySQLUnits, f.MySQLLiveUnits, round(r.MySQLAfter))
	case r.MySQLAfter > 0:
		fmt.Fprintf(&b, "MySQL: %d rows, %d units; every order in MySQL after %s\n", f.MySQLRows, f.MySQLUnits, round(r.MySQLAfter))
	default:
		fmt.Fprintf(&b, "MySQL: %d rows, %d units\n", f.MySQLRows, f.MySQLUnits)
	}
	if f.Payment {
		fmt.Fprintf(&b, "payment: window %ds; %d of %d orders paid (%d units), %d pays too late (order_expired), %d pays failed; the rest left to expire\n",
			r.PaymentWindow, f.PaysPaid, f.AcceptedOrders, f.PaidUnits, f.PaysExpired, f.PayErrors)
		if f.RedisErr == "" && f.Waited {
			fmt.Fprintf(&b, "after the window + %v: %d orders pending_payment, sold %d, remaining %d\n", expiryGrace, f.RedisPending, f.RedisSold, f.RedisRemaining)
		}
		if r.SweepLag == nil && f.Waited {
			fmt.Fprintf(&b, "sweep lag: not measured (no %s on the gateway's /metrics)\n", lagMetric)
		}
		if l := r.SweepLag; l != nil {
			le := func(d time.Duration) string {
				if d < 0 {
					return "over the last bucket"
				}
				return "≤ " + round(d)
			}
			fmt.Fprintf(&b, "sweep lag (pay_by to expiry, the gateway at the admin URL): %d orders expired, mean %s, p50 %s, p99 %s, max %s\n",
				l.Expired, round(l.Mean), le(l.P50), le(l.P99), le(l.Max))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	b.WriteString("\nchecks:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Result, c.Name, c.Detail)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

// round shortens a duration for the text report: three significant digits.
func round(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return d.Round(10 * time.Nanosecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}
