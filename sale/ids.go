package sale

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"sync/atomic"
)

// orderIDs makes order ids that are unique and that nobody can guess from
// another: the order status endpoint answers anyone who knows an id, so an id
// one step from a buyer's own must not be someone else's order.
//
// An id is a 128-bit counter block encrypted with AES-128 under a key drawn
// from crypto/rand when the process starts, in hex (32 characters, within
// order.ValidID). AES under a fixed key is a permutation, so distinct counter
// values give distinct ids within the process, never by chance; without the
// key, an id tells nothing of the next one (all 128 bits are unpredictable).
// Ids of two processes (or of one before and after a restart) come from
// independent keys and collide with probability about n²/2¹²⁹ for n ids
// (and the reserve script refuses an id it holds for another user). One
// block encryption costs tens of nanoseconds and no system call, so it stays
// on the buy path where a crypto/rand read per id would not.
//
// The id is chosen before the reservation is sent to Redis, so that a retried
// call carries the same id and the script can recognise it.
type orderIDs struct {
	block cipher.Block
	n     atomic.Uint64
	// blocks lends scratch blocks to next: cipher.Block is an interface, so
	// a block on next's stack would escape to the heap on every call.
	blocks sync.Pool
}

// orderIDLen is the length of every id orderIDs makes.
const orderIDLen = 2 * aes.BlockSize

// newOrderIDs draws a fresh key. It fails only if crypto/rand does.
func newOrderIDs() (*orderIDs, error) {
	var key [16]byte // AES-128: 128 bits of key for 128-bit ids
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	g := &orderIDs{block: block}
	g.blocks.New = func() any { return new([aes.BlockSize]byte) }
	return g, nil
}

// next returns a new id of orderIDLen hex characters. It is safe for
// concurrent use and allocates only the string it returns.
func (g *orderIDs) next() string {
	blk := g.blocks.Get().(*[aes.BlockSize]byte)
	// The counter fills the low half; 2⁶⁴ ids outlast any process, so the
	// high half stays zero and the counter never wraps onto a used block.
	binary.BigEndian.PutUint64(blk[:8], 0)
	binary.BigEndian.PutUint64(blk[8:], g.n.Add(1))
	g.block.Encrypt(blk[:], blk[:])
	var out [orderIDLen]byte
	hex.Encode(out[:], blk[:])
	g.blocks.Put(blk)
	return string(out[:])
}
