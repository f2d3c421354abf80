package sale

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
)

// The published seed reproduces every place of the room's pre-queue, and
// only it: one bit of the seed changed moves places.
func TestLotteryPlace(t *testing.T) {
	k, err := NewTicketKey("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := hex.DecodeString(k.Seed())
	if sum := sha256.Sum256(seed); hex.EncodeToString(sum[:]) != k.Commitment() {
		t.Fatalf("the commitment %s is not the SHA-256 of the seed %s", k.Commitment(), k.Seed())
	}
	mac, _ := NewTicketKey("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	if k.Seed() == hex.EncodeToString(mac.ipad[:seedSize]) {
		t.Fatalf("the seed is the MAC key")
	}
	const n = 200
	flipped := append([]byte(nil), seed...)
	flipped[len(flipped)-1] ^= 0x04 // any bit: the seed is the whole key
	seen, moved := map[int64]bool{}, 0
	for j := int64(1); j <= n+5; j++ {
		want, _ := k.Position(RoomRandom, n, j)
		got, err := LotteryPlace(k.Seed(), n, j)
		if err != nil || got != want {
			t.Fatalf("join %d: LotteryPlace %d, %v; the room says %d", j, got, err, want)
		}
		if j > n && got != j {
			t.Errorf("join %d after the pre-queue: place %d", j, got)
		}
		if j <= n {
			if got < 1 || got > n || seen[got] {
				t.Fatalf("join %d: place %d is outside 1..%d or given twice", j, got, n)
			}
			seen[got] = true
		}
		if other, _ := LotteryPlace(hex.EncodeToString(flipped), n, j); other != got {
			moved++
		}
	}
	if moved < n/2 {
		t.Errorf("one bit of the seed moved %d of %d places", moved, n)
	}
	for _, bad := range []string{"", "zz", k.Seed()[:30], k.Seed() + "00"} {
		if _, err := LotteryPlace(bad, n, 1); !errors.Is(err, ErrBadSeed) {
			t.Errorf("seed %q: %v, want ErrBadSeed", bad, err)
		}
	}
}
