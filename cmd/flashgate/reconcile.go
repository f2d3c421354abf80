package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/reconcile"
	"github.com/flashgate/flashgate/scripts"
)

// errDrift is returned by reconcile when Redis and MySQL disagree (exit 3).
var errDrift = errors.New("drift")

// reconcilePoll is how often --wait measures again.
const reconcilePoll = 250 * time.Millisecond

// runReconcile is `flashgate reconcile --sale ID [--wait D] [--mark]`: it
// compares the sale in Redis with MySQL, prints every figure and every
// disagreement, and returns errDrift when there is one. With --wait it
// measures again until there is none or D has passed, so that orders still
// on their way are not reported as drift. With --mark it then marks created
// the orders in MySQL whose order view still says queued (a consumer's mark
// lost: reconcile.MarkQueued).
func runReconcile(ctx context.Context, args []string, stdout io.Writer) error {
	var sale string
	var wait time.Duration
	var mark bool
	cfg, err := parseConfig("reconcile", args, func(fs *flag.FlagSet) {
		fs.StringVar(&sale, "sale", "", "the sale to reconcile (required)")
		fs.DurationVar(&wait, "wait", 0, "measure again until no drift or this long has passed (e.g. 30s)")
		fs.BoolVar(&mark, "mark", false, "then mark created the orders in MySQL whose order view says queued")
	})
	if err != nil {
		return err
	}
	if sale == "" {
		return fmt.Errorf("%w: --sale is required", errUsage)
	}
	if wait < 0 {
		return fmt.Errorf("%w: --wait must not be negative", errUsage)
	}
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := newRedis(cfg)
	defer rdb.Close()
	keys := scripts.Keys{Prefix: cfg.Redis.KeyPrefix}

	deadline := time.Now().Add(wait)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := reconcile.Sale(rctx, rdb, keys, db, sale)
		cancel()
		if err != nil {
			return err
		}
		drift := r.Drift()
		if len(drift) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			printReport(stdout, r, drift)
			if mark && r.Queued > 0 {
				mctx, cancel := context.WithTimeout(ctx, time.Minute)
				n, err := reconcile.MarkQueued(mctx, rdb, keys, r)
				cancel()
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "marked %d orders created\n", n)
			}
			if len(drift) > 0 {
				return fmt.Errorf("%w: sale %s: %d disagreement(s)", errDrift, sale, len(drift))
			}
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(reconcilePoll):
		}
	}
}

func printReport(w io.Writer, r *reconcile.Report, drift []string) {
	fmt.Fprintf(w, "sale %s\n", r.Sale)
	fmt.Fprintf(w, "  redis   sold %d  buyers %d  units held %d  accepted orders %d (%d units), live %d (%d units)  outbox %d entries of %d orders (%+d live units)\n",
		r.Sold, r.Buyers, r.UserUnits, r.Accepted, r.AcceptedUnits, r.LiveOrders, r.LiveUnits, r.OutboxEntries, r.OutboxOrders, r.OutboxUnits)
	fmt.Fprintf(w, "  redis   states %s  (counters pending %d paid %d cancelled %d expired %d, due %d)\n",
		states(r.States), r.Counters[order.StatePendingPayment], r.Counters[order.StatePaid],
		r.Counters[order.StateCancelled], r.Counters[order.StateExpired], r.Due)
	if r.Buckets > 1 {
		fmt.Fprintf(w, "  redis   %d buckets  stock %d  handed to the buckets %d = their stock %d + moving %d  pool %d\n",
			r.Buckets, r.Stock, r.Moved, r.LaneStock, r.Moving, r.Stock-r.Moved)
	}
	fmt.Fprintf(w, "  mysql   rows %d (%d units), live %d (%d units)  buyers %d  ledger %d units / %d orders\n",
		r.Rows, r.Units, r.RowsLive, r.UnitsLive, r.Users, r.LedgerUnits, r.LedgerOrders)
	fmt.Fprintf(w, "  mysql   states %s\n", states(r.RowStates))
	fmt.Fprintf(w, "  in transit (sold - mysql live - outbox): %d units\n", r.InTransit())
	fmt.Fprintf(w, "  orders: %d missing, %d unknown to Redis, %d mismatched, %d unreadable in Redis\n",
		r.Missing, r.Unknown, r.Mismatched, r.BadRecords)
	fmt.Fprintf(w, "  states: %d differ, %d in transit (their change is in the outbox)\n", r.StateDiffers, r.StateInTransit)
	fmt.Fprintf(w, "  order view: %d in MySQL read queued (marks on their way, or lost: --mark), %d read created with no row\n",
		r.Queued, r.CreatedNoRow)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "    %s\n", e)
	}
	if len(drift) == 0 {
		fmt.Fprintln(w, "no drift")
		return
	}
	for _, d := range drift {
		fmt.Fprintf(w, "DRIFT: %s\n", d)
	}
}

// states is "confirmed N  pending_payment N  paid N  cancelled N  expired N".
func states(n map[string]int64) string {
	var b strings.Builder
	for i, st := range reconcile.States {
		if i > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s %d", st, n[st])
	}
	return b.String()
}
