// Command bare is the ceiling of `make bench`: a fasthttp server that
// answers every buy with the bytes flashgate would send, doing nothing else
// (no parsing, no Redis). The gateway's figures are reported against it.
//
// With -reply waiting it answers every request with a waiting buyer's
// queue view instead: the ceiling of the waiting room's polls.
//
//	bare -addr 127.0.0.1:18090 -reply accepted|sold_out|waiting
package main

import (
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address (loopback)")
	kind := flag.String("reply", "accepted", "accepted, sold_out or waiting")
	flag.Parse()

	code, body := 202, []byte(`{"status":"accepted","order_id":"0123456789abcdef000000000001","sale_id":"bench","user_id":"u1234567890-12345","quantity":1}`)
	switch *kind {
	case "accepted":
	case "sold_out":
		code, body = 410, []byte(`{"status":"sold_out"}`)
	case "waiting":
		code, body = 200, []byte(`{"status":"waiting","sale_id":"bench","user_id":"u1234567890-12345",`+
			`"ticket":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",`+
			`"position":123456,"ahead":123455,"eta_seconds":123456,"pass_until":null,"poll_after_ms":20000}`)
	default:
		log.Fatalf("-reply %q: want accepted, sold_out or waiting", *kind)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetStatusCode(code)
			ctx.Response.Header.SetContentType("application/json")
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
