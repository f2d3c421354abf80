package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/bench"
	"github.com/flashgate/flashgate/config"
)

const benchUsage = `usage: flashgate bench [flags]

Runs a flash sale against a running stack: creates a sale, sends buy
requests from --conns connections, stops when it is sold out (or after
--duration, never later than --max-duration), waits for the orders to reach
MySQL, and checks that the 202s, Redis and MySQL agree. With
--waiting-room, the buyers queue first and the run also checks that the
room admitted them fairly. Exit code 1 when a
check fails, 2 for a bad flag. Targets must be on this machine unless
--allow-remote is given.

flags:
`

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("flashgate bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		o        bench.Options
		cfgPath  = fs.String("config", os.Getenv("FLASHGATE_CONFIG"), "YAML settings file whose addresses, token and DSN are the defaults (FLASHGATE_CONFIG)")
		asJSON   = fs.Bool("json", false, "print the report as JSON")
		svgPath  = fs.String("svg", "", "also draw the run over time into this SVG file: buys and latency per second, outbox backlog and rows in MySQL")
		progress = fs.Bool("progress", isTerminal(os.Stderr), "a status line on stderr once a second (default: when stderr is a terminal)")
	)
	fs.StringVar(&o.URL, "url", "", "gateway public base URL (default http:// + FLASHGATE_HTTP_ADDR)")
	fs.StringVar(&o.AdminURL, "admin-url", "", "admin listener base URL (default http:// + FLASHGATE_ADMIN_ADDR)")
	fs.StringVar(&o.Token, "token", "", "admin bearer token (default FLASHGATE_ADMIN_TOKEN)")
	fs.StringVar(&o.JWTSecret, "jwt-secret", "", "the gateway's HS256 buyer secret: every buy then carries a token for its buyer signed with it "+
		"(default FLASHGATE_BUYER_JWT_SECRET, which keeps it out of ps; a gateway with FLASHGATE_BUYER_JWT_KEY_FILE cannot be driven, the bench holds no private key)")
	fs.StringVar(&o.MySQLDSN, "mysql-dsn", "", "order database (default FLASHGATE_MYSQL_DSN, else the built-in default)")
	fs.BoolVar(&o.NoMySQL, "no-mysql", false, "skip the MySQL wait and checks (gateway-only runs)")
	fs.StringVar(&o.Sale, "sale", "", "id of the sale to create; it must not exist (default bench-<random>)")
	fs.Int64Var(&o.Stock, "stock", 1000, "units on offer")
	fs.Int64Var(&o.Limit, "limit", 1, "per-user limit")
	fs.Int64Var(&o.Buckets, "buckets", 1, "the sale's buckets, 1-16 (one hot sale over several Redis Cluster primaries)")
	fs.IntVar(&o.Users, "users", 10000, "distinct buyers")
	fs.Float64Var(&o.DupRatio, "dup-ratio", 0.1, "fraction of requests that are duplicate clicks (half of them replay the Idempotency-Key)")
	fs.BoolVar(&o.NoKeys, "no-keys", false, "send no Idempotency-Key (by default half of the first clicks carry one)")
	fs.IntVar(&o.Conns, "conns", 64, "connections, one request in flight on each")
	fs.Int64Var(&o.PaymentWindow, "payment-window", 0, "the sale's payment window in seconds (0: none, orders confirmed at once); with one, the run waits the window + 2s after the load and checks the expiry")
	fs.Float64Var(&o.PayRatio, "pay-ratio", 0, "with --payment-window: the fraction of the accepted orders paid through the admin API after the load; the rest expire")
	fs.Float64Var(&o.Rate, "rate", 0, "requests/s on a fixed schedule (open loop); 0: closed loop, as fast as answers come")
	fs.DurationVar(&o.Duration, "duration", 0, "stop after this long (0: no limit but sold out and --max-duration)")
	fs.BoolVar(&o.UntilSoldOut, "until-sold-out", true, "stop at the first sold_out answer, or 1s after the 202s added up to the stock")
	fs.DurationVar(&o.MaxDuration, "max-duration", 60*time.Second, "hard cap on the load, whatever else is set")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", 30*time.Second, "longest wait for the orders to reach MySQL")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "per request")
	fs.BoolVar(&o.AllowRemote, "allow-remote", false, "allow targets that are not this machine")
	fs.StringVar(&o.WaitingRoom, "waiting-room", "", "put the sale behind a waiting room, fifo or random: each buyer joins, polls at the pace the gateway asks, "+
		"buys once admitted; the report adds joins/s, polls/s and the fairness checks (off or empty: none)")
	fs.Int64Var(&o.AdmitPerSecond, "admit-per-second", 0, "with --waiting-room: the room's admit_per_second, 1-1000000 (default 1000)")
	fs.Int64Var(&o.PassSeconds, "pass-seconds", 0, "with --waiting-room: the room's pass_seconds, 10-3600 (default 120)")
	fs.DurationVar(&o.RoomStartIn, "room-start-in", 0, "with --waiting-room random: the sale starts this long after its creation, so that the crowd joins first; "+
		"a tenth of the buyers join only after the start (default 3s)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: %v (flashgate bench -h lists the flags)", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg, err := config.Load(*cfgPath, nil)
	if err != nil {
		return err
	}
	if o.URL == "" {
		o.URL = admin.ListenerURL(cfg.HTTP.Addr)
	}
	if o.AdminURL == "" {
		o.AdminURL = admin.ListenerURL(cfg.Admin.Addr)
	}
	if o.Token == "" {
		o.Token = cfg.Admin.Token
	}
	if o.JWTSecret == "" {
		o.JWTSecret = cfg.Buyer.JWTSecret
	}
	if o.MySQLDSN == "" {
		o.MySQLDSN = cfg.MySQL.DSN
	}
	if *progress {
		o.Progress = os.Stderr
	}
	o.Timeline = *svgPath != ""
	if o.Timeline {
		// Found out now, not after a minute of load.
		if fi, err := os.Stat(filepath.Dir(*svgPath)); err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: --svg %s: its folder does not exist", errUsage, *svgPath)
		}
	}

	rep, err := bench.Run(ctx, o)
	if err != nil {
		if errors.Is(err, bench.ErrOptions) {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return err
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	// Drawn whatever the checks say: a failed run's picture is the one
	// most worth looking at.
	if *svgPath != "" {
		if err := writeSVG(*svgPath, rep); err != nil {
			return err
		}
	}
	return rep.Err()
}

// writeSVG writes the report's picture to path, whole or not at all.
func writeSVG(path string, rep *bench.Report) error {
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: --svg: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("bench: --svg: %w", err)
	}
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
