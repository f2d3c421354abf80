package sale

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// bucketNames chooses the ids of a new sale's k buckets. On a cluster each
// is placed on a primary of its own where there are enough (bucket i on
// the i-th primary after one the sale id picks): "SALE#i.n" with the
// smallest n whose slot is there. Random tags would put 3 buckets on 3
// distinct primaries of 3 only 2 times in 9. Elsewhere n is 0.
func (s *Store) bucketNames(ctx context.Context, sale string, k int) ([]string, error) {
	names := make([]string, k)
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		for i := range names {
			names[i] = sale + "#" + strconv.Itoa(i) + ".0"
		}
		return names, nil
	}
	ps, err := primaries(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("buckets of %s: %w: read the slot map: %w", sale, ErrUnavailable, err)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("buckets of %s: %w: the cluster has no primaries", sale, ErrUnavailable)
	}
	h := fnv.New32a()
	h.Write([]byte(sale))
	first := int(h.Sum32() % uint32(len(ps)))
	for i := range names {
		p := ps[(first+i)%len(ps)]
		for n := 0; ; n++ {
			if n == 1000 {
				return nil, fmt.Errorf("buckets of %s: %w: no tag found for bucket %d", sale, ErrUnavailable, i)
			}
			name := sale + "#" + strconv.Itoa(i) + "." + strconv.Itoa(n)
			slot := int(hashSlot(name))
			in := false
			for _, r := range p.ranges {
				if slot >= r[0] && slot <= r[1] {
					in = true
					break
				}
			}
			if in {
				names[i] = name
				break
			}
		}
	}
	return names, nil
}

// primary is one primary of a cluster with its slot ranges.
type primary struct {
	id     string
	ranges [][2]int
}

// primaries reads the cluster's primaries from CLUSTER SHARDS, sorted by
// node id, so that every gateway places the buckets of a sale alike.
func primaries(ctx context.Context, cc *redis.ClusterClient) ([]primary, error) {
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var ps []primary
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" || len(sh.Slots) == 0 {
				continue
			}
			p := primary{id: n.ID}
			for _, r := range sh.Slots {
				p.ranges = append(p.ranges, [2]int{int(r.Start), int(r.End)})
			}
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b primary) int { return strings.Compare(a.id, b.id) })
	return ps, nil
}

// hashSlot is Redis Cluster's slot of a key whose hash tag is tag:
// CRC16-CCITT (XMODEM) mod 16384, as the cluster specification gives it.
func hashSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
