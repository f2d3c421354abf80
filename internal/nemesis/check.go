package nemesis

import (
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is porcupine's answer for one sale's history.
type Verdict struct {
	Sale   string
	Result porcupine.CheckResult
	Ops    int
	// Visualization is the path of porcupine's HTML picture of the
	// history, written when it is not linearizable ("" otherwise).
	Visualization string
	VisualizeErr  error
}

// Linearizable checks ops, one sale's resolved history, against the
// sale's model, within timeout (porcupine.Unknown past it). When the
// history is not linearizable it writes the visualization into dir.
func Linearizable(spec SaleSpec, ops []porcupine.Operation, timeout time.Duration, dir string) Verdict {
	ops = denseClients(ops)
	model := Model(spec)
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v := Verdict{Sale: spec.ID, Result: res, Ops: len(ops)}
	if res == porcupine.Illegal {
		v.Visualization = filepath.Join(dir, "sale-"+spec.ID+".html")
		v.VisualizeErr = porcupine.VisualizePath(model, info, v.Visualization)
	}
	return v
}

// denseClients renumbers the operations' clients from 0, as porcupine's
// visualization wants them, giving each expiry (client -1) a line of its
// own.
func denseClients(ops []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	ids := map[int]int{}
	for i, op := range ops {
		if op.ClientId >= 0 {
			if _, ok := ids[op.ClientId]; !ok {
				ids[op.ClientId] = len(ids)
			}
		}
		out[i] = op
	}
	next := len(ids)
	for i := range out {
		if out[i].ClientId < 0 {
			out[i].ClientId = next
			next++
		} else {
			out[i].ClientId = ids[out[i].ClientId]
		}
	}
	return out
}
