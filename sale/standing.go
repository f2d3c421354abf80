package sale

// The admission arithmetic of a waiting room (room.go): where a ticket
// stands at one instant, from the room as a gateway holds it and the
// ticket, with no Redis call. A poll asks it once (Room.Where) and writes
// the answer; a buy asks the same and passes only if it Admits its buyer.

// Bounds of a queue view's poll_after_ms, in ms (API.md "Waiting room").
const (
	MinPollAfter = 500
	MaxPollAfter = 20_000
)

// Standing is where a ticket stands in its room at one instant: what a
// queue view says (API.md "Waiting room").
type Standing struct {
	Ticket Ticket
	// Known is false while a random room's pre-queue is not sealed: the
	// place is drawn at the start, and Position, Ahead and AdmitAt are 0.
	Known    bool
	Position int64 // from 1; with Known
	Ahead    int64 // waiting buyers in front; with Known, 0 once Admitted
	AdmitAt  int64 // Unix ms at which the place is admitted; with Known
	Admitted bool
	// PassUntil is the Unix ms at which the admission's pass ends, with
	// Admitted; passes says it had not ended at the instant.
	PassUntil int64
	passes    bool
	ETA       int64 // seconds until admission, 0 once Admitted
	PollAfter int64 // ms until the next poll, MinPollAfter to MaxPollAfter
}

// Admits tells whether a buy of user may pass the room: the ticket is
// user's, admitted, and its pass had not ended at the instant.
func (s *Standing) Admits(user []byte) bool {
	return s.passes && s.Ticket.User == string(user)
}

// Where reads raw, a ticket of r as a request sends it, and says where it
// stands at now (Unix ms). buyer, when not "", is the buyer the request is
// authenticated as. It returns ErrBadTicket for a ticket that is
// malformed, forged, another sale's or another buyer's. It makes no Redis
// call and is safe for concurrent use.
func (r *Room) Where(raw []byte, buyer string, now int64) (Standing, error) {
	t, err := r.Key.Read(r.Sale, raw)
	if err != nil || buyer != "" && t.User != buyer {
		return Standing{}, ErrBadTicket
	}
	return r.standing(t, now), nil
}

// Standing is where the ticket of this place's join for user stands at now
// (Unix ms): the view a join answers.
func (p Place) Standing(user string, now int64) Standing {
	t := Ticket{User: user, Join: p.Join, Prequeue: p.Room.Prequeue, Clock: p.Room.Clock}
	return p.Room.standing(t, now)
}

// standing is where t, read and checked, stands in r at now (Unix ms). Of
// the clock r holds and the one t carries, the newer counts; a position
// the newer clock had admitted before its anchor was admitted when t's
// clock said, if that was earlier (it is exact for a ticket that saw every
// change of rate but the last).
func (r *Room) standing(t Ticket, now int64) Standing {
	s := Standing{Ticket: t}
	prequeue := r.Prequeue
	if prequeue < 0 {
		prequeue = t.Prequeue
	}
	var wait int64 // ms until admission; once admitted, until the pass ends
	if p, known := r.Key.Position(r.Mode, prequeue, t.Join); known {
		c := Newer(r.Clock, t.Clock)
		at := c.AdmitAt(p)
		if p <= c.Head && c.Version > t.Clock.Version {
			at = min(at, t.Clock.AdmitAt(p))
		}
		s.Known, s.Position, s.AdmitAt = true, p, at
		if head := c.HeadAt(now); p <= head {
			s.Admitted = true
			s.PassUntil = at + r.Pass*1000
		} else {
			s.Ahead = p - 1 - head
		}
		wait = at - now
	} else {
		// The place is drawn at the start: until then, the start and
		// half the crowd so far ahead is the estimate.
		wait = r.Start - now + r.Joined*500/max(r.Clock.Rate, 1)
	}
	if s.Admitted {
		s.passes = now < s.PassUntil
		wait = s.PassUntil - now // nothing to wait for: ask again within the pass
	} else {
		s.ETA = max(0, (wait+999)/1000)
	}
	s.PollAfter = min(max(wait/2, MinPollAfter), MaxPollAfter)
	return s
}
