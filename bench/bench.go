// Package bench is flashgate's load generator and invariant checker: it
// runs a real flash sale against a running stack (gateway, relay, consumer,
// MySQL), measures it from the buyers' side, and checks afterwards that what
// the buyers were told, what Redis holds and what MySQL holds agree.
//
// Run creates a sale through the admin API, drives buy requests at it from a
// fixed number of keep-alive connections (closed loop, or open loop at a
// fixed rate), stops when the sale is sold out, a duration has passed or the
// hard cap is reached, waits for the orders to reach MySQL, and returns a
// Report. Duplicate clicks are part of the load: a fraction of the requests
// re-send an earlier buyer's request, some with the same Idempotency-Key.
// On a sale with a waiting room (Options.WaitingRoom) each buyer joins the
// queue first, polls it and buys once admitted, and the report adds the
// room's fairness checks (room.go, roomfigures.go); CrowdJoin and
// CrowdPoll are the room's traffic alone, for `make bench`.
//
// The strategy benchmarks of DESIGN.md (row lock, WATCH/MULTI, Lua) live in
// this folder's tests (strategy_test.go); they are not part of the binary.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	adminapi "github.com/flashgate/flashgate/admin"
)

// ErrOptions is wrapped by Run's error when the Options are unusable (a bad
// value, or a target that is not on this machine without AllowRemote).
var ErrOptions = errors.New("bad options")

// Options configure one Run. Zero values take the defaults noted.
type Options struct {
	URL      string // gateway public base URL, e.g. http://127.0.0.1:8080 (required)
	AdminURL string // admin listener base URL (required)
	Token    string // admin bearer token; empty when the admin listener needs none
	MySQLDSN string // order database, go-sql-driver form; required unless NoMySQL
	NoMySQL  bool   // skip the MySQL wait and checks (gateway-only runs)

	// JWTSecret is the gateway's FLASHGATE_BUYER_JWT_SECRET: when set,
	// every buy carries "Authorization: Bearer" an HS256 token for its
	// buyer, signed with it, valid until an hour past MaxDuration.
	JWTSecret string

	Sale     string  // sale id to create; default bench-<random>. It must not exist yet.
	Stock    int64   // units on offer (≥ 0)
	Limit    int64   // per_user_limit; default 1
	Users    int     // distinct buyers; default 10000
	DupRatio float64 // fraction of requests that re-send an earlier request, in [0, 1)
	NoKeys   bool    // send no Idempotency-Key (by default half of the first clicks carry one)
	Conns    int     // connections to the gateway, each with one request in flight; default 64
	Buckets  int64   // the sale's buckets (API.md, 1-16); default 1

	// PaymentWindow is the sale's payment_window in seconds (0: none, the
	// orders are confirmed at once). With one, the run pays PayRatio of
	// the accepted orders through the admin API after the load, leaves the
	// others to expire, waits until the window plus 2 s has passed since
	// the last 202, and checks the expiry too (see pay.go).
	PaymentWindow int64
	PayRatio      float64 // in [0, 1]; needs a PaymentWindow

	// Rate, when > 0, sends requests on a fixed schedule (open loop) of
	// Rate per second instead of as fast as answers come back. Latency is
	// then counted from each request's scheduled time, and a request sent
	// more than 1 ms late (all connections busy) counts as late.
	Rate float64

	Duration     time.Duration // stop after this long; 0: no limit but the others
	UntilSoldOut bool          // stop at the first sold_out answer, or 1 s after the 202s added up to the stock
	// AfterSoldOut, with UntilSoldOut, keeps the load on this long after
	// the sale was seen sold out: the crowd that goes on asking after the
	// last unit, answered sold_out.
	AfterSoldOut time.Duration
	MaxDuration  time.Duration // hard cap on the load; default 60s
	DrainTimeout time.Duration // longest wait for the orders to reach MySQL; default 30s
	Timeout      time.Duration // per request; default 5s

	AllowRemote bool // allow targets other than loopback

	// WaitingRoom, "fifo" or "random", puts the sale behind a waiting
	// room (API.md, "Waiting room"; "" or "off": none). Each buyer then
	// joins once, polls at the pace the gateway asks, buys once admitted,
	// and the report adds the room's figures and fairness checks (see
	// room.go). DupRatio and Rate do not apply to such a run.
	WaitingRoom string
	// AdmitPerSecond and PassSeconds are the room's admit_per_second
	// (default 1000) and pass_seconds (default 120).
	AdmitPerSecond int64
	PassSeconds    int64
	// RoomStartIn is how far ahead of the sale's creation a random room's
	// sale starts (default 3s), so that a crowd joins before the start; a
	// tenth of the buyers join only after it. A fifo room's sale starts
	// at once.
	RoomStartIn time.Duration

	// Raw sends the load to URL without creating a sale, reading Redis or
	// MySQL, or checking anything: for measuring a server that is not
	// flashgate (the bare ceiling of `make bench`) with the same client.
	Raw bool

	// Timeline, when set, fills Report.Timeline: the answers and their
	// latency second by second, and (unless Raw) the outbox backlog and,
	// with MySQL, the sale's rows read once a second until the end of the
	// MySQL wait. Workers count a second each and merge it once a second,
	// so the buy loop pays no lock for it; memory is bounded (an hour).
	Timeline bool
	// SampleEvery is how often the timeline reads the outbox backlog and
	// the rows in MySQL; default a second.
	SampleEvery time.Duration

	// Progress, when set, receives a status line once a second.
	Progress io.Writer
}

var saleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$`)

// normalize fills the defaults and checks every value.
func (o Options) normalize() (Options, error) {
	if o.Sale == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return o, err
		}
		o.Sale = "bench-" + hex.EncodeToString(b[:])
	}
	if o.Buckets == 0 {
		o.Buckets = 1
	}
	if o.Limit == 0 {
		o.Limit = 1
	}
	if o.Users == 0 {
		o.Users = 10000
	}
	if o.Conns == 0 {
		o.Conns = 64
	}
	if o.MaxDuration == 0 {
		o.MaxDuration = 60 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Second
	}
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("bench: %w: "+format, append([]any{ErrOptions}, args...)...)
	}
	if o.WaitingRoom == adminapi.RoomOff {
		o.WaitingRoom = ""
	}
	if o.WaitingRoom != "" {
		if o.AdmitPerSecond == 0 {
			o.AdmitPerSecond = 1000
		}
		if o.PassSeconds == 0 {
			o.PassSeconds = 120
		}
		if o.RoomStartIn == 0 && o.WaitingRoom == adminapi.RoomRandom {
			o.RoomStartIn = 3 * time.Second
		}
		switch {
		case o.WaitingRoom != adminapi.RoomFIFO && o.WaitingRoom != adminapi.RoomRandom:
			return bad("waiting-room %q: want %s, %s or %s", o.WaitingRoom, adminapi.RoomOff, adminapi.RoomFIFO, adminapi.RoomRandom)
		case o.AdmitPerSecond < 1 || o.AdmitPerSecond > adminapi.MaxAdmitPerSecond:
			return bad("admit-per-second %d: want 1 to %d", o.AdmitPerSecond, adminapi.MaxAdmitPerSecond)
		case o.PassSeconds < adminapi.MinPassSeconds || o.PassSeconds > adminapi.MaxPassSeconds:
			return bad("pass-seconds %d: want %d to %d", o.PassSeconds, adminapi.MinPassSeconds, adminapi.MaxPassSeconds)
		case o.RoomStartIn < 0 || (o.WaitingRoom == adminapi.RoomFIFO && o.RoomStartIn != 0):
			return bad("room-start-in %v: want a duration ≥ 0, with a random room only", o.RoomStartIn)
		case o.Users > maxRoomUsers:
			return bad("users %d: want at most %d with a waiting room (the run keeps a record of each)", o.Users, maxRoomUsers)
		case o.Rate > 0:
			return bad("rate: a waiting room sets the pace of the buys; leave --rate out")
		case o.Raw:
			return bad("a raw load has no sale, so no waiting room")
		}
		// Each buyer buys once, when admitted: no duplicate clicks.
		o.DupRatio = 0
	} else if o.AdmitPerSecond != 0 || o.PassSeconds != 0 || o.RoomStartIn != 0 {
		return bad("admit-per-second, pass-seconds and room-start-in need a waiting room (waiting-room fifo or random)")
	}
	switch {
	case !saleRE.MatchString(o.Sale):
		return bad("sale %q: want 1-64 of A-Z a-z 0-9 _ . : @ - starting with a letter or digit", o.Sale)
	case o.Stock < 0 || o.Stock > 1_000_000_000:
		return bad("stock %d: want 0 to 1000000000", o.Stock)
	case o.Limit < 1 || o.Limit > 1_000_000:
		return bad("limit %d: want 1 to 1000000", o.Limit)
	case o.Buckets < 1 || o.Buckets > 16:
		return bad("buckets %d: want 1 to 16", o.Buckets)
	case o.Users < 1 || o.Users > 1_000_000_000:
		return bad("users %d: want 1 to 1000000000", o.Users)
	case !(o.DupRatio >= 0 && o.DupRatio < 1):
		return bad("dup-ratio %v: want 0 ≤ r < 1", o.DupRatio)
	case o.Conns < 1 || o.Conns > 10000:
		return bad("conns %d: want 1 to 10000", o.Conns)
	case !(o.Rate >= 0 && o.Rate <= 1e7):
		return bad("rate %v: want 0 (closed loop) to 10000000", o.Rate)
	case o.Duration < 0 || o.MaxDuration < 0 || o.DrainTimeout < 0 || o.Timeout < 0 || o.AfterSoldOut < 0:
		return bad("durations must not be negative")
	case o.SampleEvery < 10*time.Millisecond:
		return bad("sample-every %v: want 10ms or more", o.SampleEvery)
	case o.AfterSoldOut > 0 && !o.UntilSoldOut:
		return bad("after-sold-out needs a load that stops at the sell-out (until-sold-out)")
	case o.PaymentWindow < 0 || o.PaymentWindow > 86400:
		return bad("payment-window %d: want 0 to 86400 seconds", o.PaymentWindow)
	case !(o.PayRatio >= 0 && o.PayRatio <= 1):
		return bad("pay-ratio %v: want 0 ≤ r ≤ 1", o.PayRatio)
	case o.PayRatio > 0 && o.PaymentWindow == 0:
		return bad("pay-ratio needs a sale with a payment window (payment-window)")
	case o.JWTSecret != "" && len(o.JWTSecret) < 32:
		// The gateway refuses such a secret at start: one this short is
		// not the gateway's.
		return bad("jwt-secret: at least 32 bytes, as FLASHGATE_BUYER_JWT_SECRET")
	}
	if o.Raw {
		o.NoMySQL, o.UntilSoldOut = true, false
		if o.AdminURL == "" {
			o.AdminURL = o.URL
		}
	}
	for _, t := range []struct{ name, raw string }{{"url", o.URL}, {"admin-url", o.AdminURL}} {
		u, err := url.Parse(t.raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return bad("%s %q: want http://host:port", t.name, t.raw)
		}
		if !o.AllowRemote && !loopback(u.Hostname()) {
			return bad("%s %q is not this machine; pass --allow-remote to send load elsewhere", t.name, t.raw)
		}
	}
	o.URL, o.AdminURL = strings.TrimSuffix(o.URL, "/"), strings.TrimSuffix(o.AdminURL, "/")
	if !o.NoMySQL {
		c, err := mysql.ParseDSN(o.MySQLDSN)
		if err != nil || c.DBName == "" {
			return bad("mysql-dsn: want user:pass@tcp(host:port)/database (%v)", err)
		}
		if c.Net == "tcp" && !o.AllowRemote {
			host, _, err := net.SplitHostPort(c.Addr)
			if err != nil {
				host = c.Addr
			}
			if !loopback(host) {
				return bad("mysql-dsn names %s, not this machine; pass --allow-remote", c.Addr)
			}
		}
	}
	return o, nil
}

// loopback reports whether host is this machine: "localhost" or a loopback IP.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Run runs one flash sale against the stack named by o and returns its
// report. It blocks until the load has stopped and the orders have reached
// MySQL (or DrainTimeout passed); when ctx is cancelled it stops the load at
// once and still reports on what was sent, without waiting for MySQL. The
// checks count only once every request sent has its answer or has run out
// of Timeout: a slow last answer is waited for, never left out.
//
// A failed invariant is not an error: it is in the report (Report.Err).
// The error is for a run that could not take place: bad Options (wrapping
// ErrOptions), a gateway that is not ready, a sale that already exists, an
// admin API or MySQL that cannot be reached before the load.
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	adm := newAdmin(o)
	defer adm.close()
	if o.Raw {
		adm.close()
	}

	var db *orderDB
	if !o.NoMySQL {
		if db, err = openOrderDB(ctx, o.MySQLDSN); err != nil {
			return nil, err
		}
		defer db.close()
	}
	var opens time.Time // the sale's start; zero: open at once
	if o.Raw {
		adm = nil
	} else {
		if err := adm.ready(ctx); err != nil {
			return nil, err
		}
		var startsAt *time.Time
		if o.RoomStartIn > 0 {
			t := time.Now().Add(o.RoomStartIn)
			startsAt = &t
		}
		s, err := adm.createSale(ctx, o, startsAt)
		if err != nil {
			return nil, err
		}
		if s.StartsAt != nil {
			opens = *s.StartsAt
		}
	}

	rep := &Report{Sale: o.Sale, Stock: o.Stock, Limit: o.Limit, Buckets: o.Buckets, Users: o.Users, Conns: o.Conns,
		Rate: o.Rate, DupRatio: o.DupRatio, MySQLChecked: !o.NoMySQL}
	if o.UntilSoldOut && int64(o.Users)*o.Limit < o.Stock {
		rep.Notes = append(rep.Notes, fmt.Sprintf("users × limit = %d < stock %d: the sale cannot sell out", int64(o.Users)*o.Limit, o.Stock))
	}
	l := newLoad(o, adm)
	pay := newPayment(ctx, o, adm) // nil without a payment window
	var smp *sampler
	if o.Timeline && !o.Raw {
		smp = startSampler(adm, db, o.Sale, o.SampleEvery)
	}
	var room *roomLoad
	var roomWorkers []*roomWorker
	if o.WaitingRoom != "" {
		room = newRoomLoad(l)
		roomWorkers = room.run(ctx, rep, opens)
		if room.noRoom.Load() {
			rep.Notes = append(rep.Notes, "the gateway answered a join 409 conflict: the sale has no waiting room")
		}
	} else {
		l.run(ctx, rep)
	}
	if o.Raw {
		return rep, nil
	}

	// What follows must happen even after an interrupt, but bounded.
	post := context.WithoutCancel(ctx)
	// Counted only now: l.run has returned, so every request sent has its
	// answer or has timed out.
	f := Figures{Limit: o.Limit, MySQL: !o.NoMySQL, Unanswered: rep.unanswered, Unavailable: l.counts[oUnavailable].Load()}
	l.ledger.figures(&f)
	rep.Replays = l.ledger.replays
	pay.run(ctx, post, l, rep, &f)
	vctx, cancel := context.WithTimeout(post, 10*time.Second)
	v, err := adm.view(vctx, o.Sale)
	cancel()
	if err != nil {
		f.RedisErr = err.Error()
	} else {
		f.RedisStock, f.RedisSold, f.RedisRemaining, f.RedisPending = v.Stock, v.Sold, v.Remaining, v.PendingPayment
		rep.OutboxPending = v.OutboxPending
	}
	if room != nil {
		rf := room.figures(rep.Elapsed, roomWorkers)
		rf.AcceptedUnits = f.AcceptedUnits
		if err != nil {
			rf.ViewErr = err.Error()
		} else {
			rf.ViewJoined, rf.ViewAdmitted = v.Joined, v.Admitted
		}
		rep.Room = &rf
	}

	if db != nil {
		want := f.AcceptedUnits
		if f.RedisErr == "" {
			want = f.RedisSold
		}
		wait := o.DrainTimeout
		if ctx.Err() != nil {
			wait = 0
		}
		dctx, cancel := context.WithTimeout(post, wait+10*time.Second)
		drained, ok, err := db.waitFor(dctx, o.Sale, f.AcceptedOrders, want, l.start, wait)
		if err == nil {
			switch {
			case ok:
				rep.MySQLAfter = drained
			case wait == 0:
				rep.Notes = append(rep.Notes, "interrupted: MySQL read once, without waiting for the orders still on their way")
			default:
				rep.Notes = append(rep.Notes, fmt.Sprintf("not every order was in MySQL after --drain-timeout %v", wait))
			}
			err = db.figures(dctx, o.Sale, o.Limit, l.ledger.ids(), &f)
			if err == nil {
				err = pay.mysql(dctx, db, l.ledger.ids(), wait, &f)
			}
		}
		cancel()
		if err != nil {
			f.MySQLErr = err.Error()
		}
	}
	// The backlog drained and the rows arrived during the MySQL wait: the
	// sampler ran through it.
	smp.stop(l.start, rep.Timeline)
	rep.Figures = f
	rep.Checks = Verify(f)
	if rep.Room != nil {
		rep.Checks = append(rep.Checks, VerifyRoom(*rep.Room)...)
	}
	return rep, nil
}
