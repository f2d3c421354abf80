package scripts

import "testing"

func TestParseMove(t *testing.T) {
	for _, tc := range []struct {
		rec  string
		want MoveRecord
		ok   bool
	}{
		{"take:2:40:1796000000", MoveRecord{Take: true, Bucket: 2, Units: 40, At: 1796000000}, true},
		{"give:7:1796000001", MoveRecord{Units: 7, At: 1796000001}, true},
		{"take:2:40", MoveRecord{}, false},
		{"give:2:40:1796000000", MoveRecord{}, false},
		{"take:-1:40:1", MoveRecord{}, false},
		{"take:x:40:1", MoveRecord{}, false},
		{"give:-3:1", MoveRecord{}, false},
		{"give:3:", MoveRecord{}, false},
		{"lend:3:1", MoveRecord{}, false},
		{"", MoveRecord{}, false},
	} {
		got, err := ParseMove(tc.rec)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMove(%q) = %+v, %v; want %+v, ok %v", tc.rec, got, err, tc.want, tc.ok)
		}
	}
}

func TestBucketNames(t *testing.T) {
	if got := BucketNames(""); got != nil {
		t.Errorf("empty: %q", got)
	}
	if got := BucketNames("s#0.0"); got != nil {
		t.Errorf("one name: %q", got)
	}
	if got := BucketNames("s#0.0,s#1.3"); len(got) != 2 || got[1] != "s#1.3" {
		t.Errorf("two names: %q", got)
	}
}
