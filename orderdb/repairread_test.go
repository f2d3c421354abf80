package orderdb_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// TestMaxSeqs: the largest seq of each sale asked for, in one query, and
// no entry for a sale without rows.
func TestMaxSeqs(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	x := orderdbtest.Orders("x", 3)
	x[0].Seq, x[1].Seq, x[2].Seq = 3, 9, 4
	y := orderdbtest.Orders("y", 1)
	y[0].Seq = 20
	z := orderdbtest.Orders("z", 1)
	if _, err := orderdb.WriteOrders(ctx, db, append(append(x, y...), z...)); err != nil {
		t.Fatal(err)
	}
	got, err := orderdb.MaxSeqs(ctx, db, []string{"x", "y", "none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["x"] != 9 || got["y"] != 20 {
		t.Errorf("MaxSeqs = %v, want x 9, y 20 and nothing else", got)
	}
	if got, err := orderdb.MaxSeqs(ctx, db, nil); err != nil || len(got) != 0 {
		t.Errorf("MaxSeqs of no sale = %v, %v", got, err)
	}
}

// TestRepairReadsUseTheIndex: the repairer's reads of MySQL seek the index
// (sale_id, seq) and never scan orders, whatever the table holds: EXPLAIN
// of each names the index and no full scan (type ALL or index).
func TestRepairReadsUseTheIndex(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	for i := range 40 {
		os := orderdbtest.Orders("s"+strconv.Itoa(i), 50)
		for j := range os {
			os[j].Seq = int64(j + 1)
		}
		if _, err := orderdb.WriteOrders(ctx, db, os); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE orders"); err != nil {
		t.Fatal(err)
	}
	sales := []any{"s1", "s2", "s3", "s39", "none"}
	cases := []struct {
		name  string
		query string
		args  []any
	}{
		{"MaxSeqs", orderdb.MaxSeqsQuery(len(sales)), sales},
		{"After, first page", orderdb.AfterSeq, []any{"s7", 10, 500}},
		{"After, next page", orderdb.AfterCursor, []any{"s7", 10, 10, "o", 500}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, err := db.QueryContext(ctx, "EXPLAIN "+c.query, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			cols, err := rows.Columns()
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				row := map[string]string{}
				for i, col := range cols {
					if b, ok := vals[i].([]byte); ok {
						row[col] = string(b)
					}
				}
				if row["key"] != "orders_sale_seq" || row["type"] == "ALL" || row["type"] == "index" {
					t.Errorf("EXPLAIN: table %s type %s key %s extra %q; want a seek of orders_sale_seq", row["table"], row["type"], row["key"], row["Extra"])
				}
				if c.name == "MaxSeqs" && !strings.Contains(row["Extra"], "for group-by") {
					t.Errorf("EXPLAIN of MaxSeqs: extra %q, want a loose index scan (Using index for group-by)", row["Extra"])
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("EXPLAIN returned no row")
			}
		})
	}
}
