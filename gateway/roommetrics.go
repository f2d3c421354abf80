package gateway

import (
	"cmp"
	"io"
	"slices"
	"strconv"

	"github.com/flashgate/flashgate/promtext"
	"github.com/flashgate/flashgate/sale"
)

// The waiting rooms' series, per sale held in this gateway's memory
// (rooms.go): joined, admitted and waiting as of its last read of the room
// and the clock now, and the polls and not_admitted answers this gateway
// gave. At most sale.MaxSaleSeries sales, the most polled first.
func (r *rooms) writeMetrics(w io.Writer) {
	type row struct {
		id                 string
		joined, admitted   int64
		polls, notAdmitted uint64
	}
	now := r.now().UnixMilli()
	var rows []row
	r.each(func(id string, rm *sale.Room, e *roomEntry) {
		rows = append(rows, row{id: id, joined: rm.Joined, admitted: rm.Admitted(now),
			polls: e.polls.Load(), notAdmitted: e.notAdmitted.Load()})
	})
	if len(rows) == 0 {
		return
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.polls, a.polls), cmp.Compare(a.id, b.id))
	})
	rows = rows[:min(len(rows), sale.MaxSaleSeries)]
	var b []byte
	family := func(name, typ string, v func(row) string) {
		b = promtext.AppendMetadata(b, name, typ)
		for _, x := range rows {
			b = promtext.AppendSale(b, name, x.id)
			b = append(b, v(x)...)
			b = append(b, '\n')
		}
	}
	i64 := func(f func(row) int64) func(row) string {
		return func(x row) string { return strconv.FormatInt(f(x), 10) }
	}
	u64 := func(f func(row) uint64) func(row) string {
		return func(x row) string { return strconv.FormatUint(f(x), 10) }
	}
	family("flashgate_room_joined", "gauge", i64(func(x row) int64 { return x.joined }))
	family("flashgate_room_admitted", "gauge", i64(func(x row) int64 { return x.admitted }))
	family("flashgate_room_waiting", "gauge", i64(func(x row) int64 { return max(x.joined-x.admitted, 0) }))
	family("flashgate_room_polls_total", "counter", u64(func(x row) uint64 { return x.polls }))
	family("flashgate_room_not_admitted_total", "counter", u64(func(x row) uint64 { return x.notAdmitted }))
	w.Write(b)
}
