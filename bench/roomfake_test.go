package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRoom is a stand-in for the waiting room of one sale (API.md,
// "Waiting room"), for tests of the bench's own counting and checks: what
// a real gateway does is tested against a real one (room_run_test.go).
// Admission is arithmetic, as DESIGN.md has it: the first rate × (now −
// start) positions are in.
type fakeRoom struct {
	mode    string
	rate    float64 // admitted a second
	pass    time.Duration
	startIn time.Duration // of the sale's start after its creation; 0: open
	// Unfair behaviours a check must catch.
	reverse    bool // fifo places in the reverse order of joining
	refuseBuys bool // every buy is not_admitted

	mu       sync.Mutex
	created  bool
	start    time.Time
	stock    int64
	sold     int64
	next     int64            // joins so far
	place    map[string]int64 // user → position (0: random pre-queue, not placed yet)
	pre      []string         // random: the pre-start joiners, in join order
	shuffled bool
	bought   map[string]bool
}

// placeAll gives the random pre-queue its places once the sale has
// started: a uniform order.
func (f *fakeRoom) placeAll(now time.Time) {
	if f.mode != "random" || f.shuffled || now.Before(f.start) {
		return
	}
	f.shuffled = true
	for i, k := range rand.Perm(len(f.pre)) {
		f.place[f.pre[k]] = int64(i + 1)
	}
}

// view is the queue view of user, whose place is p (0: none yet).
func (f *fakeRoom) view(user string, now time.Time) string {
	p := f.place[user]
	head := int64(0)
	if !now.Before(f.start) {
		head = int64(f.rate * now.Sub(f.start).Seconds())
	}
	pos, passUntil, status := "null", "null", "waiting"
	if p > 0 {
		pos = fmt.Sprint(p)
		if p <= head {
			status = "admitted"
			at := f.start.Add(time.Duration(float64(p) / f.rate * float64(time.Second)))
			passUntil = `"` + at.Add(f.pass).UTC().Format("2006-01-02T15:04:05.000Z07:00") + `"`
		}
	}
	return fmt.Sprintf(`{"status":%q,"sale_id":"s","user_id":%q,"ticket":"t-%s","position":%s,"ahead":null,"eta_seconds":0,"pass_until":%s,"poll_after_ms":500}`,
		status, user, user, pos, passUntil)
}

func (f *fakeRoom) admitted(user string, now time.Time) bool {
	p := f.place[user]
	return p > 0 && !now.Before(f.start) && p <= int64(f.rate*now.Sub(f.start).Seconds())
}

// startFakeRoom serves f on 127.0.0.1:0 (public and admin routes on one
// listener) until the test ends, and returns its base URL.
func startFakeRoom(t *testing.T, f *fakeRoom) string {
	t.Helper()
	f.place, f.bought = map[string]int64{}, map[string]bool{}
	answer := func(w http.ResponseWriter, code int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { answer(w, 200, `{"status":"ok"}`) })
	adminView := func() string {
		var admitted int64
		now := time.Now()
		for u := range f.place {
			if f.admitted(u, now) {
				admitted++
			}
		}
		starts := "null"
		if f.startIn > 0 {
			starts = `"` + f.start.UTC().Format(time.RFC3339Nano) + `"`
		}
		return fmt.Sprintf(`{"status":"ok","stock":%d,"sold":%d,"remaining":%d,"starts_at":%s,"waiting_room":%q,"admit_per_second":%d,"pass_seconds":%d,"joined":%d,"admitted":%d}`,
			f.stock, f.sold, f.stock-f.sold, starts, f.mode, int64(f.rate), int64(f.pass/time.Second), len(f.place), admitted)
	}
	mux.HandleFunc("PUT /admin/v1/sales/{sale}", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Stock int64 `json:"stock"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.created, f.stock, f.start = true, in.Stock, time.Now().Add(f.startIn)
		answer(w, 201, adminView())
	})
	mux.HandleFunc("GET /admin/v1/sales/{sale}", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.created {
			answer(w, 404, `{"status":"not_found"}`)
			return
		}
		answer(w, 200, adminView())
	})
	mux.HandleFunc("POST /v1/sales/{sale}/queue", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			User string `json:"user_id"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		defer f.mu.Unlock()
		now := time.Now()
		if f.sold >= f.stock {
			answer(w, 410, `{"status":"sold_out"}`)
			return
		}
		if _, ok := f.place[in.User]; !ok {
			f.next++
			switch {
			case f.mode == "random" && now.Before(f.start):
				f.place[in.User] = 0
				f.pre = append(f.pre, in.User)
			case f.mode == "random":
				f.placeAll(now)
				f.place[in.User] = int64(len(f.pre)) + f.next
			case f.reverse:
				f.place[in.User] = 1000 - f.next // 200 buyers: places 800 to 999, admitted from 2 s on
			default:
				f.place[in.User] = f.next
			}
		}
		f.placeAll(now)
		answer(w, 200, f.view(in.User, now))
	})
	mux.HandleFunc("GET /v1/sales/{sale}/queue", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		now := time.Now()
		user, ok := strings.CutPrefix(r.Header.Get(TicketHeader), "t-")
		if _, known := f.place[user]; !ok || !known {
			answer(w, 403, `{"status":"not_admitted"}`)
			return
		}
		if f.sold >= f.stock {
			answer(w, 410, `{"status":"sold_out"}`)
			return
		}
		f.placeAll(now)
		answer(w, 200, f.view(user, now))
	})
	orders := 0
	mux.HandleFunc("POST /v1/sales/{sale}/orders", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			User string `json:"user_id"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		f.mu.Lock()
		defer f.mu.Unlock()
		now := time.Now()
		user, _ := strings.CutPrefix(r.Header.Get(TicketHeader), "t-")
		switch {
		case f.refuseBuys || user != in.User || !f.admitted(user, now):
			answer(w, 403, `{"status":"not_admitted"}`)
		case f.bought[user]:
			answer(w, 409, `{"status":"limit_reached"}`)
		case f.sold >= f.stock:
			answer(w, 410, `{"status":"sold_out"}`)
		default:
			f.bought[user] = true
			f.sold++
			orders++
			answer(w, 202, fmt.Sprintf(`{"status":"accepted","order_id":"o%d","sale_id":"s","user_id":%q,"quantity":1}`, orders, user))
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("fake room: %v", err)
			srv.Close()
		}
		<-served
	})
	return "http://" + ln.Addr().String()
}

// checkOf returns the result of the check named name, "" when none.
func checkOf(rep *Report, name string) string {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c.Result
		}
	}
	return ""
}

func runFakeRoom(t *testing.T, f *fakeRoom, users int, stock int64) *Report {
	t.Helper()
	base := startFakeRoom(t, f)
	o := Options{URL: base, AdminURL: base, NoMySQL: true, WaitingRoom: f.mode, AdmitPerSecond: int64(f.rate),
		PassSeconds: int64(f.pass / time.Second), Stock: stock, Users: users, Conns: 8, UntilSoldOut: true,
		MaxDuration: 20 * time.Second, Timeout: 5 * time.Second}
	if f.mode == "random" {
		o.RoomStartIn = f.startIn
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if rep.Room == nil {
		t.Fatal("no waiting-room figures in the report")
	}
	return rep
}

// TestRoomRunFair: a fair fifo room, every check passes, the stock sells
// to the first positions and nothing is refused.
func TestRoomRunFair(t *testing.T) {
	f := &fakeRoom{mode: "fifo", rate: 400, pass: 30 * time.Second}
	rep := runFakeRoom(t, f, 300, 100)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	rf := rep.Room
	if rf.Joined == 0 || rf.Polls == 0 || rf.Inversions != 0 || rf.NotAdmitted != 0 || rep.Figures.AcceptedUnits != 100 {
		t.Errorf("joined %d, polls %d, inversions %d, not_admitted %d, accepted %d; want joins, polls, 0, 0, 100",
			rf.Joined, rf.Polls, rf.Inversions, rf.NotAdmitted, rep.Figures.AcceptedUnits)
	}
	if rf.ViewJoined != rf.Joined {
		t.Errorf("admin view joined %d, the run placed %d", rf.ViewJoined, rf.Joined)
	}
}

// TestRoomRunCatchesInversions: a fifo room that places later joiners
// first fails the fifo check.
func TestRoomRunCatchesInversions(t *testing.T) {
	f := &fakeRoom{mode: "fifo", rate: 400, pass: 30 * time.Second, reverse: true}
	rep := runFakeRoom(t, f, 200, 50)
	if rep.Room.Inversions == 0 || checkOf(rep, "fifo: joins that did not overlap placed in join order") != Fail {
		t.Errorf("%d inversions, check %q; want some, FAIL", rep.Room.Inversions, checkOf(rep, "fifo: joins that did not overlap placed in join order"))
	}
}

// TestRoomRunCatchesRefusedPasses: a room whose buys refuse admitted
// buyers fails the pass check.
func TestRoomRunCatchesRefusedPasses(t *testing.T) {
	f := &fakeRoom{mode: "fifo", rate: 400, pass: 30 * time.Second, refuseBuys: true}
	rep := runFakeRoom(t, f, 50, 10)
	const name = "no not_admitted within an admitted buyer's pass"
	if rep.Room.NotAdmittedInPass == 0 || checkOf(rep, name) != Fail {
		t.Errorf("%d refused within the pass, check %q; want some, FAIL", rep.Room.NotAdmittedInPass, checkOf(rep, name))
	}
}

// TestRoomRunRandom: a random room whose sale starts after a crowd joined;
// the late tenth queues behind, and the checks pass.
func TestRoomRunRandom(t *testing.T) {
	f := &fakeRoom{mode: "random", rate: 500, pass: 30 * time.Second, startIn: 1500 * time.Millisecond}
	rep := runFakeRoom(t, f, 400, 150)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	rf := rep.Room
	if rf.PreStart < minSpearman || rf.Late == 0 || rf.Spearman == nil || rf.LateAhead != 0 {
		t.Errorf("pre-start %d, late %d, spearman %v, late ahead %d", rf.PreStart, rf.Late, rf.Spearman, rf.LateAhead)
	}
}

func TestRoomOptions(t *testing.T) {
	base := Options{URL: "http://127.0.0.1:1", AdminURL: "http://127.0.0.1:1", NoMySQL: true}
	for _, tc := range []struct {
		name string
		set  func(*Options)
		ok   bool
	}{
		{"fifo, defaults", func(o *Options) { o.WaitingRoom = "fifo" }, true},
		{"off is none", func(o *Options) { o.WaitingRoom = "off" }, true},
		{"random with a start", func(o *Options) { o.WaitingRoom, o.RoomStartIn = "random", time.Second }, true},
		{"unknown mode", func(o *Options) { o.WaitingRoom = "lottery" }, false},
		{"rate 0 given is the default", func(o *Options) { o.WaitingRoom, o.AdmitPerSecond = "fifo", 0 }, true},
		{"rate too high", func(o *Options) { o.WaitingRoom, o.AdmitPerSecond = "fifo", 1_000_001 }, false},
		{"pass too short", func(o *Options) { o.WaitingRoom, o.PassSeconds = "fifo", 9 }, false},
		{"pass too long", func(o *Options) { o.WaitingRoom, o.PassSeconds = "random", 3601 }, false},
		{"a start with fifo", func(o *Options) { o.WaitingRoom, o.RoomStartIn = "fifo", time.Second }, false},
		{"room settings without a room", func(o *Options) { o.PassSeconds = 60 }, false},
		{"an open loop", func(o *Options) { o.WaitingRoom, o.Rate = "fifo", 100 }, false},
		{"too many buyers", func(o *Options) { o.WaitingRoom, o.Users = "fifo", maxRoomUsers+1 }, false},
	} {
		o := base
		tc.set(&o)
		n, err := o.normalize()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.ok && n.WaitingRoom != "" && (n.AdmitPerSecond != 1000 || n.PassSeconds != 120):
			t.Errorf("%s: defaults %d/s, %ds; want 1000/s, 120s", tc.name, n.AdmitPerSecond, n.PassSeconds)
		}
	}
}

func TestParseView(t *testing.T) {
	start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	v, ok := parseView([]byte(`{"status":"admitted","sale_id":"s","user_id":"u","ticket":"abc.def","position":42,"ahead":0,`+
		`"eta_seconds":0,"pass_until":"2030-01-01T09:02:00.250Z","poll_after_ms":1500}`), start)
	if !ok || string(v.ticket) != "abc.def" || v.position != 42 || v.passUntil != int64(2*time.Minute+250*time.Millisecond) || v.pollAfter != 1500*time.Millisecond {
		t.Errorf("admitted view: %+v, %v", v, ok)
	}
	v, ok = parseView([]byte(`{"status":"waiting","ticket":"x","position":null,"ahead":null,"pass_until":null}`), start)
	if !ok || v.position != 0 || v.passUntil != 0 || v.pollAfter != pollDefault {
		t.Errorf("pre-start view: %+v, %v", v, ok)
	}
	if _, ok := parseView([]byte(`{"status":"waiting","position":3}`), start); ok {
		t.Error("a view without a ticket was taken")
	}
}
