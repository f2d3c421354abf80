package sale

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate/scripts"
)

// Every code the scripts can answer has its outcome; only an order id
// collision, a sale held for repair, a bucketed sale's home (which
// Store.Reserve never lets a buyer hear), a stock below what a home handed
// its buckets (which Store.Upsert never lets an admin hear) and codes no
// script has are 503.
func TestOutcomeOfEveryCode(t *testing.T) {
	seen := map[error]scripts.Code{}
	for c := scripts.Code(0); c.Known(); c++ {
		err := outcome(c)
		switch {
		case c == scripts.CodeOK:
			if err != nil {
				t.Errorf("%s: %v", c, err)
			}
		case c == scripts.CodeOrderIDCollision || c == scripts.CodeRepairing || c == scripts.CodeBucketed ||
			c == scripts.CodeStockBelowMoved:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", c, err)
			}
		case err == nil || errors.Is(err, ErrUnavailable):
			t.Errorf("%s has no outcome: %v", c, err)
		default:
			if prev, dup := seen[err]; dup {
				t.Errorf("%s and %s are both %v", prev, c, err)
			}
			seen[err] = c
		}
	}
}
