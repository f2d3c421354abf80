package bench

import (
	"context"
	"testing"
	"time"
)

// TestRunPaysAndExpires runs a flash sale with a 2 s payment window
// against a real gateway, whose sweeper expires what the bench leaves
// unpaid: half the orders are paid, and every check, expiry included,
// must pass (Invariant 8: sold is exactly the paid units, the units of
// the expired orders are back in remaining, nothing pending after the
// window plus 2 s).
func TestRunPaysAndExpires(t *testing.T) {
	g := startGateway(t)
	rep, err := Run(context.Background(), Options{
		URL: g.public, AdminURL: g.admin, Token: testToken, NoMySQL: true,
		Stock: 200, Users: 400, DupRatio: 0.2, Conns: 16, UntilSoldOut: true,
		MaxDuration: 8 * time.Second, PaymentWindow: 2, PayRatio: 0.5,
	})
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	f := rep.Figures
	if !f.Payment || !f.Waited || f.AcceptedOrders != 200 || f.PaysSent != 100 || f.PaysPaid+f.PaysExpired != 100 {
		t.Errorf("figures %+v; want 200 orders, 100 pays", f)
	}
	if f.RedisSold != f.PaidUnits || f.RedisRemaining != 200-f.PaidUnits || f.RedisPending != 0 {
		t.Errorf("Redis sold %d, remaining %d, pending %d; paid %d units", f.RedisSold, f.RedisRemaining, f.RedisPending, f.PaidUnits)
	}
	if rep.SweepLag == nil || rep.SweepLag.Expired < 200-f.PaysSent {
		t.Errorf("sweep lag %+v: want the expiry of the %d orders nobody paid counted", rep.SweepLag, 200-f.PaysSent)
	}
}
