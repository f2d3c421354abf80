package sale

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"
)

// orderIDs makes order ids that are unique, that nobody can guess from
// another, and that sort by the time they were made.
//
// Unguessable: the order status endpoint answers anyone who knows an id, so
// an id one step from a buyer's own must not be someone else's order. The
// last 80 bits of an id are the first 80 bits of a 128-bit counter block
// encrypted with AES-128 under a key drawn from crypto/rand when the
// process starts: without the key they tell nothing of the next id's.
//
// Sorted by time: the first 48 bits are the Unix time in milliseconds, so
// that MySQL's primary key (order_id) takes each new row at its right edge,
// as it takes an auto-increment, instead of at a random page of the whole
// table: random ids cost MariaDB about 1.4 times the CPU per inserted row
// of ordered ones in the same batches, more as the table outgrows memory.
// The time is no secret: it is the order's own reserved_at, within a few
// milliseconds, and only the holder of the id sees it.
//
// Unique: AES under a fixed key is a permutation, so distinct counter
// values give distinct blocks; two of their 80-bit prefixes meet with
// probability about n²/2⁸¹ for n ids made within one millisecond, as do
// ids of two processes (or of one before and after a restart), whose keys
// are independent. The reserve script refuses an id it holds for another
// order (503, nothing promised). One block encryption costs tens of
// nanoseconds and no system call, so it stays on the buy path where a
// crypto/rand read per id would not.
//
// The id is chosen before the reservation is sent to Redis, so that a retried
// call carries the same id and the script can recognise it. It is 32 hex
// characters, within order.ValidID, as before the time prefix: ids of both
// forms live side by side.
type orderIDs struct {
	block cipher.Block
	n     atomic.Uint64
	now   func() time.Time // time.Now; tests set their own clock
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
	g := &orderIDs{block: block, now: time.Now}
	g.blocks.New = func() any { return new([aes.BlockSize]byte) }
	return g, nil
}

// timeBytes is how many leading bytes of an id hold its millisecond.
const timeBytes = 6

// next returns a new id of orderIDLen hex characters. It is safe for
// concurrent use and allocates only the string it returns.
func (g *orderIDs) next() string {
	blk := g.blocks.Get().(*[aes.BlockSize]byte)
	// The counter fills the low half; 2⁶⁴ ids outlast any process, so the
	// high half stays zero and the counter never wraps onto a used block.
	binary.BigEndian.PutUint64(blk[:8], 0)
	binary.BigEndian.PutUint64(blk[8:], g.n.Add(1))
	g.block.Encrypt(blk[:], blk[:])
	// The millisecond in front, big-endian (so the hex sorts as the time
	// does), then the cipher block's first 80 bits.
	var id [aes.BlockSize]byte
	ms := uint64(g.now().UnixMilli())
	for i := range timeBytes {
		id[i] = byte(ms >> (8 * (timeBytes - 1 - i)))
	}
	copy(id[timeBytes:], blk[:])
	g.blocks.Put(blk)
	var out [orderIDLen]byte
	hex.Encode(out[:], id[:])
	return string(out[:])
}
