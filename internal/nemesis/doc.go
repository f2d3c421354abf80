// Package nemesis is a sale day under faults thrown at random, and the
// check of its history: the kit of TestNemesis.
//
// A run starts flashgate as production runs it, several gateways and
// consumers as processes of their own, each reaching Redis, RabbitMQ and
// MySQL through a toxiproxy proxy of its own (Net), so that a fault can
// sit between any process and any server. Buyers, an admin and a payment
// system drive many small sales at once (Day), recording every request's
// invocation, response and answer (History). A nemesis (Nemesis) picks a
// fault at random every few seconds, holds it and heals it: a toxic on a
// proxy (latency with jitter, a timeout, a reset, a narrow bandwidth, a
// slicer, a proxy down), a kill -9 and restart of a gateway or a consumer,
// a restart of the run's own Redis. Everything is drawn from one seed,
// printed, so that a run can be replayed.
//
// After the run each sale's records are resolved against the orders the
// run's end found in MySQL (Resolve: a request without an answer happened
// or did not, and MySQL says which), and checked: linearizable against a
// model of a sale (Model: stock, per-user limit, lock, restock, order
// states and expiry) by porcupine (Linearizable), and an end state that
// holds the invariants (CheckEnd: the admin view equal to MySQL, no user
// over the limit; Resolve: every 202 exactly once in MySQL, no row without
// a request, no Idempotency-Key with two orders).
package nemesis
