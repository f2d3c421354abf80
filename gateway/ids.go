package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// validIdemKey reports whether k is a valid Idempotency-Key: 1–128 printable
// ASCII characters.
func validIdemKey(k []byte) bool {
	if len(k) == 0 || len(k) > 128 {
		return false
	}
	for _, c := range k {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// orderIDs makes order ids unique across processes without coordination: a
// random 64-bit prefix drawn at start and a counter. The id is chosen before
// the reservation is sent to Redis, so that a retried call carries the same
// id and the script can recognise it.
type orderIDs struct {
	prefix [16]byte
	n      atomic.Uint64
}

func newOrderIDs() (*orderIDs, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, err
	}
	g := &orderIDs{}
	hex.Encode(g.prefix[:], r[:])
	return g, nil
}

// next returns a new id of 28 characters.
func (g *orderIDs) next() string {
	var b [28]byte
	copy(b[:], g.prefix[:])
	n := g.n.Add(1)
	var num [12]byte
	s := strconv.AppendUint(num[:0], n, 16)
	for i := 16; i < 28-len(s); i++ {
		b[i] = '0'
	}
	copy(b[28-len(s):], s)
	return string(b[:])
}
