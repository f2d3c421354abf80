package admin

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Order is the order view (API.md): what the admin pay and cancel calls
// answer, and what a public listener answers for status polling.
type Order struct {
	// Status is "queued" until the order is in MySQL, then "created".
	Status   string `json:"status"`
	ID       string `json:"order_id"`
	SaleID   string `json:"sale_id"`
	UserID   string `json:"user_id"`
	Quantity int64  `json:"quantity"`
	// State is the order's life: confirmed, pending_payment, paid,
	// cancelled or expired (the constants of package order).
	State string `json:"state"`
	// PayBy is the deadline a pending_payment order is held to, to the
	// millisecond; nil in any other state.
	PayBy *time.Time `json:"pay_by"`

	// Raw is the answer as the gateway sent it, for printing.
	Raw []byte `json:"-"`
}

func orderPath(sale, id string) string {
	return "/v1/sales/" + url.PathEscape(sale) + "/orders/" + url.PathEscape(id)
}

func (c *Client) order(ctx context.Context, method, target, token string) (*Order, error) {
	var o Order
	body, _, err := c.do(ctx, method, target, token, nil)
	if err != nil {
		return nil, err
	}
	if err := decode(method, target, body, &o); err != nil {
		return nil, err
	}
	o.Raw = body
	return &o, nil
}

// Pay marks the pending_payment order id of sale paid and returns the
// order view. It blocks for one call and is idempotent: paying a paid order
// answers the same view. The API's refusals are *APIError with Code 409 and
// Status "order_expired" (at or after pay_by: the order is expired, its
// units are back on sale), "order_cancelled", or "conflict" (a confirmed
// order, whose sale asks no payment); a missing sale or order is Code 404.
func (c *Client) Pay(ctx context.Context, sale, id string) (*Order, error) {
	return c.order(ctx, http.MethodPost, c.base+"/admin"+orderPath(sale, id)+"/pay", c.token)
}

// Cancel cancels the pending_payment or confirmed order id of sale, its
// units going back to the stock and to the buyer's allowance, and returns
// the order view. It blocks for one call and is idempotent: cancelling a
// cancelled order answers the same view. The API's refusals are *APIError
// with Code 409 and Status "order_paid" or "order_expired"; a missing sale
// or order is Code 404.
func (c *Client) Cancel(ctx context.Context, sale, id string) (*Order, error) {
	return c.order(ctx, http.MethodPost, c.base+"/admin"+orderPath(sale, id)+"/cancel", c.token)
}

// ShowOrder reads the order view of order id of sale from a gateway's
// public listener at publicURL (http://host:port, as New takes a base URL):
// the status-polling endpoint, which is not part of the admin API, so no
// admin token goes there. With buyer authentication on, that endpoint
// wants the buyer's own token, which opts cannot give: the answer is then
// an *APIError with Code 401. It blocks for one call; a missing sale or
// order is an *APIError with Code 404, and a base URL New would refuse is
// an error wrapping ErrBaseURL.
func ShowOrder(ctx context.Context, publicURL, sale, id string, opts ...Option) (*Order, error) {
	base, err := parseBase(publicURL)
	if err != nil {
		return nil, err
	}
	return newClient(opts).order(ctx, http.MethodGet, base+orderPath(sale, id), "")
}
