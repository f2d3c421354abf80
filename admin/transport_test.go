package admin_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/admin/admintest"
	"github.com/flashgate/flashgate/internal/localstack"
)

func TestReady(t *testing.T) {
	srv := admintest.NewServer(t, map[string]admintest.Answer{"GET /readyz": reply(200, `{"status":"ok"}`)})
	srv.Otherwise(reply(404, `{"status":"not_found"}`))
	ctx := testCtx(t)

	body, err := admin.Ready(ctx, srv.URL+"/readyz")
	if err != nil || string(body) != `{"status":"ok"}` {
		t.Errorf("ready gateway: %q, %v", body, err)
	}
	srv.Set("GET /readyz", reply(503, `{"status":"unavailable","error":"draining"}`))
	_, err = admin.Ready(ctx, srv.URL+"/readyz")
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != 503 || ae.Status != "unavailable" || ae.Message != "draining" {
		t.Errorf("draining gateway: error %v", err)
	}
	if _, err := admin.Ready(ctx, srv.URL+"/nope"); err == nil {
		t.Errorf("a 404: no error")
	}
	for _, r := range srv.Requests() {
		if r.Auth != "" {
			t.Errorf("Ready sent a token to the public listener: %q", r.Auth)
		}
	}
}

// TestNoRedirect: a redirect is an answer, never followed with the token.
func TestNoRedirect(t *testing.T) {
	var elsewhere sync.Mutex
	hit := false
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		elsewhere.Lock()
		hit = true
		elsewhere.Unlock()
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL+"/admin/v1/sales/s1", http.StatusFound))
	defer redirect.Close()
	_, err := newClient(t, redirect.URL, testToken).Sale(testCtx(t), "s1")
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != http.StatusFound {
		t.Errorf("error %v, want an *APIError with 302", err)
	}
	elsewhere.Lock()
	defer elsewhere.Unlock()
	if hit {
		t.Errorf("the redirect was followed")
	}
}

func TestNoAnswer(t *testing.T) {
	addrs, err := localstack.FreeAddrs(1) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	addr := addrs[0]
	_, err = newClient(t, addr, testToken).Sale(testCtx(t), "s1")
	var ae *admin.APIError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("error %v, want a failure that is not an answer", err)
	}
}
