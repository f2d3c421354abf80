package sale

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"
)

// Ticket is what a buyer's ticket says: the buyer, the join number, and
// what the join saw of the room (its pre-queue and its clock), so that a
// gateway whose memory of the room is older still reads the place as the
// join gave it.
type Ticket struct {
	User     string
	Join     int64
	Prequeue int64 // -1: not sealed at the join
	Clock    Clock
}

// TicketKey is a sale's key: it signs and checks the sale's tickets and
// keys its pre-queue's permutation (shuffle.go). It is safe for
// concurrent use.
type TicketKey struct {
	// ipad and opad are the MAC key (HMAC-SHA256, RFC 2104) xored with
	// HMAC's pads, ready for sha256.Sum256, which, unlike a hash.Hash,
	// lets a poll's check run without allocating.
	ipad, opad [sha256.BlockSize]byte
	shuffle    cipher.Block
	blocks     sync.Pool // of *[2][aes.BlockSize]byte: the shuffle's buffers
	// seed is the shuffle's AES-128 key: a random room publishes it once
	// the sale has started, and its SHA-256 from the room's creation
	// (lottery.go). It is derived from the sale's key apart from the MAC
	// key, so that publishing it forges no ticket.
	seed [seedSize]byte
}

// NewTicketKey reads a sale's key, 32 bytes in hex (meta wkey). The ticket
// MAC and the permutation use keys derived from it, one for each use.
func NewTicketKey(hexKey string) (*TicketKey, error) {
	raw, err := hex.DecodeString(hexKey)
	if err != nil || len(raw) < 16 {
		return nil, errors.New("the sale's ticket key is not 16 or more bytes in hex")
	}
	derive := func(use string) []byte {
		m := hmac.New(sha256.New, raw)
		m.Write([]byte(use))
		return m.Sum(nil)
	}
	macKey := derive("flashgate ticket")
	k, err := newShuffleKey([seedSize]byte(derive("flashgate shuffle")[:seedSize]))
	if err != nil {
		return nil, err
	}
	for i := range k.ipad {
		k.ipad[i], k.opad[i] = 0x36, 0x5c
	}
	for i, c := range macKey { // 32 bytes, under the block size: used as is
		k.ipad[i] ^= c
		k.opad[i] ^= c
	}
	return k, nil
}

// newShuffleKey is a key that shuffles with seed and signs nothing: the
// shuffle of NewTicketKey, and of LotteryPlace from a published seed.
func newShuffleKey(seed [seedSize]byte) (*TicketKey, error) {
	block, err := aes.NewCipher(seed[:])
	if err != nil {
		return nil, err
	}
	k := &TicketKey{shuffle: block, seed: seed}
	k.blocks.New = func() any { return new([2][aes.BlockSize]byte) }
	return k, nil
}

// The ticket's form: base64url (no padding) of
//
//	version(1) | join | prequeue+1 | clock version | clock at | clock head |
//	clock rate | len(user) | user | MAC(16)
//
// the numbers as unsigned varints, the MAC the first 16 bytes of
// HMAC-SHA256 over the sale id, a zero byte and everything before it.
const (
	ticketVersion = 1
	macSize       = 16
	// MaxTicket bounds a ticket's length in characters: a longer one is
	// refused before it is decoded.
	MaxTicket = 256
)

// ErrBadTicket is a ticket that is malformed, forged, or another sale's.
var ErrBadTicket = errors.New("bad ticket")

// Sign appends to b the ticket t of sale.
func (k *TicketKey) Sign(b []byte, sale string, t Ticket) []byte {
	var raw [MaxTicket]byte
	p := append(raw[:0], ticketVersion)
	p = binary.AppendUvarint(p, uint64(t.Join))
	p = binary.AppendUvarint(p, uint64(t.Prequeue+1))
	p = binary.AppendUvarint(p, uint64(t.Clock.Version))
	p = binary.AppendUvarint(p, uint64(t.Clock.At))
	p = binary.AppendUvarint(p, uint64(t.Clock.Head))
	p = binary.AppendUvarint(p, uint64(t.Clock.Rate))
	p = binary.AppendUvarint(p, uint64(len(t.User)))
	p = append(p, t.User...)
	p = k.mac(p, sale, p)
	n := base64.RawURLEncoding.EncodedLen(len(p))
	b = append(b, make([]byte, n)...)
	base64.RawURLEncoding.Encode(b[len(b)-n:], p)
	return b
}

// mac appends to b the MAC of payload for sale: HMAC-SHA256 (RFC 2104)
// of sale, a zero byte and payload, cut to macSize. The messages are put
// together on the stack.
func (k *TicketKey) mac(b []byte, sale string, payload []byte) []byte {
	var inner [sha256.BlockSize + 2*MaxTicket]byte
	m := append(append(append(append(inner[:0], k.ipad[:]...), sale...), 0), payload...)
	sum := sha256.Sum256(m)
	var outer [sha256.BlockSize + sha256.Size]byte
	copy(outer[:], k.opad[:])
	copy(outer[sha256.BlockSize:], sum[:])
	sum = sha256.Sum256(outer[:])
	return append(b, sum[:macSize]...)
}

// Read checks and reads a ticket of sale. It returns ErrBadTicket for one
// that is malformed, forged, or another sale's.
func (k *TicketKey) Read(sale string, s []byte) (Ticket, error) {
	var raw [MaxTicket]byte
	if len(s) > MaxTicket || base64.RawURLEncoding.DecodedLen(len(s)) <= macSize+1 {
		return Ticket{}, ErrBadTicket
	}
	n, err := base64.RawURLEncoding.Decode(raw[:], s)
	if err != nil || n <= macSize+1 || raw[0] != ticketVersion {
		return Ticket{}, ErrBadTicket
	}
	payload, sum := raw[:n-macSize], raw[n-macSize:n]
	var want [macSize]byte
	if subtle.ConstantTimeCompare(k.mac(want[:0], sale, payload), sum) != 1 {
		return Ticket{}, ErrBadTicket
	}
	var t Ticket
	var v [7]uint64
	p := payload[1:]
	for i := range v {
		x, w := binary.Uvarint(p)
		if w <= 0 || x > 1<<62 {
			return Ticket{}, ErrBadTicket
		}
		v[i], p = x, p[w:]
	}
	if v[6] != uint64(len(p)) || v[0] < 1 {
		return Ticket{}, ErrBadTicket
	}
	t.Join, t.Prequeue = int64(v[0]), int64(v[1])-1
	t.Clock = Clock{Version: int64(v[2]), At: int64(v[3]), Head: int64(v[4]), Rate: int64(v[5])}
	t.User = string(p)
	return t, nil
}
