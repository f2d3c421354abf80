package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/process"
)

// runGateway is `flashgate gateway`: the HTTP edge on the parts behind it
// (process.Gateway) until SIGTERM, then drain and exit 0. SIGHUP reloads the
// scripts folder.
func runGateway(ctx context.Context, args []string, _ io.Writer) error {
	cfg, log, err := startService("gateway", args)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush of stderr

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	g, err := process.NewGateway(cfg, process.GatewayDeps{Log: log, Hangup: hup})
	if err != nil {
		return err
	}
	defer g.Close()
	srv, err := gateway.New(cfg, gateway.Deps{Log: log.Named("gateway"), Sales: g.Sales, Loader: g.Loader,
		Reload: g.Reload, Metrics: g.WriteMetrics})
	if err != nil {
		return err
	}
	defer srv.Close()
	return g.Run(ctx, srv)
}
