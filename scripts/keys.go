package scripts

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// IdemTTL is how long the Idempotency-Key of an accepted reservation is
// kept, so that a repeat replays its answer (the repair script gives a key
// back for what is left of it). A refusal keeps no key: reserve.lua says why.
const IdemTTL = 24 * time.Hour

// Keys builds the Redis key names of flashgate. Every key of one sale carries
// the sale id as its hash tag, so a sale lives in one Redis Cluster slot and
// one script call touches one slot. The zero value is not useful; the prefix
// comes from the redis.key_prefix setting.
type Keys struct {
	Prefix string
}

// Meta is the sale's hash: stock, sold, limit, starts, ends, locked, window
// (the payment window in seconds, 0 or absent for none) and the order
// counters pending, paid, cancelled and expired.
func (k Keys) Meta(sale string) string { return k.Prefix + ":{" + sale + "}:meta" }

// Users is the hash of user id → units held.
func (k Keys) Users(sale string) string { return k.Prefix + ":{" + sale + "}:users" }

// Outbox is the stream of accepted orders not yet confirmed by RabbitMQ.
func (k Keys) Outbox(sale string) string { return k.Prefix + ":{" + sale + "}:outbox" }

// Orders is the hash of order id → the order's Record.
func (k Keys) Orders(sale string) string { return k.Prefix + ":{" + sale + "}:orders" }

// Created is the set of the sale's order ids that are in MySQL, for the
// order view's status: the consumers add each batch's ids with one SADD
// (no script, no record rewritten) and the order script reads it. A record
// flagged "c" (Record.Created: written so by a release before the set, or
// restored from MySQL by the repair script) is in MySQL too, whether or not
// its id is here. It costs about 80 bytes of Redis memory per order
// marked (a 32-character id; the record takes about 130), and lives as long
// as the sale's other keys.
func (k Keys) Created(sale string) string { return k.Prefix + ":{" + sale + "}:created" }

// Due is the sorted set of the sale's orders awaiting payment: member the
// order id, score its pay_by in Unix ms. The sweep expires what is due.
func (k Keys) Due(sale string) string { return k.Prefix + ":{" + sale + "}:due" }

// Queue is the hash of a sale's waiting room: user id → join number
// (lua/queue.lua).
func (k Keys) Queue(sale string) string { return k.Prefix + ":{" + sale + "}:queue" }

// Idem is the key that remembers the first answer to an Idempotency-Key.
func (k Keys) Idem(sale, key string) string { return k.Prefix + ":{" + sale + "}:idem:" + key }

// Op names one admin operation that must not apply twice (a restock).
func (k Keys) Op(sale, id string) string { return k.Prefix + ":{" + sale + "}:op:" + id }

// SplitBucket reads a bucket id of a sale of several buckets, "SALE#i.n"
// (sale/buckets.go; '#' is in no sale id): its sale and i. ok is false
// for any other id, which is a sale's own.
func SplitBucket(id string) (sale string, bucket int, ok bool) {
	sale, rest, found := strings.Cut(id, "#")
	if !found {
		return id, 0, false
	}
	i, _, _ := strings.Cut(rest, ".")
	b, err := strconv.Atoi(i)
	if err != nil || b < 0 {
		return id, 0, false
	}
	return sale, b, true
}

// OrderBucket reads the bucket of an order id of a sale of several
// buckets, the ".i" its bucket gave it (sale/buckets.go); ok is false for
// an id without one, which is an order of the sale's own keys.
func OrderBucket(id string) (bucket int, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i < 0 || i == len(id)-1 || len(id)-i > 3 {
		return 0, false
	}
	b, err := strconv.Atoi(id[i+1:])
	return b, err == nil && b >= 0
}

// BucketOf is the bucket, of a sale of k buckets, in which user buys: a
// buyer always buys in the same one, so that its record of the buyer's
// units is the buyer's whole (the per-user limit holds with no read across
// slots).
func BucketOf(user string, k int) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % uint32(k))
}

// SaleOf is the sale whose orders the keys of id hold: the sale of a
// bucket id, or id itself.
func SaleOf(id string) string {
	sale, _, _ := SplitBucket(id)
	return sale
}

// Moves is the hash of a sale's moves of stock between its home slot and a
// bucket that are half done (the move script): move id → what moves.
func (k Keys) Moves(sale string) string { return k.Prefix + ":{" + sale + "}:moves" }

// Bucketed is the set of the sales of several buckets, whose half-done moves
// the gateways' settling pass finishes. Like Sales, it is in a slot of its
// own.
func (k Keys) Bucketed() string { return k.Prefix + ":bucketed" }

// Sales is the set of every sale id ever created; the relay walks it to find
// outbox streams.
func (k Keys) Sales() string { return k.Prefix + ":sales" }

// Paying is the set of every sale ever given a payment window; the sweepers
// walk it to find due orders. Like Sales, it is in a slot of its own, which
// no script on a sale's slot may write: the gateway adds a sale before the
// script that gives it a window runs, and nothing removes one.
func (k Keys) Paying() string { return k.Prefix + ":paying" }

// Held is the set of sales the hold script held after a Redis restart or
// failover, which package repair checks against MySQL and releases. Like
// Sales it has a slot of its own; the loader adds to it, the repairer
// removes from it.
func (k Keys) Held() string { return k.Prefix + ":held" }

// Witnesses is the hash in which each consumer's repairer says up to when
// every order delivered to its consumer is in MySQL (package repair): a
// held sale is compared with MySQL only once every consumer has passed the
// moment the orders queue was seen empty. It has a slot of its own.
func (k Keys) Witnesses() string { return k.Prefix + ":witnesses" }

// Events is the pub/sub channel on which sale changes are announced.
func (k Keys) Events() string { return k.Prefix + ":events" }
