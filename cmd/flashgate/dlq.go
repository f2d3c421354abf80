package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
)

const dlqUsage = `usage: flashgate dlq [--config FILE] [--timeout D] COMMAND

commands:
  list                              count, reasons and oldest of the dead-letter queue
  show N                            the first N dead letters, their orders decoded
  requeue [--reason R] [--max N]    moves dead letters back to the orders exchange

The dead-letter queue is amqp.queue + ".dead". A reason is the consumer's
own (an order of a batch that it could not write, x-flashgate-reason) or
the broker's (rejected: a message the consumer found malformed;
delivery_limit: it came back more than amqp.delivery_limit times).
list and show read the messages and put them back. requeue moves those
whose reason contains R (all without --reason), at most N (default 1000):
each is published with a publisher confirm, then removed from the
dead-letter queue, so an interrupted requeue loses nothing and at worst
moves a message twice, which the consumer's write makes harmless. Fix the
cause first, or the messages come back. --timeout bounds the whole command
(default 1m). Exit status: 0 done, 1 failed or interrupted (requeue says
how far it got; run it again), 2 on bad usage.`

// dlqTimeout is the default bound of one dlq command.
const dlqTimeout = time.Minute

// dlqListScan bounds the messages list reads for its reasons.
const dlqListScan = 10000

// runDLQ is `flashgate dlq list|show|requeue`: the dead-letter queue read
// and moved back, on a connection of its own.
func runDLQ(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("flashgate dlq", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", os.Getenv("FLASHGATE_CONFIG"), "YAML settings file (FLASHGATE_CONFIG)")
	timeout := fs.Duration("timeout", dlqTimeout, "bound of the whole command")
	reason := fs.String("reason", "", "requeue: only dead letters whose reason contains this")
	limit := fs.Int("max", 1000, "requeue: at most this many messages")
	if err := parseInterspersed(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = fmt.Fprintln(stdout, dlqUsage)
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return fmt.Errorf("%w: dlq needs a command: list, show N or requeue", errUsage)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	if *limit < 1 {
		return fmt.Errorf("%w: --max must be at least 1", errUsage)
	}
	cmd, operands := rest[0], rest[1:]
	n := 0
	switch cmd {
	case "list", "requeue":
		if len(operands) > 0 {
			return fmt.Errorf("%w: dlq %s: unexpected argument %q", errUsage, cmd, operands[0])
		}
	case "show":
		if len(operands) != 1 {
			return fmt.Errorf("%w: dlq show needs N, the number of messages", errUsage)
		}
		v, err := strconv.Atoi(operands[0])
		if err != nil || v < 1 || v > broker.MaxScan {
			return fmt.Errorf("%w: dlq show: N must be a whole number from 1 to %d", errUsage, broker.MaxScan)
		}
		n = v
	default:
		return fmt.Errorf("%w: unknown command dlq %q", errUsage, cmd)
	}
	if *reason != "" && cmd != "requeue" {
		return fmt.Errorf("%w: --reason is a flag of requeue", errUsage)
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	name := broker.InstanceName("dlq") + " dlq " + cmd
	switch cmd {
	case "list":
		return dlqList(ctx, cfg.AMQP, name, stdout)
	case "show":
		return dlqShow(ctx, cfg.AMQP, name, n, stdout)
	}
	return dlqRequeue(ctx, cfg.AMQP, name, *reason, *limit, stdout)
}

// parseInterspersed parses fs from args with flags before, between or
// after the operands, and leaves the operands in fs.Args.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		operands = append(operands, args[0])
		args = args[1:]
	}
	return fs.Parse(append([]string{"--"}, operands...))
}

func dlqList(ctx context.Context, c config.AMQP, name string, w io.Writer) error {
	dead, ready, err := broker.Browse(ctx, c, name, dlqListScan)
	if err != nil {
		return dlqError(err)
	}
	q := broker.DeadLetter(c.Queue)
	orders := 0
	count := map[string]int{}
	var oldest time.Time
	for _, d := range dead {
		orders += countOrders(d.Delivery.Body)
		count[d.Reason]++
		if !d.At.IsZero() && (oldest.IsZero() || d.At.Before(oldest)) {
			oldest = d.At
		}
	}
	fmt.Fprintf(w, "queue %s: %s\n", q, messages(ready))
	if ready == 0 {
		return nil
	}
	if len(dead) < ready {
		fmt.Fprintf(w, "read %d of them (%d orders)\n", len(dead), orders)
	} else {
		fmt.Fprintf(w, "orders: %d\n", orders)
	}
	if !oldest.IsZero() {
		fmt.Fprintf(w, "oldest: %s (%s ago)\n", oldest.UTC().Format(time.RFC3339), time.Since(oldest).Round(time.Second))
	}
	reasons := make([]string, 0, len(count))
	for r := range count {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if count[reasons[i]] != count[reasons[j]] {
			return count[reasons[i]] > count[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintln(w, "reasons:")
	for _, r := range reasons {
		fmt.Fprintf(w, "  %6d  %s\n", count[r], r)
	}
	return nil
}

func dlqShow(ctx context.Context, c config.AMQP, name string, n int, w io.Writer) error {
	dead, ready, err := broker.Browse(ctx, c, name, n)
	if err != nil {
		return dlqError(err)
	}
	fmt.Fprintf(w, "queue %s: %s, showing %d\n", broker.DeadLetter(c.Queue), messages(ready), len(dead))
	for i, d := range dead {
		at := "unknown"
		if !d.At.IsZero() {
			at = d.At.UTC().Format(time.RFC3339)
		}
		from := ""
		if id, ok := d.Delivery.Headers["x-flashgate-message-id"].(string); ok {
			// An order dead-lettered alone: its batch's message and place.
			from = fmt.Sprintf("  (index %v of message %q)", d.Delivery.Headers["x-flashgate-index"], id)
		}
		fmt.Fprintf(w, "#%d  message_id %q  type %q  dead-lettered %s%s\n    reason: %s\n", i+1, d.Delivery.MessageId, d.Delivery.Type, at, from, d.Reason)
		parts, err := order.Split(d.Delivery.Body)
		if err != nil {
			fmt.Fprintf(w, "    unreadable (%v): %s\n", err, clipBody(d.Delivery.Body))
			continue
		}
		for _, p := range parts {
			o, err := order.Unmarshal(p)
			if err != nil {
				fmt.Fprintf(w, "    unreadable order (%v): %s\n", err, clipBody(p))
				continue
			}
			fmt.Fprintf(w, "    order %s  sale %s  user %s  quantity %d  state %s  reserved_at %s\n",
				o.OrderID, o.SaleID, o.UserID, o.Quantity, o.State, o.ReservedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

func dlqRequeue(ctx context.Context, c config.AMQP, name, reason string, limit int, w io.Writer) error {
	res, err := broker.Requeue(ctx, c, name, broker.RequeueOptions{Reason: reason, Max: limit})
	what := "moved back to exchange " + c.Exchange
	if reason != "" {
		what += " (reason containing " + strconv.Quote(reason) + ")"
	}
	fmt.Fprintf(w, "requeue: %s %s, %d read, %d left in %s\n", messages(res.Moved), what, res.Scanned, res.Left, broker.DeadLetter(c.Queue))
	if err != nil {
		return fmt.Errorf("requeue stopped after %d messages (nothing lost; run it again): %w", res.Moved, dlqError(err))
	}
	return nil
}

// dlqError says a timeout as one.
func dlqError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out (--timeout): %w", err)
	}
	return err
}

// countOrders is the number of orders a message body carries, 1 for one
// that is not readable.
func countOrders(body []byte) int {
	parts, err := order.Split(body)
	if err != nil {
		return 1
	}
	return len(parts)
}

// clipBody quotes at most 200 bytes of b.
func clipBody(b []byte) string {
	if len(b) > 200 {
		return strconv.Quote(string(b[:200])) + "…"
	}
	return strconv.Quote(string(b))
}

// messages is "1 message", "N messages".
func messages(n int) string {
	if n == 1 {
		return "1 message"
	}
	return strconv.Itoa(n) + " messages"
}
