package gateway

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/sale"
)

// The sale page (API.md, "Buyers in a browser"): GET /s/{sale_id} is HTML,
// CSS and a small script that drive the public API as a client would
// (page/page.js). The page is the same bytes for every sale (the script
// reads the sale from the URL), built once at start and again at a reload
// when it is a shop's template (http.page_template), and served from
// memory with an ETag: a revisit is a 304, and no page costs a Redis call
// but the first one of a sale the gateway has not seen (pageSales).

//go:embed page
var pageFiles embed.FS

// maxTemplateBytes bounds a shop's template file.
const maxTemplateBytes = 1 << 20

// page is the sale page's bytes and the headers that go with them.
type page struct {
	body []byte
	etag []byte // quoted, as sent
	// csp is the built-in page's Content-Security-Policy, which allows its
	// own inline style and script and calls to its own origin only; a
	// shop's template gets none of ours.
	csp []byte
}

// pageData is what a template is executed with: the built-in page's
// stylesheet and script, to inline.
type pageData struct {
	Style  template.CSS
	Script template.JS
}

// buildPage executes the template at path, or the built-in one when path
// is empty, into the page's bytes. A template that does not parse, fails to
// execute or leaves out the script ({{.Script}}) is an error that says so.
func buildPage(path string) (*page, error) {
	style, err := pageFiles.ReadFile("page/page.css")
	if err != nil {
		return nil, err
	}
	script, err := pageFiles.ReadFile("page/page.js")
	if err != nil {
		return nil, err
	}
	src, name := []byte(nil), "built-in"
	if path == "" {
		if src, err = pageFiles.ReadFile("page/page.html"); err != nil {
			return nil, err
		}
	} else {
		name = path
		if src, err = readTemplate(path); err != nil {
			return nil, err
		}
	}
	t, err := template.New(name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, pageData{Style: template.CSS(style), Script: template.JS(script)}); err != nil {
		return nil, err
	}
	if !bytes.Contains(b.Bytes(), script) {
		return nil, fmt.Errorf("%s: the page's script is missing: put <script>{{.Script}}</script> in the template", name)
	}
	sum := sha256.Sum256(b.Bytes())
	p := &page{body: b.Bytes(), etag: []byte(`"` + hex.EncodeToString(sum[:12]) + `"`)}
	if path == "" {
		p.csp = []byte("default-src 'none'; style-src " + cspHash(style) + "; script-src " + cspHash(script) +
			"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	}
	return p, nil
}

func readTemplate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxTemplateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(src) > maxTemplateBytes {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxTemplateBytes)
	}
	return src, nil
}

func cspHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// pageError is a template error as a setting's error: the process exits 2
// naming the setting at start, and a reload answers 422 naming it.
func pageError(err error) error {
	return &config.SettingError{Env: "FLASHGATE_PAGE_TEMPLATE", Key: "http.page_template", Err: err}
}

// salePages serves the sale page and the page of an unknown sale.
type salePages struct {
	path    string // a shop's template; "" for the built-in page
	cur     atomic.Pointer[page]
	missing []byte
	known   pageSales
}

func newSalePages(path string) (*salePages, error) {
	p, err := buildPage(path)
	if err != nil {
		return nil, pageError(err)
	}
	missing, err := pageFiles.ReadFile("page/missing.html")
	if err != nil {
		return nil, err
	}
	sp := &salePages{path: path, missing: missing, known: pageSales{m: map[string]int64{}}}
	sp.cur.Store(p)
	return sp, nil
}

// build builds the page again from a shop's template, for a reload; the
// built-in page never changes.
func (sp *salePages) build() (*page, error) {
	if sp.path == "" {
		return sp.cur.Load(), nil
	}
	p, err := buildPage(sp.path)
	if err != nil {
		return nil, pageError(err)
	}
	return p, nil
}

// use makes p the page served from now on.
func (sp *salePages) use(p *page) { sp.cur.Store(p) }

// The page's headers, as bytes: serving it converts nothing.
var (
	htmlType       = []byte("text/html; charset=utf-8")
	hdrETag        = []byte("ETag")
	hdrCache       = []byte("Cache-Control")
	hdrCSP         = []byte("Content-Security-Policy")
	hdrNoSniff     = []byte("X-Content-Type-Options")
	hdrReferrer    = []byte("Referrer-Policy")
	hdrIfNoneMatch = []byte("If-None-Match")
	pageCache      = []byte("no-cache") // kept, but asked again: a 304 while it holds
	pageNoSniff    = []byte("nosniff")
	pageReferrer   = []byte("no-referrer")
)

// servePage answers GET /s/{sale}: the page, a 304 to a revisit of the same
// bytes, or the page of an unknown sale (404).
func (s *Server) servePage(ctx *fasthttp.RequestCtx, saleB []byte) {
	h := &ctx.Response.Header
	h.SetCanonical(hdrNoSniff, pageNoSniff)
	h.SetCanonical(hdrReferrer, pageReferrer)
	h.SetContentTypeBytes(htmlType)
	exists, err := s.pages.known.exists(saleB, time.Now(), s.cfg.Cache.ClosedTTL, func() (bool, error) {
		rctx, cancel := s.redisCtx()
		defer cancel()
		return s.sales.Exists(rctx, string(saleB))
	})
	if err == nil && !exists {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.Response.SetBodyRaw(s.pages.missing)
		return
	}
	// Redis not answering is no reason to refuse the page: its own calls
	// will say so, and retry.
	p := s.pages.cur.Load()
	h.SetCanonical(hdrETag, p.etag)
	h.SetCanonical(hdrCache, pageCache)
	if p.csp != nil {
		h.SetCanonical(hdrCSP, p.csp)
	}
	if inm := ctx.Request.Header.PeekBytes(hdrIfNoneMatch); len(inm) > 0 && bytes.Contains(inm, p.etag) {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		ctx.Response.SkipBody = true
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(p.body)
}

// pageSales remembers which sales exist, for the page: a sale once seen
// stays known (a sale is never deleted), an unknown one for the closed-sale
// memory's TTL or until an announcement of it (a sale created). A miss asks Redis once for all the requests that meet it
// at the same time. It holds at most maxPageSales entries and starts again
// empty beyond, so that requests for made-up ids cannot grow it.
type pageSales struct {
	mu    sync.RWMutex
	m     map[string]int64 // sale → 0: exists; else unknown until (Unix ms)
	group singleflight.Group
}

const maxPageSales = 1 << 16

func (k *pageSales) exists(id []byte, now time.Time, unknownFor time.Duration, lookup func() (bool, error)) (bool, error) {
	k.mu.RLock()
	until, ok := k.m[string(id)]
	k.mu.RUnlock()
	if ok && (until == 0 || now.UnixMilli() < until) {
		return until == 0, nil
	}
	key := string(id)
	v, err, _ := k.group.Do(key, func() (any, error) {
		found, err := lookup()
		if err != nil {
			return false, err
		}
		var until int64
		if !found {
			if unknownFor <= 0 {
				return false, nil
			}
			until = now.Add(unknownFor).UnixMilli()
		}
		k.mu.Lock()
		if len(k.m) >= maxPageSales {
			clear(k.m)
		}
		k.m[key] = until
		k.mu.Unlock()
		return found, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// Changed forgets what is remembered of id (sale.Listener): a sale just
// created is announced.
func (k *pageSales) Changed(id string) {
	k.mu.Lock()
	delete(k.m, id)
	k.mu.Unlock()
}

// Missed forgets everything, since announcements may have been missed.
func (k *pageSales) Missed(bool) {
	k.mu.Lock()
	clear(k.m)
	k.mu.Unlock()
}

var _ sale.Listener = (*pageSales)(nil)
