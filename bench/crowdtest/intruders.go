package crowdtest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Intruders send, until stopped, buys on a room's sale that no gateway
// may accept, to each base in turn: without a ticket, with a malformed
// ticket, with another sale's ticket, with an admitted ticket of another
// buyer, with a forged one. Each must be 403 not_admitted, or the crowd's
// Check fails; a base that does not answer (killed) is passed over.
type Intruders struct {
	c       *Crowd
	foreign Ticket // a ticket of another sale's room
	sent    atomic.Int64
	refused atomic.Int64
	stopped chan struct{}
	done    chan struct{}
}

// StartIntruders starts intruders beside c, a room's crowd; foreign is a
// genuine ticket of another sale. They stop at Stop or when the test ends.
func (c *Crowd) StartIntruders(foreign Ticket) *Intruders {
	r := &Intruders{c: c, foreign: foreign, stopped: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	c.t.Cleanup(r.Stop)
	return r
}

// Stop stops the intruders and waits for the buy in flight; safe to call
// twice.
func (r *Intruders) Stop() {
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
	<-r.done
}

// Sent is the buys answered; Refused those answered 403 not_admitted.
func (r *Intruders) Sent() int64    { return r.sent.Load() }
func (r *Intruders) Refused() int64 { return r.refused.Load() }

func (r *Intruders) run() {
	defer close(r.done)
	c := r.c
	sale := c.room.sale
	for n := 0; ; n++ {
		select {
		case <-r.stopped:
			return
		case <-time.After(5 * time.Millisecond):
		}
		user, ticket, what := "x"+strconv.Itoa(n), "", ""
		c.mu.Lock()
		var adm Ticket
		if len(c.room.admitted) > 0 {
			adm = c.room.admitted[n%len(c.room.admitted)]
		}
		c.mu.Unlock()
		switch n % 5 {
		case 0:
			what = "no ticket"
		case 1:
			what, ticket = "a malformed ticket", "not-a-ticket"
		case 2:
			what, ticket = "another sale's ticket", r.foreign.Ticket
			user = r.foreign.User
		case 3:
			if adm.Ticket == "" {
				continue
			}
			what, ticket = "an admitted ticket of "+adm.User, adm.Ticket
		case 4:
			if adm.Ticket == "" {
				continue
			}
			// One character changed in the middle: the MAC must catch it.
			b := []byte(adm.Ticket)
			k := len(b) / 2
			if b[k] == 'A' {
				b[k] = 'B'
			} else {
				b[k] = 'A'
			}
			what, ticket, user = "a forged ticket", string(b), adm.User
		}
		hdr := map[string]string{}
		if ticket != "" {
			hdr["Flashgate-Ticket"] = ticket
		}
		base := c.o.Bases[n%len(c.o.Bases)]
		code, raw, err := Do(c.client, "POST", base+"/v1/sales/"+sale+"/orders", `{"user_id":"`+user+`","quantity":1}`, hdr)
		if err != nil {
			continue // a killed gateway
		}
		r.sent.Add(1)
		var a BuyAnswer
		_ = json.Unmarshal(raw, &a)
		if code == 403 && a.Status == "not_admitted" {
			r.refused.Add(1)
			continue
		}
		c.fail(fmt.Sprintf("buy of %s with %s at %s: %d %s", user, what, base, code, raw))
	}
}
