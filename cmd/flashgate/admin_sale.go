package main

// The admin CLI's sale commands (`flashgate admin sale …`): the flags of a
// sale's settings read and checked before any request, then one admin call.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/sale"
)

// saleUpsert is `sale create` and `sale update`: one PUT of the fields
// given, after a read that refuses to create an existing sale or to update
// a missing one (see admin.Client.Create).
func (a *adminCmd) saleUpsert(ctx context.Context, args []string, create bool) error {
	name := "sale update"
	if create {
		name = "sale create"
	}
	fs := a.flags(name)
	stock := fs.String("stock", "", "")
	limit := fs.String("limit", "", "")
	starts := fs.String("starts", "", "")
	ends := fs.String("ends", "", "")
	window := fs.String("payment-window", "", "")
	room := fs.String("waiting-room", "", "")
	admit := fs.String("admit-per-second", "", "")
	pass := fs.String("pass-seconds", "", "")
	var buckets *string
	var clearStarts, clearEnds *bool
	if create {
		buckets = fs.String("buckets", "", "")
	}
	if !create {
		clearStarts = fs.Bool("clear-starts", false, "")
		clearEnds = fs.Bool("clear-ends", false, "")
	}
	pos, err := parseAdminArgs(fs, args, 1, "one sale id")
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var u admin.SaleUpdate
	for _, f := range []struct {
		flag string
		v    *string
		min  int64
		dst  **int64
	}{{"stock", stock, 0, &u.Stock}, {"limit", limit, 1, &u.Limit}} {
		if !set[f.flag] {
			continue
		}
		n, err := strconv.ParseInt(*f.v, 10, 64)
		if err != nil || n < f.min {
			return adminUsageError(fmt.Errorf("%s: --%s %q: want a whole number from %d", name, f.flag, *f.v, f.min))
		}
		*f.dst = &n
	}
	if set["payment-window"] {
		n, ok := paymentWindow(*window)
		if !ok {
			return adminUsageError(fmt.Errorf("%s: --payment-window %q: want seconds from 0 to %d, or a duration such as 15m", name, *window, sale.MaxPaymentWindow))
		}
		u.PaymentWindow = &n
	}
	if set["buckets"] {
		n, err := strconv.ParseInt(*buckets, 10, 64)
		if err != nil || n < 1 || n > sale.MaxBuckets {
			return adminUsageError(fmt.Errorf("%s: --buckets %q: want a whole number from 1 to %d", name, *buckets, sale.MaxBuckets))
		}
		u.Buckets = &n
	}
	if set["waiting-room"] {
		switch *room {
		case admin.RoomOff, admin.RoomFIFO, admin.RoomRandom:
			u.WaitingRoom = room
		default:
			return adminUsageError(fmt.Errorf("%s: --waiting-room %q: want %s, %s or %s", name, *room, admin.RoomOff, admin.RoomFIFO, admin.RoomRandom))
		}
	}
	for _, f := range []struct {
		flag     string
		v        *string
		min, max int64
		dst      **int64
	}{
		{"admit-per-second", admit, 1, admin.MaxAdmitPerSecond, &u.AdmitPerSecond},
		{"pass-seconds", pass, admin.MinPassSeconds, admin.MaxPassSeconds, &u.PassSeconds},
	} {
		if !set[f.flag] {
			continue
		}
		n, err := strconv.ParseInt(*f.v, 10, 64)
		if err != nil || n < f.min || n > f.max {
			return adminUsageError(fmt.Errorf("%s: --%s %q: want a whole number from %d to %d", name, f.flag, *f.v, f.min, f.max))
		}
		*f.dst = &n
	}
	if create && !set["stock"] {
		return adminUsageError(errors.New("sale create: --stock is required"))
	}
	for _, f := range []struct {
		flag  string
		v     *string
		clear *bool
		dst   **time.Time
	}{{"starts", starts, clearStarts, &u.StartsAt}, {"ends", ends, clearEnds, &u.EndsAt}} {
		if f.clear != nil && *f.clear {
			if set[f.flag] {
				return adminUsageError(fmt.Errorf("%s: --%s and --clear-%s together", name, f.flag, f.flag))
			}
			*f.dst = &time.Time{} // the zero time clears: an open window on that side
			continue
		}
		if !set[f.flag] {
			continue
		}
		t, err := time.Parse(time.RFC3339, *f.v)
		if err != nil {
			return adminUsageError(fmt.Errorf("%s: --%s %q: want an RFC 3339 time such as 2025-11-28T09:00:00Z", name, f.flag, *f.v))
		}
		*f.dst = &t
	}
	if u == (admin.SaleUpdate{}) {
		return adminUsageError(errors.New("sale update: nothing to change (--stock, --limit, --starts, --ends, --clear-starts, --clear-ends, --payment-window, --waiting-room, --admit-per-second, --pass-seconds)"))
	}

	c, err := a.client()
	if err != nil {
		return err
	}
	id := pos[0]
	var s *admin.Sale
	if create {
		s, err = c.Create(ctx, id, u)
	} else {
		s, err = c.Update(ctx, id, u)
	}
	switch {
	case errors.Is(err, admin.ErrSaleExists):
		return fmt.Errorf("sale %q already exists: use sale update", id)
	case errors.Is(err, admin.ErrNoSale):
		return fmt.Errorf("no sale %q: use sale create", id)
	case err != nil:
		return apiFailure(err)
	}
	return a.print(s.Raw)
}

// saleSimple is a command that takes a sale id and nothing else.
func (a *adminCmd) saleSimple(ctx context.Context, name string, args []string,
	call func(*admin.Client, context.Context, string) (*admin.Sale, error)) error {
	pos, err := parseAdminArgs(a.flags(name), args, 1, "one sale id")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	s, err := call(c, ctx, pos[0])
	if err != nil {
		return apiFailure(err)
	}
	return a.print(s.Raw)
}

func (a *adminCmd) saleRestock(ctx context.Context, args []string) error {
	pos, err := parseAdminArgs(a.flags("sale restock"), args, 2, "a sale id and a quantity")
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || n < 1 {
		return adminUsageError(fmt.Errorf("sale restock: quantity %q: want a whole number from 1", pos[1]))
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	s, err := c.Restock(ctx, pos[0], n)
	if err != nil {
		return apiFailure(err)
	}
	return a.print(s.Raw)
}

// paymentWindow reads --payment-window: whole seconds, or a Go duration
// of whole seconds ("15m"), within the API's bounds.
func paymentWindow(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil || d%time.Second != 0 {
			return 0, false
		}
		n = int64(d / time.Second)
	}
	return n, n >= 0 && n <= sale.MaxPaymentWindow
}
