package scripts

// Keys builds the Redis key names of flashgate. Every key of one sale carries
// the sale id as its hash tag, so a sale lives in one Redis Cluster slot and
// one script call touches one slot. The zero value is not useful; the prefix
// comes from the redis.key_prefix setting.
type Keys struct {
	Prefix string
}

// Meta is the sale's hash: stock, sold, limit, starts, ends, locked.
func (k Keys) Meta(sale string) string { return k.Prefix + ":{" + sale + "}:meta" }

// Users is the hash of user id → units held.
func (k Keys) Users(sale string) string { return k.Prefix + ":{" + sale + "}:users" }

// Outbox is the stream of accepted orders not yet confirmed by RabbitMQ.
func (k Keys) Outbox(sale string) string { return k.Prefix + ":{" + sale + "}:outbox" }

// Orders is the hash of order id → "q:QTY:USER" (queued) or "c:QTY:USER"
// (in MySQL).
func (k Keys) Orders(sale string) string { return k.Prefix + ":{" + sale + "}:orders" }

// Idem is the key that remembers the first answer to an Idempotency-Key.
func (k Keys) Idem(sale, key string) string { return k.Prefix + ":{" + sale + "}:idem:" + key }

// Op names one admin operation that must not apply twice (a restock).
func (k Keys) Op(sale, id string) string { return k.Prefix + ":{" + sale + "}:op:" + id }

// Sales is the set of every sale id ever created; the relay walks it to find
// outbox streams.
func (k Keys) Sales() string { return k.Prefix + ":sales" }

// Events is the pub/sub channel on which sale changes are announced.
func (k Keys) Events() string { return k.Prefix + ":events" }
