package sale

import (
	"encoding/binary"
	"math/bits"
)

// Position is where join number j stands in a room of the given mode whose
// pre-queue holds prequeue buyers (-1: not sealed yet). ok is false while
// a random room's pre-queue is not sealed: the place is not known yet.
// Past the pre-queue, and in a fifo room, the position is the join number.
func (k *TicketKey) Position(mode, prequeue, j int64) (p int64, ok bool) {
	switch {
	case mode != RoomRandom:
		return j, true
	case prequeue < 0:
		return 0, false
	case j > prequeue:
		return j, true
	}
	return k.shuffle1(prequeue, j), true
}

// shuffle1 is the position in 1..n of join number j (1 ≤ j ≤ n) under the
// sale's keyed permutation: a balanced Feistel network of six rounds over
// the smallest even number of bits that holds n, each round AES under the
// sale's shuffle key, walked round until it lands in 0..n-1 (cycle walking
// keeps it a permutation of 0..n-1). With a secret key, AES makes each
// round a pseudorandom function, and six rounds of those a pseudorandom
// permutation (Luby–Rackoff): no one can tell the order from a uniformly
// drawn one, nor steer it, and no buyer is written anything at the start.
func (k *TicketKey) shuffle1(n, j int64) int64 {
	if n <= 1 {
		return j
	}
	w := bits.Len64(uint64(n - 1))
	w += w & 1
	if w < 2 {
		w = 2
	}
	half := uint(w / 2)
	mask := uint64(1)<<half - 1
	buf := k.blocks.Get().(*[2][16]byte)
	defer k.blocks.Put(buf)
	x := uint64(j - 1)
	for {
		l, r := x>>half, x&mask
		for round := range 6 {
			l, r = r, l^(k.round(buf, round, r)&mask)
		}
		x = l<<half | r
		if x < uint64(n) {
			return int64(x) + 1
		}
	}
}

// round is the Feistel round function: AES of the round and the half,
// in buf's blocks (a cipher.Block's arguments escape: a pooled pair
// keeps a poll from allocating).
func (k *TicketKey) round(buf *[2][16]byte, round int, r uint64) uint64 {
	in, out := &buf[0], &buf[1]
	*in = [16]byte{}
	in[0] = byte(round)
	binary.BigEndian.PutUint64(in[8:], r)
	k.shuffle.Encrypt(out[:], in[:])
	return binary.BigEndian.Uint64(out[:8])
}
