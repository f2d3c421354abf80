package order

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func sampleOrders() []Order {
	return []Order{
		{OrderID: "o-1", SaleID: "s", UserID: "u@shop", Quantity: 1, ReservedAt: time.UnixMilli(1735689600123).UTC(), State: StateConfirmed, Seq: 1},
		{OrderID: "o-2", SaleID: "s", UserID: "v", Quantity: 1000, ReservedAt: time.UnixMilli(1735689600124).UTC(), State: StatePendingPayment,
			PayBy: time.UnixMilli(1735689720124).UTC(), Seq: 2, IdemKey: `key "with" spaces`},
		{OrderID: "o-3", SaleID: "s", UserID: "w", Quantity: 7, ReservedAt: time.UnixMilli(1).UTC(), State: StateExpired, Seq: 0},
	}
}

// A line reads back as the order it was made of, and as the JSON form of
// the same order reads; a batch of lines splits into them; the lines form
// is a fraction of the JSON form's bytes.
func TestLineRoundTrip(t *testing.T) {
	var lines [][]byte
	jsonBytes, lineBytes := 0, 0
	for _, o := range sampleOrders() {
		line, err := o.AppendLine(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(line)
		if err != nil || got != o {
			t.Fatalf("Unmarshal(%q) = %+v, %v; want %+v", line, got, err, o)
		}
		j, _ := o.Marshal()
		if viaJSON, err := Unmarshal(j); err != nil || viaJSON != got {
			t.Fatalf("the two forms of %+v differ: %+v, %v", o, viaJSON, err)
		}
		lines = append(lines, line)
		jsonBytes += len(j)
		lineBytes += len(line)
	}
	if lineBytes*3 > jsonBytes*2 {
		t.Errorf("lines %d bytes, JSON %d: the lines form is not smaller by a third", lineBytes, jsonBytes)
	}
	for n := 1; n <= len(lines); n++ {
		body := AppendBatch(nil, lines[:n]...)
		if !bytes.HasPrefix(body, []byte("1\t")) || bytes.Count(body, []byte{'\n'}) != n-1 {
			t.Fatalf("%d lines: body %q", n, body)
		}
		parts, err := Split(body)
		if err != nil || len(parts) != n {
			t.Fatalf("%d lines: %d parts, %v", n, len(parts), err)
		}
		for i, p := range parts {
			if o, err := Unmarshal(p); err != nil || o != sampleOrders()[i] {
				t.Fatalf("part %d: %+v, %v", i, o, err)
			}
		}
	}
}

// LineSize bounds what AppendLine appends, for the widest values a valid
// order can hold: the relay sizes one buffer per outbox entry by it.
func TestLineSizeBounds(t *testing.T) {
	wide := Order{OrderID: strings.Repeat("o", 64), SaleID: strings.Repeat("s", 64), UserID: strings.Repeat("u", 64),
		Quantity: MaxQuantity, ReservedAt: time.UnixMilli(math.MaxInt64 / 1_000_000).UTC(), State: StatePendingPayment,
		PayBy: time.UnixMilli(math.MaxInt64 / 1_000_000).UTC(), Seq: math.MaxInt64, IdemKey: strings.Repeat("k", 128)}
	for _, o := range append(sampleOrders(), wide) {
		if o.Validate() != nil {
			continue
		}
		line, err := o.AppendLine(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(line) > LineSize(o) {
			t.Errorf("line of %d bytes, LineSize %d: %q", len(line), LineSize(o), line)
		}
	}
	if wide.Validate() != nil {
		t.Errorf("the widest order is not valid (%v): the bound was not tested on it", wide.Validate())
	}
}

// A line that is not an order is refused with ErrMalformed; a batch with
// an empty line is refused whole; a bad line in a batch is for Unmarshal to
// refuse alone.
func TestLineRefused(t *testing.T) {
	good, _ := sampleOrders()[1].AppendLine(nil)
	fields := strings.Split(string(good), "\t")
	with := func(i int, v string) string {
		f := append([]string(nil), fields...)
		f[i] = v
		return strings.Join(f, "\t")
	}
	for name, line := range map[string]string{
		"too few fields":    strings.Join(fields[:9], "\t"),
		"too many fields":   string(good) + "\tx",
		"bad order id":      with(1, "o 1"),
		"empty sale":        with(2, ""),
		"quantity 0":        with(4, "0"),
		"quantity 1001":     with(4, "1001"),
		"quantity word":     with(4, "one"),
		"negative time":     with(5, "-5"),
		"time 0":            with(5, "0"),
		"unknown state":     with(6, "Paid"),
		"negative pay_by":   with(7, "-1"),
		"negative seq":      with(8, "-1"),
		"key with a ctl":    with(9, "k\x01"),
		"key too long":      with(9, strings.Repeat("k", MaxIdemKey+1)),
		"another version":   "2" + string(good[1:]),
		"only the version":  "1\t",
		"newline in a line": with(3, "u\nv"),
	} {
		if o, err := Unmarshal([]byte(line)); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Unmarshal(%q) = %+v, %v; want ErrMalformed", name, line, o, err)
		}
	}
	for _, body := range []string{string(good) + "\n", string(good) + "\n\n" + string(good), "1\t\n"} {
		if _, err := Split([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Split(%q): %v, want ErrMalformed", body, err)
		}
	}
	parts, err := Split([]byte(string(good) + "\n1\tbad"))
	if err != nil || len(parts) != 2 {
		t.Fatalf("a batch with one bad line: %d parts, %v", len(parts), err)
	}
	if _, err := Unmarshal(parts[1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("the bad line decoded: %v", err)
	}
}

// Whatever a line decodes to encodes to a line that decodes the same.
func FuzzUnmarshalLine(f *testing.F) {
	for _, o := range sampleOrders() {
		line, _ := o.AppendLine(nil)
		f.Add(line)
	}
	f.Add([]byte("1\to\ts\tu\t1\t1\tconfirmed\t0\t0\t"))
	f.Add([]byte("1\to\ts\tu\t+1\t01\tpaid\t-0\t9223372036854775807\t \t"))
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := Unmarshal(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		line, err := o.AppendLine(nil)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", body, err)
		}
		if o2, err := Unmarshal(line); err != nil || o2 != o {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", body, o2, err, o)
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	o := sampleOrders()[1]
	line, _ := o.AppendLine(nil)
	j, _ := o.Marshal()
	b.Run("lines", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Unmarshal(line); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Unmarshal(j); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	o := sampleOrders()[1]
	buf := make([]byte, 0, 256)
	b.Run("lines", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = o.AppendLine(buf[:0])
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.Marshal(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
