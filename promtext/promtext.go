// Package promtext writes what github.com/VictoriaMetrics/metrics leaves
// to the code that writes a family of labelled series by hand (a series
// per sale, per listener): the family's metadata, the same lines and under
// the same switch (metrics.ExposeMetadata) as the library's own series, so
// that a page says HELP and TYPE of every family or of none; and the
// per-sale label.
package promtext

import "github.com/VictoriaMetrics/metrics"

// AppendMetadata appends to b the metadata of the family name, of type typ
// ("gauge", "counter"), as metrics writes it before a series of its own:
// "# HELP name\n# TYPE name typ\n" when metadata is exposed
// (metrics.ExposeMetadata(true), which the binary's main sets), nothing
// when it is not. Call it once per family in a page, before the family's
// first series. It is safe for concurrent use.
func AppendMetadata(b []byte, name, typ string) []byte {
	w := appender{b: b}
	metrics.WriteMetadataIfNeeded(&w, name, typ)
	return w.b
}

// AppendSale appends the start of a series of the family name labelled by
// sale, `name{sale="SALE"} `, for its value to follow. A valid sale id
// (order.ValidID) needs no escaping: the id rule allows no quote or
// backslash; the caller writes only those.
func AppendSale(b []byte, name, sale string) []byte {
	b = append(b, name...)
	b = append(b, `{sale="`...)
	b = append(b, sale...)
	return append(b, `"} `...)
}

// appender is an io.Writer that appends to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}
