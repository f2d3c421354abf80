package expiry

import "testing"

// Invariant 7 for the sweep's replies: any shape but the one it answers is
// an error, never an expiry made up.
func TestDecodeSweep(t *testing.T) {
	if s, err := decodeSweep([]any{int64(5), int64(0), "o1", int64(3)}); err != nil || len(s.Expired) != 1 || s.Expired[0].PayBy != 3 {
		t.Errorf("decodeSweep(good) = %+v %v", s, err)
	}
	for name, v := range map[string]any{
		"odd":             []any{int64(5), int64(0), "o1"},
		"short":           []any{int64(5)},
		"id as a number":  []any{int64(5), int64(0), int64(1), int64(3)},
		"now as a string": []any{"5", int64(0)},
	} {
		if _, err := decodeSweep(v); err == nil {
			t.Errorf("decodeSweep(%s) took it", name)
		}
	}
}
