// Package admin is a client of flashgate's admin API: the sale, order and
// script calls an operator makes on a gateway's admin listener, with its
// bearer token, and the two reads of its public listener an operator needs
// (the readiness probe and an order's view). `flashgate admin` and the
// load generator in bench/ both talk to a gateway through it; the API
// itself is served by gateway/.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Timeout bounds one call, answer included, on the HTTP client New makes
// when it is given none.
const Timeout = 10 * time.Second

// maxAnswer caps what is read of an answer: the API's answers are a few
// hundred bytes, so anything longer is cut rather than held in memory.
const maxAnswer = 1 << 20

// ErrBaseURL is wrapped by New's error when the base URL is unusable.
var ErrBaseURL = errors.New("bad base URL")

// Client calls one gateway's admin API. It is safe for concurrent use; it
// holds no state between calls but the HTTP client's idle connections.
type Client struct {
	base, token, agent string
	hc                 *http.Client
}

// Option adjusts a Client (or a Ready probe).
type Option func(*Client)

// WithHTTPClient makes the calls with hc instead of the default client,
// which times out after Timeout and follows no redirect.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.agent = ua } }

// New returns a client of the admin API at baseURL, http(s)://host[:port]
// with an optional path prefix, or a bare host:port (taken as http). token
// is sent as a bearer token; empty sends none (an admin listener on
// loopback may need none). New does not connect; its only error wraps
// ErrBaseURL.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := parseBase(baseURL)
	if err != nil {
		return nil, err
	}
	c := newClient(opts)
	c.base, c.token = base, token
	return c, nil
}

func newClient(opts []Option) *Client {
	c := &Client{}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{
			Timeout: Timeout,
			// The API never redirects; a redirect means the base URL is not
			// the admin listener, and the token should not follow it there.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return c
}

func parseBase(raw string) (string, error) {
	s := raw
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("admin: %w %q: want http://host:port", ErrBaseURL, raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// BaseURL returns the base URL the client calls, normalised by New.
func (c *Client) BaseURL() string { return c.base }

// CloseIdleConnections closes the HTTP client's idle connections. The
// client stays usable.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// APIError is an answer other than 2xx. Match it with errors.As.
type APIError struct {
	Method, URL string
	Code        int    // the HTTP status code
	Status      string // the answer's "status" field (e.g. "conflict"); empty when it has none
	Message     string // the answer's "error" field; empty when it has none
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Code, http.StatusText(e.Code))
	if e.Status != "" {
		s += ": " + e.Status
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Ready asks a gateway's readiness endpoint at readyURL (its public
// listener's /readyz, which is not part of the admin API: no token goes
// there). It blocks for one call and returns the body of a 2xx answer, or
// an *APIError (503 while the gateway cannot take buys or is draining), or
// the transport's error.
func Ready(ctx context.Context, readyURL string, opts ...Option) ([]byte, error) {
	body, _, err := newClient(opts).do(ctx, http.MethodGet, readyURL, "", nil)
	return body, err
}

// call sends one request to the API, with the token, and decodes a 2xx
// answer into out (when not nil). It returns the answer's code and body.
func (c *Client) call(ctx context.Context, method, path string, in, out any) (int, []byte, error) {
	body, code, err := c.do(ctx, method, c.base+path, c.token, in)
	if err != nil {
		return 0, nil, err
	}
	if out != nil {
		if err := decode(method, c.base+path, body, out); err != nil {
			return 0, nil, err
		}
	}
	return code, body, nil
}

// decode reads a 2xx answer's body into out.
func decode(method, target string, body []byte, out any) error {
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
	}
	return nil
}

// do sends one request and returns the body and code of a 2xx answer, or an
// *APIError naming the answer's code and its status and error fields.
func (c *Client) do(ctx context.Context, method, target, token string, in any) ([]byte, int, error) {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.agent != "" {
		req.Header.Set("User-Agent", c.agent)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, URL: target, Code: resp.StatusCode}
		var fields struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if json.Unmarshal(out, &fields) == nil {
			e.Status, e.Message = fields.Status, fields.Error
		}
		return nil, 0, e
	}
	return out, resp.StatusCode, nil
}
