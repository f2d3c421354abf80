package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/flashgate/flashgate/orderdb"
)

// migrateTimeout bounds `flashgate migrate` as a whole.
const migrateTimeout = 2 * time.Minute

// runMigrate is `flashgate migrate`: create or upgrade the schema, then exit.
func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseConfig("migrate", args, nil)
	if err != nil {
		return err
	}
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if err := orderdb.Migrate(ctx, db); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "schema at version %d\n", orderdb.SchemaVersion())
	return err
}
