package gateway

import (
	"bytes"
	"strings"

	"github.com/flashgate/flashgate/order"
)

// Both listeners route the request target exactly as the client sent it
// (API.md, "Paths are routed exactly as sent"). fasthttp's ctx.Path() is
// decoded and cleaned: "%2F" becomes a '/', "//" one slash, "." and ".."
// segments are resolved, and a "#…" is cut off. Routed on that,
// "/v1/sales/x%2F..%2FREAL/orders" bought in REAL, so what a proxy or a WAF
// read in the URL was not the sale sold. The router below sees the request
// line's target itself, splits it on '/' and nothing else, and compares
// segments byte for byte:
//
//   - A literal segment ("v1", "orders") matches only itself: "orders%2F.."
//     is not "orders", "V1" is not "v1".
//   - An empty segment (a leading "//", a double slash, a trailing slash)
//     fits no parameter, so such a path matches no route: 404.
//   - A parameter segment is an id, checked by order.ValidID as it stands:
//     ids are taken literally, never percent-decoded. The id alphabet
//     (A-Z a-z 0-9 _ . : @ -) consists of characters a URI path carries
//     unescaped, so every valid id has one spelling in a path, itself. An
//     escape either decodes to a character outside the alphabet ("%2F",
//     "%20", "%00"), which API.md refuses with 400 anyway, or to one inside
//     it ("%61bc" for "abc"): a second spelling of an id, which is exactly
//     what lets a URL name one sale to a filter and another to us. So a '%'
//     in an id is itself outside the alphabet, and the id is 400, as is one
//     with '#', ';', '\' or any byte that is not a path character.
//   - '.' and ".." are never resolved; as ids they fail ValidID (400), in
//     place of a literal they match nothing (404).
//
// Checks run in this order: the shape of the path (404), the method (405),
// the ids (400). Matching allocates nothing: the sold-out buy passes here.

// route names one endpoint of either listener.
type route uint8

const (
	routeNone route = iota
	routeHealthz
	routeReadyz
	routeSaleView
	routeBuy
	routeOrderStatus
	routeMetrics
	routeScripts
	routeReload
	routePprof
	routeAdminSale
	routeAdminUpsert
	routeRestock
	routeLock
	routeUnlock
	routePay
	routeCancel
	routeJoin
	routePoll
	routePage
	routeProof
)

// endpoint is one row of a routing table: a method and a path pattern of
// literal segments and parameters ({sale}, {order}, {profile}).
type endpoint struct {
	route   route
	method  string
	pattern string
}

// publicRoutes routes the public listener.
var publicRoutes = newRouter([]endpoint{
	{routeBuy, "POST", "/v1/sales/{sale}/orders"},
	{routeSaleView, "GET", "/v1/sales/{sale}"},
	{routeOrderStatus, "GET", "/v1/sales/{sale}/orders/{order}"},
	{routeJoin, "POST", "/v1/sales/{sale}/queue"},
	{routePoll, "GET", "/v1/sales/{sale}/queue"},
	{routeProof, "GET", "/v1/sales/{sale}/queue/proof"},
	{routePage, "GET", "/s/{sale}"},
	{routeHealthz, "GET", "/healthz"},
	{routeHealthz, "GET", "/livez"},
	{routeReadyz, "GET", "/readyz"},
})

// adminRoutes routes the admin listener.
var adminRoutes = newRouter([]endpoint{
	{routeMetrics, "GET", "/metrics"},
	{routeAdminSale, "GET", "/admin/v1/sales/{sale}"},
	{routeAdminUpsert, "PUT", "/admin/v1/sales/{sale}"},
	{routeRestock, "POST", "/admin/v1/sales/{sale}/restock"},
	{routeLock, "POST", "/admin/v1/sales/{sale}/lock"},
	{routeUnlock, "POST", "/admin/v1/sales/{sale}/unlock"},
	{routePay, "POST", "/admin/v1/sales/{sale}/orders/{order}/pay"},
	{routeCancel, "POST", "/admin/v1/sales/{sale}/orders/{order}/cancel"},
	{routeScripts, "GET", "/admin/v1/scripts"},
	{routeReload, "POST", "/admin/v1/scripts/reload"},
	// net/http/pprof's paths under /admin: the index keeps its trailing
	// slash, as pprof's own links expect.
	{routePprof, "GET", "/admin/debug/pprof/"},
	{routePprof, "GET", "/admin/debug/pprof/{profile}"},
	{routePprof, "POST", "/admin/debug/pprof/symbol"},
})

// maxSegments bounds the segments of a routable path: more than any pattern
// has, so that a longer path is refused without being split further.
const maxSegments = 8

// param is what a segment of a pattern stands for.
type param uint8

const (
	literal param = iota
	paramSale
	paramOrder
	paramProfile // a pprof profile name: lowercase letters
)

type segment struct {
	lit   string // for a literal
	param param
}

// row is an endpoint with its pattern split into segments.
type row struct {
	endpoint
	segs  []segment
	allow string // every method of rows with this pattern, for a 405
}

// router matches a request against a table of endpoints. It is immutable
// once built and safe for concurrent use.
type router struct{ rows []row }

// match is what the router made of one request.
type match struct {
	// route is the endpoint; set also when only an id was refused (400).
	route route
	// The parameters, as subslices of the path: valid only while the
	// request is.
	sale, order, profile []byte
	// miss is the answer when the request is not routed (404, 405 or 400);
	// its code is 0 when it is.
	miss reply
	// allow lists the methods the path accepts, with a 405.
	allow string
}

// Fixed refusals of an id, built once so that a refused id allocates nothing.
var (
	replyBadSaleID  = badRequest(badSale)
	replyBadOrderID = badRequest(badOrder)
)

// newRouter compiles a table. A malformed pattern is a programming error
// and panics, at package initialisation.
func newRouter(eps []endpoint) *router {
	r := &router{rows: make([]row, len(eps))}
	for i, ep := range eps {
		if len(ep.pattern) == 0 || ep.pattern[0] != '/' {
			panic("gateway: route pattern " + ep.pattern + " does not start with /")
		}
		parts := strings.Split(ep.pattern[1:], "/")
		if len(parts) > maxSegments {
			panic("gateway: route pattern " + ep.pattern + " has too many segments")
		}
		rw := row{endpoint: ep, segs: make([]segment, len(parts))}
		for j, p := range parts {
			switch p {
			case "{sale}":
				rw.segs[j].param = paramSale
			case "{order}":
				rw.segs[j].param = paramOrder
			case "{profile}":
				rw.segs[j].param = paramProfile
			default:
				if strings.ContainsAny(p, "{}") {
					panic("gateway: unknown parameter in route pattern " + ep.pattern)
				}
				rw.segs[j].lit = p
			}
		}
		var methods []string
		for _, other := range eps {
			if other.pattern == ep.pattern {
				methods = append(methods, other.method)
				if other.method == "GET" {
					methods = append(methods, "HEAD")
				}
			}
		}
		rw.allow = strings.Join(methods, ", ")
		r.rows[i] = rw
	}
	return r
}

// match routes method and path (the raw path, as requestPath gives it).
func (r *router) match(method, path []byte) match {
	var buf [maxSegments][]byte
	segs, ok := splitPath(path, &buf)
	if !ok {
		return match{miss: replyNotFound}
	}
	var fit *row
	for i := range r.rows {
		rw := &r.rows[i]
		if !rw.fits(segs) {
			continue
		}
		if rw.accepts(method) {
			return rw.bind(segs)
		}
		if fit == nil {
			fit = rw
		}
	}
	if fit != nil {
		return match{miss: replyMethodNotAllowed, allow: fit.allow}
	}
	return match{miss: replyNotFound}
}

// splitPath cuts a path into the segments between its slashes, as they are:
// "/a//b/" is "a", "", "b", "". A path that does not start with '/', or has
// more than maxSegments segments, has none that any route could match.
func splitPath(path []byte, buf *[maxSegments][]byte) ([][]byte, bool) {
	if len(path) == 0 || path[0] != '/' {
		return nil, false
	}
	rest := path[1:]
	n := 0
	for {
		if n == maxSegments {
			return nil, false
		}
		i := bytes.IndexByte(rest, '/')
		if i < 0 {
			buf[n] = rest
			n++
			return buf[:n], true
		}
		buf[n] = rest[:i]
		n++
		rest = rest[i+1:]
	}
}

// fits reports whether segs have the row's shape: every literal equal, every
// parameter non-empty (an empty segment is a double or trailing slash).
func (rw *row) fits(segs [][]byte) bool {
	if len(segs) != len(rw.segs) {
		return false
	}
	for i, s := range rw.segs {
		switch s.param {
		case literal:
			if string(segs[i]) != s.lit {
				return false
			}
		case paramProfile:
			if !profileName(segs[i]) {
				return false
			}
		default:
			if len(segs[i]) == 0 {
				return false
			}
		}
	}
	return true
}

// accepts reports whether the row serves method; HEAD is served as GET.
func (rw *row) accepts(method []byte) bool {
	return string(method) == rw.method || rw.method == "GET" && string(method) == "HEAD"
}

// bind takes the parameters out of segs, which fit rw, and checks the ids.
func (rw *row) bind(segs [][]byte) match {
	m := match{route: rw.route}
	for i, s := range rw.segs {
		switch s.param {
		case paramSale:
			m.sale = segs[i]
			if !order.ValidID(m.sale) {
				m.miss = replyBadSaleID
				return m
			}
		case paramOrder:
			m.order = segs[i]
			if !order.ValidID(m.order) {
				m.miss = replyBadOrderID
				return m
			}
		case paramProfile:
			m.profile = segs[i]
		}
	}
	return m
}

func profileName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// requestPath is the path of a request target as the client sent it (the
// request line's target, fasthttp's Header.RequestURI), up to its query:
// never decoded or cleaned. An absolute-form target (RFC 9112 §3.2.2,
// "http://host/path", which a server must accept) gives the path after its
// authority. Read it before anything calls Request.RequestURI, which would
// rewrite the target from the cleaned URI.
func requestPath(target []byte) []byte {
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	if len(target) > 0 && target[0] == '/' {
		return target
	}
	if i := bytes.Index(target, schemeSep); i > 0 && httpScheme(target[:i]) {
		auth := target[i+len(schemeSep):]
		// The authority ends at the first '/', or at a '#', after which
		// a URL parser sees no path: what follows is then no path of ours
		// either (it starts with '#', so it matches nothing).
		if j := bytes.IndexAny(auth, "/#"); j >= 0 {
			return auth[j:]
		}
		return rootPath
	}
	return target // "*" or garbage: no route starts that way
}

var (
	schemeSep = []byte("://")
	rootPath  = []byte("/")
)

func httpScheme(b []byte) bool {
	return bytes.EqualFold(b, []byte("http")) || bytes.EqualFold(b, []byte("https"))
}
