package gateway

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/sale"
)

// serveProof answers GET /v1/sales/{sale}/queue/proof, the lottery's proof
// of a random room (sale/lottery.go): {"status":"ok","sale_id","commitment"}
// from the room's creation, with "seed" and "prequeue" once the pre-queue is
// sealed at the start. It is answered from the gateway's memory of the
// room, as a poll is; a sale without a random room is 409 conflict.
func (s *Server) serveProof(ctx *fasthttp.RequestCtx, saleB []byte) {
	rm, _, ok := s.heldRoom(ctx, saleB, time.Now())
	if !ok {
		return
	}
	if rm.Mode != sale.RoomRandom {
		write(ctx, replyNoRoom)
		return
	}
	b := append([]byte(nil), `{"status":"ok","sale_id":"`...)
	b = append(b, rm.Sale...)
	b = append(b, `","commitment":"`...)
	b = append(b, rm.Key.Commitment()...)
	b = append(b, '"')
	if rm.Prequeue >= 0 {
		b = append(b, `,"seed":"`...)
		b = append(b, rm.Key.Seed()...)
		b = append(b, `","prequeue":`...)
		b = strconv.AppendInt(b, rm.Prequeue, 10)
	}
	write(ctx, reply{code: 200, body: append(b, '}')})
}
