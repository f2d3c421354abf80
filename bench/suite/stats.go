package main

// Figures read from servers and summed up over runs.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// medianOf returns the median of vs (0 for none).
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	sorted := slices.Clone(vs)
	slices.Sort(sorted)
	if n := len(sorted); n%2 == 0 {
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return sorted[len(sorted)/2]
}

// medianOfRuns is the median of f over runs, and the smallest and largest.
func medianOfRuns[R any](runs []R, f func(R) float64) (mid, lo, hi float64) {
	if len(runs) == 0 {
		return 0, 0, 0
	}
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return medianOf(v), slices.Min(v), slices.Max(v)
}

// spread writes mid, and its range in brackets when lo and hi differ.
func spread(mid, lo, hi float64, format string) string {
	if lo == hi {
		return fmt.Sprintf(format, mid)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", mid, lo, hi)
}

// eachRun lists the figures of each run, in the order run.
func eachRun(v []float64, format string) string { return joinWith(v, format, ", ") }

// joinFloats joins the figures with " + " (a sum's parts).
func joinFloats(v []float64, format string) string { return joinWith(v, format, " + ") }

func joinWith(v []float64, format, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, sep)
}

// cmdCost is one Redis command's share per order.
type cmdCost struct{ calls, usec float64 }

// parseCommandStats reads INFO commandstats
// ("cmdstat_evalsha:calls=3,usec=12,usec_per_call=4.00,...") into each
// command's calls and µs per order.
func parseCommandStats(info string, orders int64) map[string]cmdCost {
	m := map[string]cmdCost{}
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var c cmdCost
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				c.calls = n / float64(orders)
			case "usec":
				c.usec = n / float64(orders)
			}
		}
		m[strings.ToUpper(strings.TrimPrefix(name, "cmdstat_"))] = c
	}
	return m
}

// infoValue is one field of an INFO answer, "" when absent.
func infoValue(info, name string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// replicaState reads a primary's INFO replication: the state and offset of
// the replica on addr ("" when it is not listed).
func replicaState(info, addr string) (state, offset string) {
	for i := 0; ; i++ {
		v := infoValue(info, "slave"+strconv.Itoa(i))
		if v == "" {
			return "", ""
		}
		f := map[string]string{}
		for kv := range strings.SplitSeq(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			f[k] = val
		}
		if f["ip"]+":"+f["port"] == addr {
			return f["state"], f["offset"]
		}
	}
}
