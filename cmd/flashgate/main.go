// Command flashgate is the flash-sale gateway, its outbox relay, its MySQL
// consumer and its tools, in one binary. main only parses flags, loads the
// settings and wires the parts; the logic lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"syscall"

	"github.com/VictoriaMetrics/metrics"

	"github.com/flashgate/flashgate/config"
)

// Set by the linker (see the Makefile).
var (
	version = "dev"
	commit  = "unknown"
)

// command is one subcommand. run blocks until the work is done or ctx ends
// (SIGINT/SIGTERM); its error decides the exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands = map[string]command{
	"gateway":   {"the HTTP edge (public and admin listeners) and the outbox relay", runGateway},
	"consumer":  {"the RabbitMQ consumer that writes orders to MySQL", runConsumer},
	"migrate":   {"creates or upgrades the MySQL schema, then exits", runMigrate},
	"reconcile": {"compares a sale in Redis with MySQL (--sale ID); non-zero exit on drift", runReconcile},
	"bench":     {"the flash-sale load generator and invariant checker", runBench},
	"dlq":       {"the dead-letter queue: list, show N, requeue [--reason R] back to the orders exchange", runDLQ},
	"admin":     {"talks to the admin API (sale create/show/restock/lock/unlock, scripts list/reload)", runAdmin},
	"room":      {"the waiting room's lottery: verify --sale ID --seed S --prequeue N [--join J] recomputes places", runRoom},
	"version":   {"prints version, commit and Go version", runVersion},
}

// errUsage marks a bad command line or a bad setting: exit code 2.
var errUsage = errors.New("usage")

func main() {
	metrics.ExposeMetadata(true) // # TYPE lines, as Prometheus conventions expect
	setGC(os.Getenv)
	os.Exit(run(os.Args[1:]))
}

// gcPercent is the garbage collector's target when GOGC is not set: the
// heap may grow to five times what is live before a collection (Go's
// default is twice). flashgate's live heaps are a few MB, so this costs
// tens of MB, and it cut the consumer's CPU per order by a quarter
// (make bench's cost sale: 6.8 → 5.1 µs), the gateway's by a few percent.
// GOGC set (GOGC=100 is Go's default) wins; GOMEMLIMIT bounds the heap
// either way.
const gcPercent = 400

// setGC applies gcPercent unless the environment (getenv) sets GOGC. It
// returns the percent it set, 0 when it left the runtime's.
func setGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(gcPercent)
	return gcPercent
}

func run(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(os.Stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "flashgate: unknown command %q\n", args[0])
		usage(os.Stderr)
		return 2
	}
	// The first signal cancels ctx and starts the graceful path; a second one
	// kills the process the ordinary way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := cmd.run(ctx, args[1:], os.Stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, config.ErrInvalid):
		fmt.Fprintln(os.Stderr, "flashgate "+args[0]+": "+err.Error())
		return 2
	case errors.Is(err, errDrift):
		fmt.Fprintln(os.Stderr, "flashgate "+args[0]+": "+err.Error())
		return 3
	default:
		fmt.Fprintln(os.Stderr, "flashgate "+args[0]+": "+err.Error())
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: flashgate COMMAND [--config FILE] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
