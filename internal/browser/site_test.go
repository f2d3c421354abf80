package browser_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The tests' pages, served by an httptest server on 127.0.0.1.

// pageHTML shows the buyer its localStorage holds (set from ?buyer= when
// given), counts clicks of its button, and fetches ?api= when given,
// writing what came of it.
const pageHTML = `<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kit</title><link rel="icon" href="data:,"></head>
<body>
<p id="buyer"></p>
<button id="more" data-state="idle">more</button>
<p id="clicks">0</p>
<p id="fetched"></p>
<script>
const q = new URLSearchParams(location.search);
if (q.get('buyer')) localStorage.setItem('buyer', q.get('buyer'));
document.getElementById('buyer').textContent = 'buyer ' + (localStorage.getItem('buyer') || 'none');
const more = document.getElementById('more');
more.addEventListener('click', () => {
  const c = document.getElementById('clicks');
  c.textContent = String(Number(c.textContent) + 1);
  more.dataset.state = 'clicked';
});
if (q.get('api')) {
  fetch(q.get('api'))
    .then(r => r.text())
    .then(t => { document.getElementById('fetched').textContent = 'answered ' + t; },
          e => { document.getElementById('fetched').textContent = 'refused ' + e.name; });
}
</script>
</body></html>`

// brokenHTML logs an error, then throws one nobody catches.
const brokenHTML = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head>
<body><p id="before">before</p>
<script>
console.error('the kit', 'logs', 42);
document.getElementById('before').textContent = 'ran';
undefinedFunctionOfTheKit();
</script></body></html>`

// site serves pageHTML at / and brokenHTML at /broken on 127.0.0.1; it is
// closed when the test ends.
func site(t testing.TB) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(pageHTML))
	})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(brokenHTML))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
