package orderdb

import (
	"context"
	"database/sql"

	"github.com/flashgate/flashgate/order"
)

// MigrateTo is migrateTo, for the tests of upgrades from an older schema.
var MigrateTo = migrateTo

// WriteOrdersHolding is WriteOrders calling hold between its last
// statement and COMMIT: the test holds the transaction, and its locks,
// open until hold returns.
func WriteOrdersHolding(ctx context.Context, db *sql.DB, orders []order.Order, hold func()) (Written, error) {
	return writeOrders(ctx, db, orders, hold)
}

// LedgerSlots is the number of rows a sale's ledger spreads over.
const LedgerSlots = ledgerSlots

// The repairer's reads, for the test that they stay on the index.
var (
	MaxSeqsQuery = maxSeqsQuery
	AfterSeq     = afterSeq
	AfterCursor  = afterCursor
)
