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

// runMigrate is `flashgate migrate`: create or upgrade the schema in place,
// say which migrations it applied, then exit.
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
	from, err := orderdb.Version(ctx, db)
	if err != nil {
		return err
	}
	if err := orderdb.Migrate(ctx, db); err != nil {
		return err
	}
	if from >= orderdb.SchemaVersion() {
		_, err = fmt.Fprintf(stdout, "schema at version %d (up to date)\n", orderdb.SchemaVersion())
		return err
	}
	// Another process may have applied some of them meanwhile: either way
	// the database now has them.
	for v := from + 1; v <= orderdb.SchemaVersion(); v++ {
		fmt.Fprintf(stdout, "applied %d: %s\n", v, orderdb.Migration(v))
	}
	_, err = fmt.Fprintf(stdout, "schema at version %d (was %d)\n", orderdb.SchemaVersion(), from)
	return err
}
