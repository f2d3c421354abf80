package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// The outcomes of Create and Update that are not an answer of the API: each
// asks first, so that a typo in an id does not create a sale and create
// does not overwrite one.
var (
	ErrSaleExists = errors.New("sale exists")
	ErrNoSale     = errors.New("no such sale")
)

// The waiting room's modes (API.md, "Waiting room"): the values of
// waiting_room.
const (
	RoomOff    = "off"
	RoomFIFO   = "fifo"
	RoomRandom = "random"
)

// The API's bounds of the waiting room's numbers: admit_per_second from 1
// to MaxAdmitPerSecond buyers a second, pass_seconds from MinPassSeconds
// to MaxPassSeconds.
const (
	MaxAdmitPerSecond = 1_000_000
	MinPassSeconds    = 10
	MaxPassSeconds    = 3600
)

// Sale is the admin view of one sale, as every sale call answers it. Redis
// serves it, so it is never stale.
type Sale struct {
	ID            string     `json:"sale_id"`
	State         string     `json:"state"`
	Stock         int64      `json:"stock"`
	Sold          int64      `json:"sold"`
	Remaining     int64      `json:"remaining"`
	Buyers        int64      `json:"buyers"`
	Limit         int64      `json:"per_user_limit"`
	Locked        bool       `json:"locked"`
	StartsAt      *time.Time `json:"starts_at"` // nil: open
	EndsAt        *time.Time `json:"ends_at"`   // nil: open
	OutboxPending int64      `json:"outbox_pending"`
	// PaymentWindow is the seconds a buyer has to pay an order accepted
	// now; 0: orders are confirmed at once.
	PaymentWindow int64 `json:"payment_window"`
	// PendingPayment is the orders awaiting payment.
	PendingPayment int64 `json:"pending_payment"`
	// Buckets is the number of Redis hash slots the sale's stock is kept
	// in (1 to 16, fixed at creation).
	Buckets int64 `json:"buckets"`
	// WaitingRoom is the sale's waiting room: RoomOff, RoomFIFO or
	// RoomRandom ("" from a gateway without waiting rooms).
	WaitingRoom string `json:"waiting_room"`
	// AdmitPerSecond is the buyers let in a second, all gateways together;
	// PassSeconds how long an admitted buyer may buy.
	AdmitPerSecond int64 `json:"admit_per_second"`
	PassSeconds    int64 `json:"pass_seconds"`
	// Joined is the buyers with a place in the waiting room, Admitted
	// those let in so far.
	Joined   int64 `json:"joined"`
	Admitted int64 `json:"admitted"`

	// Created reports that the call created the sale (the API said 201).
	Created bool `json:"-"`
	// Raw is the answer as the gateway sent it, for printing.
	Raw []byte `json:"-"`
}

// SaleUpdate holds the fields of a sale to set; a nil field is left as it
// is (a new sale takes the API's default for it). A StartsAt or EndsAt that
// points at the zero time clears that bound: an open window on that side.
type SaleUpdate struct {
	Stock    *int64
	Limit    *int64
	StartsAt *time.Time
	EndsAt   *time.Time
	// PaymentWindow is payment_window, in seconds (0 to 86400; 0: none);
	// a change applies to orders accepted after it.
	PaymentWindow *int64
	// Buckets is buckets (1 to 16): given on a create, the sale's stock is
	// kept in that many Redis hash slots; on an update it must be the
	// sale's own (it is fixed at creation).
	Buckets *int64
	// WaitingRoom is waiting_room: RoomOff, RoomFIFO or RoomRandom; it
	// cannot change once the window has started.
	WaitingRoom *string
	// AdmitPerSecond is admit_per_second (1 to MaxAdmitPerSecond); it may
	// change while buyers wait.
	AdmitPerSecond *int64
	// PassSeconds is pass_seconds (MinPassSeconds to MaxPassSeconds): how
	// long an admitted buyer may buy.
	PassSeconds *int64
}

// body is the JSON object of the PUT: only the fields given; a cleared
// bound is null.
func (u SaleUpdate) body() map[string]any {
	m := map[string]any{}
	if u.Stock != nil {
		m["stock"] = *u.Stock
	}
	if u.Limit != nil {
		m["per_user_limit"] = *u.Limit
	}
	if u.PaymentWindow != nil {
		m["payment_window"] = *u.PaymentWindow
	}
	if u.Buckets != nil {
		m["buckets"] = *u.Buckets
	}
	if u.WaitingRoom != nil {
		m["waiting_room"] = *u.WaitingRoom
	}
	if u.AdmitPerSecond != nil {
		m["admit_per_second"] = *u.AdmitPerSecond
	}
	if u.PassSeconds != nil {
		m["pass_seconds"] = *u.PassSeconds
	}
	for field, t := range map[string]*time.Time{"starts_at": u.StartsAt, "ends_at": u.EndsAt} {
		switch {
		case t == nil:
		case t.IsZero():
			m[field] = nil
		default:
			m[field] = t.Format(time.RFC3339Nano)
		}
	}
	return m
}

func salePath(id string) string { return "/admin/v1/sales/" + url.PathEscape(id) }

// sale makes one sale call and decodes its answer.
func (c *Client) sale(ctx context.Context, method, path string, in any) (*Sale, error) {
	var s Sale
	code, raw, err := c.call(ctx, method, path, in, &s)
	if err != nil {
		return nil, err
	}
	s.Created, s.Raw = code == http.StatusCreated, raw
	return &s, nil
}

// Sale reads the sale id. It blocks for one call; a missing sale is an
// *APIError with Code 404.
func (c *Client) Sale(ctx context.Context, id string) (*Sale, error) {
	return c.sale(ctx, http.MethodGet, salePath(id), nil)
}

// Upsert creates the sale id or changes the fields u gives, in one PUT, and
// returns the sale as it now is (Created tells which happened). It blocks
// for one call; the API's refusals (400, 409) are *APIError.
func (c *Client) Upsert(ctx context.Context, id string, u SaleUpdate) (*Sale, error) {
	return c.sale(ctx, http.MethodPut, salePath(id), u.body())
}

// Create creates the sale id with the fields u gives. It reads the sale
// first and returns an error wrapping ErrSaleExists when it is there; two
// callers racing can still both pass that check (the PUT is what counts:
// Created says whether this one made it). It blocks for two calls.
func (c *Client) Create(ctx context.Context, id string, u SaleUpdate) (*Sale, error) {
	return c.upsertIf(ctx, id, u, true)
}

// Update changes the fields u gives of the sale id. It reads the sale first
// and returns an error wrapping ErrNoSale when it is not there, so that an
// update never creates a sale by a typo. It blocks for two calls.
func (c *Client) Update(ctx context.Context, id string, u SaleUpdate) (*Sale, error) {
	return c.upsertIf(ctx, id, u, false)
}

func (c *Client) upsertIf(ctx context.Context, id string, u SaleUpdate, create bool) (*Sale, error) {
	_, err := c.Sale(ctx, id)
	var ae *APIError
	missing := errors.As(err, &ae) && ae.Code == http.StatusNotFound
	switch {
	case err == nil && create:
		return nil, fmt.Errorf("admin: sale %q: %w", id, ErrSaleExists)
	case missing && !create:
		return nil, fmt.Errorf("admin: sale %q: %w", id, ErrNoSale)
	case err != nil && !missing:
		return nil, err
	}
	return c.Upsert(ctx, id, u)
}

// Restock adds n units to the sale id's stock. It blocks for one call.
func (c *Client) Restock(ctx context.Context, id string, n int64) (*Sale, error) {
	return c.sale(ctx, http.MethodPost, salePath(id)+"/restock", map[string]int64{"quantity": n})
}

// Lock stops the sale id from accepting buys; once it returns, no buy is
// accepted until Unlock. It blocks for one call.
func (c *Client) Lock(ctx context.Context, id string) (*Sale, error) {
	return c.sale(ctx, http.MethodPost, salePath(id)+"/lock", nil)
}

// Unlock lets the sale id accept buys again. It blocks for one call.
func (c *Client) Unlock(ctx context.Context, id string) (*Sale, error) {
	return c.sale(ctx, http.MethodPost, salePath(id)+"/unlock", nil)
}
