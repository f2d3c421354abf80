package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale"
)

const roomUsage = `usage: flashgate room verify --sale ID --seed S --prequeue N [--join J] [--commitment C]

Recomputes a random waiting room's lottery from its proof
(GET /v1/sales/ID/queue/proof, once the sale has started): the place of
the J-th buyer to join (the queue view's "join"), or with no --join every
place of the pre-queue, one "join place" line each. With --commitment (the
proof's commitment from before the start) it first checks that the seed is
the one committed to. It needs no server.`

// runRoom is `flashgate room verify`: the lottery's check (sale/lottery.go,
// docs/waiting-room.md), for a buyer or an auditor.
func runRoom(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		return fmt.Errorf("%w: %s", errUsage, roomUsage)
	}
	fs := flag.NewFlagSet("flashgate room verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	id := fs.String("sale", "", "the sale (required)")
	seed := fs.String("seed", "", "the proof's seed, hex (required)")
	prequeue := fs.Int64("prequeue", -1, "the proof's prequeue: the number of buyers shuffled (required)")
	join := fs.Int64("join", 0, "the buyer's join number (the queue view's join); 0: every place of the pre-queue")
	commitment := fs.String("commitment", "", "the proof's commitment, hex: check the seed against it first")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: %v\n\n%s", errUsage, err, roomUsage)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q\n\n%s", errUsage, fs.Arg(0), roomUsage)
	case !order.ValidID([]byte(*id)):
		return fmt.Errorf("%w: --sale: want a sale id\n\n%s", errUsage, roomUsage)
	case *prequeue < 0:
		return fmt.Errorf("%w: --prequeue: want the proof's prequeue, 0 or more\n\n%s", errUsage, roomUsage)
	case *join < 0:
		return fmt.Errorf("%w: --join: want a join number from 1\n\n%s", errUsage, roomUsage)
	}
	if _, err := sale.LotteryPlace(*seed, *prequeue, 1); err != nil {
		return fmt.Errorf("%w: --seed: %v", errUsage, err)
	}
	if *commitment != "" {
		raw, _ := hex.DecodeString(*seed)
		if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != *commitment {
			return fmt.Errorf("the seed of sale %s is not the one committed to: SHA-256 %x, commitment %s", *id, sum, *commitment)
		}
	}
	if *join > 0 {
		p, _ := sale.LotteryPlace(*seed, *prequeue, *join)
		_, err := fmt.Fprintln(stdout, p)
		return err
	}
	for j := int64(1); j <= *prequeue; j++ {
		p, _ := sale.LotteryPlace(*seed, *prequeue, j)
		if _, err := fmt.Fprintln(stdout, j, p); err != nil {
			return err
		}
	}
	return nil
}
