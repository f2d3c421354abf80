// Command bare is the ceiling of `make bench`: a fasthttp server that
// answers every buy with the bytes flashgate would send, doing nothing else
// (no parsing, no Redis). The gateway's figures are reported against it.
//
// With -reply waiting it answers every request with a waiting buyer's
// queue view instead: the ceiling of the waiting room's polls; with -reply
// page, -size bytes of HTML: the ceiling of the sale page.
//
//	bare -addr 127.0.0.1:18090 -reply accepted|sold_out|waiting|page [-size N]
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address (loopback)")
	kind := flag.String("reply", "accepted", "accepted, sold_out, waiting or page")
	size := flag.Int("size", 8192, "the page's size in bytes, with -reply page")
	var headers headerList
	flag.Var(&headers, "header", `a header of every answer, "Name: value" (repeatable): the page's own`)
	flag.Parse()

	code, body := 202, []byte(`{"status":"accepted","order_id":"0123456789abcdef000000000001","sale_id":"bench","user_id":"u1234567890-12345","quantity":1}`)
	switch *kind {
	case "accepted":
	case "sold_out":
		code, body = 410, []byte(`{"status":"sold_out"}`)
	case "waiting":
		code, body = 200, []byte(`{"status":"waiting","sale_id":"bench","user_id":"u1234567890-12345",`+
			`"ticket":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",`+
			`"position":123456,"ahead":123455,"eta_seconds":123456,"pass_until":null,"poll_after_ms":20000,"remaining":123456}`)
	case "page":
		if *size < 64 || *size > 1<<20 {
			log.Fatalf("-size %d: want 64 to 1048576 bytes", *size)
		}
		code, body = 200, []byte("<!doctype html>\n")
		for len(body) < *size-1 {
			body = append(body, ' ')
		}
		body = append(body, '\n')
	default:
		log.Fatalf("-reply %q: want accepted, sold_out, waiting or page", *kind)
	}
	contentType := "application/json"
	if *kind == "page" {
		contentType = "text/html; charset=utf-8"
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(code)
			ctx.Response.Header.SetContentType(contentType)
			for _, h := range headers {
				ctx.Response.Header.SetCanonical(h[0], h[1])
			}
			ctx.Response.SetBodyRaw(body)
		},
		NoDefaultServerHeader: true,
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		srv.Shutdown()
	}()
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}

// headerList is the -header flags, each a name and a value.
type headerList [][2][]byte

func (l *headerList) String() string { return fmt.Sprint(len(*l), " headers") }

func (l *headerList) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("%q: want Name: value", v)
	}
	*l = append(*l, [2][]byte{[]byte(strings.TrimSpace(name)), []byte(strings.TrimSpace(value))})
	return nil
}
