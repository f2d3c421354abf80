package main

import (
	"context"
	"io"

	"github.com/flashgate/flashgate/process"
)

// runConsumer is `flashgate consumer`: RabbitMQ → MySQL (process.Consumer)
// until SIGTERM, then finish the deliveries in hand and exit 0.
func runConsumer(ctx context.Context, args []string, _ io.Writer) error {
	cfg, log, err := startService("consumer", args)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush of stderr

	c, err := process.NewConsumer(cfg, process.ConsumerDeps{Log: log})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Run(ctx)
}
