package crowdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// The buyers of a crowd without a room: each worker takes the next buyer
// of its base and makes its buys, one after the other.

// startBuyers starts o.Workers workers per base; those of base i look
// after the buyers u = i, i+len(Bases), …
func (c *Crowd) startBuyers() {
	n := len(c.o.Bases)
	next := make([]atomic.Int64, n)
	for i := range n {
		for range c.o.Workers {
			c.wg.Go(func() {
				for {
					u := i + int(next[i].Add(1)-1)*n
					if c.o.Users >= 0 && u >= c.o.Users || c.stopped() {
						return
					}
					if errors.Is(c.deadline.Err(), context.DeadlineExceeded) {
						c.fail("buyer deadline passed")
						return
					}
					if !c.buyer(i, u) {
						return
					}
				}
			})
		}
	}
}

// buyer makes buyer u's buys, sent first to base first; false when the
// crowd stops or every sale is sold out.
func (c *Crowd) buyer(first, u int) bool {
	user := c.o.Prefix + strconv.Itoa(u)
	body := `{"user_id":"` + user + `","quantity":1}`
	for k := range c.o.Keys {
		sale, open := c.saleOf(u)
		if !open {
			return false
		}
		key := "k-" + user
		if k > 0 {
			key += "-" + strconv.Itoa(k)
		}
		hdr := map[string]string{"Idempotency-Key": key}
		a, ok := c.send(first, "POST", sale, "/orders", body, hdr)
		if !ok {
			return false
		}
		if a.from != first {
			c.failovers.Add(1)
		}
		if c.record(a.from, sale, user, key, a) && c.o.Replay {
			// The same buy again through another base: the first reply,
			// byte for byte, and nothing more reserved.
			b, ok := c.send(a.from+1, "POST", sale, "/orders", body, hdr)
			if !ok {
				return false
			}
			if b.code != 202 || string(b.raw) != string(a.raw) {
				c.fail(fmt.Sprintf("key %s of %s replayed on base %d: %d %s; first answer (base %d): %s", key, sale, b.from, b.code, b.raw, a.from, a.raw))
			}
			c.replayed(user, key, b)
		}
		if c.o.Pause > 0 && !c.sleep(c.o.Pause) {
			return false
		}
	}
	return true
}

// saleOf is the sale buyer u buys in; false when every sale is sold out
// (SkipSoldOut).
func (c *Crowd) saleOf(u int) (string, bool) {
	sales := c.o.Sales
	if !c.o.SkipSoldOut {
		return sales[u%len(sales)], true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range sales {
		if sale := sales[(u+i)%len(sales)]; !c.soldOut[sale] {
			return sale, true
		}
	}
	return "", false
}

// finalCodes are the codes of the answers Options.Final names.
var finalCodes = map[string]int{"sold_out": 410, "limit_reached": 409, "rate_limited": 429}

// record notes a buy's final answer from base from; true for a 202.
func (c *Crowd) record(from int, sale, user, key string, a answer) bool {
	var v struct {
		Status  string `json:"status"`
		OrderID string `json:"order_id"`
		UserID  string `json:"user_id"`
	}
	_ = json.Unmarshal(a.raw, &v)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes["buy "+strconv.Itoa(a.code)+" "+v.Status]++
	if a.code == 202 && v.Status == "accepted" {
		return c.acceptLocked(from, sale, user, key, v.OrderID, v.UserID, a.raw)
	}
	for _, f := range c.o.Final {
		if a.code == finalCodes[f] && (v.Status == f || a.code == 429) {
			if a.code == 410 {
				c.soldOut[sale] = true
			}
			return false
		}
	}
	c.bad = append(c.bad, fmt.Sprintf("%s of %s for %s: %d %s", key, sale, user, a.code, a.raw))
	return false
}

// acceptLocked records a 202 for user, its answer carrying order id and
// buyer got; c.mu is held.
func (c *Crowd) acceptLocked(from int, sale, user, key, id, got string, raw []byte) bool {
	if id == "" || got != user {
		c.bad = append(c.bad, fmt.Sprintf("202 for %s: %s", user, raw))
		return false
	}
	if prev, dup := c.accepted[sale][id]; dup {
		if prev != user {
			c.bad = append(c.bad, fmt.Sprintf("order %s given to %s and %s", id, prev, user))
			return false
		}
		c.ledger.Accept(id, user, 1, key) // the ledger tells a replay of its key from another key's
		return true
	}
	c.ledger.Accept(id, user, 1, key)
	c.accepted[sale][id] = user
	c.n202.Add(1)
	c.served[from].Add(1)
	return true
}

// replayed records the 202 of a key sent again in the ledger, which tells
// a replay of the first order from a second one.
func (c *Crowd) replayed(user, key string, a answer) {
	var v struct {
		OrderID string `json:"order_id"`
	}
	if a.code != 202 || json.Unmarshal(a.raw, &v) != nil || v.OrderID == "" {
		return
	}
	c.ledger.Accept(v.OrderID, user, 1, key)
}
