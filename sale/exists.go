package sale

import (
	"context"
	"fmt"
)

// Exists tells whether a sale exists, in one Redis call (its meta record).
// It returns an error wrapping ErrUnavailable when Redis does not answer.
func (s *Store) Exists(ctx context.Context, sale string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Meta(sale)).Result()
	if err != nil {
		return false, fmt.Errorf("sale %s: %w: %w", sale, ErrUnavailable, err)
	}
	return n > 0, nil
}
