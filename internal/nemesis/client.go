package nemesis

// The run's requests: each one sent, timed and recorded in the history.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Client sends the run's requests and records them in History. It is safe
// for concurrent use.
type Client struct {
	History *History
	hc      *http.Client
	secret  []byte
	tokens  sync.Map // user → "Bearer …"
}

// requestTimeout bounds one request: past it, the request is ambiguous.
// It is longer than the gateway's Redis budget (500 ms) and its retries,
// so that a healthy but slowed stack still answers.
const requestTimeout = 3 * time.Second

// NewClient is a client recording into h; CloseIdleConnections releases
// its connections. With a secret (the gateways' buyer.jwt_secret) each buy
// carries its buyer's token, as a shop's login would issue it.
func NewClient(h *History, secret string) *Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &Client{History: h, hc: &http.Client{Timeout: requestTimeout, Transport: tr}, secret: []byte(secret)}
}

// token is the Authorization value of user's buyer token, valid for a day
// (longer than any run), signed once per user.
func (c *Client) token(user string) string {
	if v, ok := c.tokens.Load(user); ok {
		return v.(string)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(24 * time.Hour).Unix(),
	}).SignedString(c.secret)
	if err != nil {
		panic(err) // HS256 with a key never fails
	}
	c.tokens.Store(user, "Bearer "+tok)
	return "Bearer " + tok
}

// CloseIdleConnections closes the client's idle connections.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// reply is the part of an answer's body the history keeps.
type reply struct {
	Status  string     `json:"status"`
	OrderID string     `json:"order_id"`
	PayBy   *time.Time `json:"pay_by"`
	// The admin view's figures.
	Remaining int  `json:"remaining"`
	Buyers    int  `json:"buyers"`
	Pending   int  `json:"pending_payment"`
	Locked    bool `json:"locked"`
}

// do sends one request and fills rec's times and answer.
func (c *Client) do(ctx context.Context, rec *Record, method, u, key, auth string, body any) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		panic(err) // the run builds its URLs itself
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec.In.Call = c.History.Now()
	res, err := c.hc.Do(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	rec.In.Return = c.History.Now()
	if err != nil {
		rec.Ambiguous, rec.Err = true, err.Error()
		return
	}
	var r reply
	_ = json.Unmarshal(data, &r)
	rec.Out = Output{Code: res.StatusCode, Status: r.Status, Order: r.OrderID}
	if rec.In.Kind == KindView {
		rec.Out.View = ViewFigures{Remaining: r.Remaining, Buyers: r.Buyers, Pending: r.Pending, Locked: r.Locked}
	}
	if r.PayBy != nil {
		rec.Out.PayBy = c.History.At(*r.PayBy)
	}
	// A 5xx promises nothing either way (a 503 may come after Redis ran
	// the script, its reply lost); a 429 shed the request before it.
	if res.StatusCode >= 500 || res.StatusCode == http.StatusTooManyRequests {
		rec.Ambiguous, rec.Err = true, fmt.Sprintf("%d %s", res.StatusCode, r.Status)
	}
}

// Buy asks gw to sell qty units of sale to user, with Idempotency-Key
// key ("" for none), and records it.
func (c *Client) Buy(ctx context.Context, client int, gw *Proc, sale, user string, qty int, key string) Record {
	rec := Record{Sale: sale, Client: client, In: Input{Kind: KindBuy, User: user, Qty: qty, Key: key}}
	var auth string
	if len(c.secret) > 0 {
		auth = c.token(user)
	}
	c.do(ctx, &rec, http.MethodPost, "http://"+gw.Public+"/v1/sales/"+url.PathEscape(sale)+"/orders", key, auth,
		map[string]any{"user_id": user, "quantity": qty})
	c.History.Add(rec)
	return rec
}

// Order pays or cancels (kind) an order through gw's admin listener, and
// records it.
func (c *Client) Order(ctx context.Context, client int, gw *Proc, kind, sale, id string) Record {
	rec := Record{Sale: sale, Client: client, In: Input{Kind: kind, Order: id}}
	c.do(ctx, &rec, http.MethodPost, "http://"+gw.Admin+"/admin/v1/sales/"+url.PathEscape(sale)+"/orders/"+url.PathEscape(id)+"/"+kind, "", "", nil)
	c.History.Add(rec)
	return rec
}

// View reads the admin view of sale through gw's admin listener, and
// records it.
func (c *Client) View(ctx context.Context, client int, gw *Proc, sale string) Record {
	rec := Record{Sale: sale, Client: client, In: Input{Kind: KindView}}
	c.do(ctx, &rec, http.MethodGet, "http://"+gw.Admin+"/admin/v1/sales/"+url.PathEscape(sale), "", "", nil)
	c.History.Add(rec)
	return rec
}

// Sale locks, unlocks or restocks (kind) sale through gw's admin
// listener. It does not record the call: the admin merges its retries
// into one record.
func (c *Client) Sale(ctx context.Context, client int, gw *Proc, kind, sale string, qty int) Record {
	rec := Record{Sale: sale, Client: client, In: Input{Kind: kind, Qty: qty}}
	var body any
	if kind == KindRestock {
		body = map[string]any{"quantity": qty}
	}
	c.do(ctx, &rec, http.MethodPost, "http://"+gw.Admin+"/admin/v1/sales/"+url.PathEscape(sale)+"/"+kind, "", "", body)
	return rec
}
