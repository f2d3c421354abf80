package sale

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// A random room's lottery can be checked by anyone (API.md "Buyers in a
// browser", docs/waiting-room.md "Checking the lottery"): from the room's
// creation the gateway publishes the commitment, the SHA-256 of the
// shuffle's seed; once the sale has started, the seed itself and the size
// of the pre-queue it shuffled. With those, LotteryPlace (and `flashgate
// room verify`) recomputes the place of every join number. The seed is
// drawn with the room (derived from its key) and kept in Redis only, so it
// cannot be guessed before the start; the ticket MAC's key is derived apart
// from it, so publishing it lets no one forge a ticket.

// Commitment is the hex SHA-256 of the room's shuffle seed.
func (k *TicketKey) Commitment() string {
	sum := sha256.Sum256(k.seed[:])
	return hex.EncodeToString(sum[:])
}

// Seed is the room's shuffle seed, in hex: publish it only once the sale
// has started.
func (k *TicketKey) Seed() string { return hex.EncodeToString(k.seed[:]) }

// seedSize is the length of a shuffle seed in bytes: an AES-128 key.
const seedSize = 16

// ErrBadSeed is a seed that is not 16 bytes in hex.
var ErrBadSeed = errors.New("the seed is not 16 bytes in hex (32 hex digits)")

// LotteryPlace is the position of join number join in a random room whose
// pre-queue held prequeue buyers, shuffled with seed (hex, as the proof
// publishes it): the pre-queue's places are the seed's permutation of
// their join numbers, and those who joined after the start queue behind
// them in the order of joining.
func LotteryPlace(seed string, prequeue, join int64) (int64, error) {
	raw, err := hex.DecodeString(seed)
	if err != nil || len(raw) != seedSize {
		return 0, ErrBadSeed
	}
	if prequeue < 0 || join < 1 {
		return 0, errors.New("the pre-queue is a count (0 or more) and a join number counts from 1")
	}
	k, err := newShuffleKey([seedSize]byte(raw))
	if err != nil {
		return 0, err
	}
	p, _ := k.Position(RoomRandom, prequeue, join)
	return p, nil
}
