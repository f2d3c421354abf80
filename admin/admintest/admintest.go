// Package admintest is a stand-in for a gateway's admin API (and its
// /readyz) that records what it receives, for testing clients of the API:
// the admin package and `flashgate admin`. It answers what it is told to,
// not what a gateway would; the API itself is tested against real Redis in
// gateway/.
package admintest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// OK is the answer to a request the stand-in was told nothing about.
const OK = `{"status":"ok","sale_id":"s1","stock":10}`

// Answer is a status code and a body.
type Answer struct {
	Code int
	Body string
}

// Request is what the stand-in received.
type Request struct {
	Method, Path, Body, Auth string
	Agent                    string // User-Agent; not compared by Matches
}

// Matches reports whether r is w: the same method, escaped path and
// Authorization, and the same body as a JSON value (key order aside).
func (r Request) Matches(w Request) bool {
	return r.Method == w.Method && r.Path == w.Path && r.Auth == w.Auth && sameJSON(r.Body, w.Body)
}

func sameJSON(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Server is the stand-in. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []Request
	answers map[string]Answer
	other   Answer
}

// NewServer starts a stand-in on 127.0.0.1 that answers "METHOD PATH" (the
// escaped path) as answers says and anything else 200 with OK; t's cleanup
// closes it. A request with a body not sent as application/json fails t.
func NewServer(t testing.TB, answers map[string]Answer) *Server {
	t.Helper()
	s := &Server{answers: map[string]Answer{}, other: Answer{http.StatusOK, OK}}
	for k, a := range answers {
		s.answers[k] = a
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: body sent as %q", r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"))
		}
		key := r.Method + " " + r.URL.EscapedPath()
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{r.Method, r.URL.EscapedPath(), string(body), r.Header.Get("Authorization"), r.Header.Get("User-Agent")})
		a, ok := s.answers[key]
		if !ok {
			a = s.other
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.Code)
		io.WriteString(w, a.Body)
	}))
	t.Cleanup(s.Close)
	return s
}

// Set makes the stand-in answer "METHOD PATH" with a from now on.
func (s *Server) Set(key string, a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[key] = a
}

// Otherwise makes the stand-in answer a to what it was told nothing about.
func (s *Server) Otherwise(a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.other = a
}

// Requests returns what the stand-in has received, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Check fails t unless the stand-in received exactly want, in order (see
// Request.Matches).
func (s *Server) Check(t testing.TB, want []Request) {
	t.Helper()
	got := s.Requests()
	if len(got) != len(want) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	for i := range got {
		if !got[i].Matches(want[i]) {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
