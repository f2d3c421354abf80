package scripts

import (
	"fmt"
	"strconv"
	"strings"
)

// MoveRecord is one record of a move of stock half done between a sale's home
// and one of its buckets (lua/move.lua): a take, in the home's Moves hash,
// units on their way to Bucket; or a give, in a bucket's Moves hash, units
// on their way back to the pool.
type MoveRecord struct {
	Take   bool
	Bucket int   // of a take: the bucket the units go to
	Units  int64 // what moves
	At     int64 // Unix seconds of the first half
}

// ParseMove reads a move record as the move script writes it,
// "take:BUCKET:N:SECONDS" or "give:N:SECONDS".
func ParseMove(rec string) (MoveRecord, error) {
	f := strings.Split(rec, ":")
	var m MoveRecord
	var err error
	switch {
	case len(f) == 4 && f[0] == "take":
		m.Take = true
		if m.Bucket, err = strconv.Atoi(f[1]); err != nil || m.Bucket < 0 {
			return MoveRecord{}, fmt.Errorf("move record %q: bucket", rec)
		}
		f = f[1:]
	case len(f) == 3 && f[0] == "give":
	default:
		return MoveRecord{}, fmt.Errorf("move record %q: want take:BUCKET:N:SECONDS or give:N:SECONDS", rec)
	}
	if m.Units, err = strconv.ParseInt(f[1], 10, 64); err != nil || m.Units < 0 {
		return MoveRecord{}, fmt.Errorf("move record %q: units", rec)
	}
	if m.At, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return MoveRecord{}, fmt.Errorf("move record %q: time", rec)
	}
	return m, nil
}

// BucketNames reads the names field of a sale's home meta, the ids of its
// buckets, comma-separated; nil for a sale of one bucket.
func BucketNames(field string) []string {
	names := strings.Split(field, ",")
	if field == "" || len(names) < 2 {
		return nil
	}
	return names
}
