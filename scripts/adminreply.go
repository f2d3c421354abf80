package scripts

import (
	"context"
	"fmt"
)

// The admin script's replies: the sale, decoded by name, and ping's pong.

// AdminReply is the admin script's reply to every operation but ping: the
// outcome and the sale as the script saw it (after the operation when it
// applied), with Redis's clock.
type AdminReply struct {
	Code    Code
	Created bool // the call created the sale
	Now     int64
	Stock   int64
	Sold    int64
	Limit   int64
	Locked  bool
	// StartsAt and EndsAt are Unix ms, 0 for an open start or end.
	StartsAt, EndsAt int64
	Buyers           int64
	Outbox           int64 // orders in the outbox (meta outq)
	Window           int64 // the payment window, seconds; 0 for none
	// Orders awaiting payment, and moved to each final state.
	Pending, Paid, Cancelled, Expired int64
	// Buckets is the bucket count (1 for one slot); Moved, of the home of
	// a sale of several, the units it has handed to them.
	Buckets, Moved int64
	// Room is the sale's waiting room as lua/queue.lua keeps it.
	Room Room
}

// The fields of the admin script's reply, as indexes of adminNames.
const (
	fCode = iota
	fCreated
	fNow
	fStock
	fSold
	fLimit
	fLocked
	fStarts
	fEnds
	fBuyers
	fOutbox
	fWindow
	fPending
	fPaid
	fCancelled
	fExpired
	fBuckets
	fMoved
	fRoom
	fRate
	fPass
	fJoined
	fPrequeue
	fVersion
	fAt
	fHead
	fKey // the one string; every field before it is an integer
	adminFieldCount
)

// adminNames are the names lua/admin.lua gives its reply's fields.
var adminNames = [adminFieldCount]string{
	fCode: "code", fCreated: "created", fNow: "now", fStock: "stock", fSold: "sold", fLimit: "limit",
	fLocked: "locked", fStarts: "starts", fEnds: "ends", fBuyers: "buyers", fOutbox: "outbox",
	fWindow: "window", fPending: "pending", fPaid: "paid", fCancelled: "cancelled", fExpired: "expired",
	fBuckets: "buckets", fMoved: "moved", fRoom: "room", fRate: "rate", fPass: "pass", fJoined: "joined",
	fPrequeue: "prequeue", fVersion: "version", fAt: "at", fHead: "head", fKey: "key",
}

// adminIndex is the field of each name of adminNames.
var adminIndex = func() map[string]int {
	m := make(map[string]int, len(adminNames))
	for i, name := range adminNames {
		m[name] = i
	}
	return m
}()

// decodeAdmin reads the admin script's reply: name, value pairs, each
// field of adminNames once, in any order. A reply of another shape, or a
// field missing, unknown, given twice or of another type, is an error
// naming it. It allocates nothing but an error.
func decodeAdmin(v any) (AdminReply, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return AdminReply{}, fmt.Errorf("reply is %T of %d elements, want name, value pairs", v, len(a))
	}
	var n [fKey]int64
	var key string
	var seen uint64 // bit i: field i read
	for i := 0; i < len(a); i += 2 {
		name, ok := a[i].(string)
		if !ok {
			return AdminReply{}, fmt.Errorf("reply element %d is %#v, want a field name", i, a[i])
		}
		f, ok := adminIndex[name]
		if !ok {
			return AdminReply{}, fmt.Errorf("unknown field %q", name)
		}
		if seen&(1<<f) != 0 {
			return AdminReply{}, fmt.Errorf("field %q given twice", name)
		}
		seen |= 1 << f
		if f == fKey {
			if key, ok = a[i+1].(string); !ok {
				return AdminReply{}, fmt.Errorf("field %q is %#v, want a string", name, a[i+1])
			}
		} else if n[f], ok = a[i+1].(int64); !ok {
			return AdminReply{}, fmt.Errorf("field %q is %#v, want an integer", name, a[i+1])
		}
	}
	for f, name := range adminNames {
		if seen&(1<<f) == 0 {
			return AdminReply{}, fmt.Errorf("field %q missing", name)
		}
	}
	return AdminReply{Code: Code(n[fCode]), Created: n[fCreated] == 1, Now: n[fNow], Stock: n[fStock],
		Sold: n[fSold], Limit: n[fLimit], Locked: n[fLocked] == 1, StartsAt: n[fStarts], EndsAt: n[fEnds],
		Buyers: n[fBuyers], Outbox: n[fOutbox], Window: n[fWindow], Pending: n[fPending], Paid: n[fPaid],
		Cancelled: n[fCancelled], Expired: n[fExpired], Buckets: n[fBuckets], Moved: n[fMoved],
		Room: Room{Mode: n[fRoom], Rate: n[fRate], Pass: n[fPass], Joined: n[fJoined], Prequeue: n[fPrequeue],
			Version: n[fVersion], At: n[fAt], Head: n[fHead], Key: key}}, nil
}

// Admin runs an operation of the admin script other than ping (keys and
// args as lua/admin.lua says, the operation first) and returns its reply.
// It blocks as Run does, returns Run's errors, or one wrapping ErrReply.
func (l *Loader) Admin(ctx context.Context, keys []string, args ...any) (AdminReply, error) {
	return call(ctx, l, Admin, decodeAdmin, keys, args)
}

// pong is the admin script's reply to ping.
const pong = "pong"

func decodePing(v any) (struct{}, error) {
	if v != pong {
		return struct{}{}, fmt.Errorf("reply %#v, want %q", v, pong)
	}
	return struct{}{}, nil
}

// Ping runs the admin script's ping (args "ping" first), which checks the
// script path and not only the connection, and returns nil when it
// answered "pong". It blocks as Run does, returns Run's errors, or one
// wrapping ErrReply.
func (l *Loader) Ping(ctx context.Context, keys []string, args ...any) error {
	_, err := call(ctx, l, Admin, decodePing, keys, args)
	return err
}
