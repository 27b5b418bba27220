package trace

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"testing"
)

func TestRoundTripEveryCode(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var w Writer
	type want struct {
		major uint16
		minor uint32
		time  uint64
		vals  []uint64
		str   string
	}
	var wants []want
	tm := uint64(0xfffffff0) // crosses a 32-bit boundary: TIME_HIGH records must follow
	for _, s := range Specs() {
		if s.Major == MajorSys && s.Minor == SysTimeHigh {
			continue
		}
		vals := make([]uint64, len(s.Fields))
		for i, f := range s.Fields {
			v := rng.Uint64()
			if f.Width == 4 {
				v &= 0xffffffff
			}
			vals[i] = v
		}
		str := ""
		if s.Layout == LayoutString {
			str = "/usr/lib/x86_64-linux-gnu/libc.so.6"
		}
		tm += 7
		if err := w.Write(s.Major, s.Minor, s.Layout, tm, vals, str); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		wants = append(wants, want{s.Major, s.Minor, tm, vals, str})
	}
	// A user hook record with words and one with bytes.
	tm += 1 << 33
	if err := w.Write(0x123, 9, LayoutWords, tm, []uint64{1, 2, 3}, ""); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{0x123, 9, tm, []uint64{1, 2, 3}, ""})
	tm++
	if err := w.Write(0x124, 1, LayoutBytes, tm, nil, "payload\x00with nul"); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{0x124, 1, tm, nil, "payload\x00with nul"})

	r := NewReader(w.Buf, 0, 3, false, 0)
	highs := 0
	i := 0
	for {
		rec, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if rec.Major == MajorSys && rec.Minor == SysTimeHigh {
			highs++
			continue
		}
		if i >= len(wants) {
			t.Fatalf("extra record %+v", rec)
		}
		wt := wants[i]
		i++
		if rec.Major != wt.major || rec.Minor != wt.minor || rec.Time != wt.time || rec.Str != wt.str || rec.CPU != 3 {
			t.Fatalf("record %d: got %x/%x t=%x %q, want %x/%x t=%x %q", i, rec.Major, rec.Minor, rec.Time, rec.Str, wt.major, wt.minor, wt.time, wt.str)
		}
		for j, v := range wt.vals {
			if rec.Field(j) != v {
				t.Fatalf("%s field %d: got %x want %x", Format(&rec), j, rec.Field(j), v)
			}
		}
	}
	if i != len(wants) {
		t.Fatalf("decoded %d records, wrote %d", i, len(wants))
	}
	if highs != 3 {
		t.Fatalf("got %d TIME_HIGH records, want 3 (start, 32-bit carry, +2^33)", highs)
	}
}

func TestDecodeErrorsNameOffset(t *testing.T) {
	var w Writer
	if err := w.Write(MajorTprof, TprofTick, LayoutFixed, 5, []uint64{1, 2, 3, 0}, ""); err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), w.Buf...)
	cases := map[string][]byte{
		"truncated": good[:len(good)-3],
		"short len": append([]byte{2, 0}, good[2:]...),
	}
	for name, b := range cases {
		r := NewReader(b, 1000, 0, false, 0)
		var err error
		for {
			var ok bool
			_, ok, err = r.Next()
			if err != nil || !ok {
				break
			}
		}
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: want a DecodeError, got %v", name, err)
		}
		if de.Offset < 1000 {
			t.Fatalf("%s: offset %d does not include the base", name, de.Offset)
		}
	}
}

func TestRecordTooLarge(t *testing.T) {
	var w Writer
	err := w.Write(MajorMTE, MTESegment, LayoutString, 1, []uint64{1, 2, 3, 4, 5}, string(bytes.Repeat([]byte("x"), MaxRecordSize)))
	if err == nil {
		t.Fatal("a record larger than the maximum was accepted")
	}
	if len(w.Buf) != 0 {
		t.Fatalf("a failed write left %d bytes behind", len(w.Buf))
	}
}

func TestParseMajor(t *testing.T) {
	if m, err := ParseMajor("tprof"); err != nil || m != MajorTprof {
		t.Fatalf("tprof: %v %v", m, err)
	}
	if m, err := ParseMajor("0x8"); err != nil || m != MajorDispatch {
		t.Fatalf("0x8: %v %v", m, err)
	}
	if _, err := ParseMajor("bogus"); err == nil {
		t.Fatal("bogus accepted")
	}
	if _, err := ParseMajor("ptt"); err == nil {
		t.Fatal("a reserved type was accepted as available")
	}
	// ITrace is available (run.itrace enables exactly it).
	if m, err := ParseMajor("itrace"); err != nil || m != MajorITraceU {
		t.Fatalf("itrace: %v %v", m, err)
	}
}

func FuzzReader(f *testing.F) {
	var w Writer
	_ = w.Write(MajorMTE, MTESegment, LayoutString, 1<<32+5, []uint64{1, 0x400000, 0x1000, 0, 5}, "/bin/true")
	_ = w.Write(MajorTprof, TprofTick, LayoutFixed, 1<<32+6, []uint64{1, 2, 0x401000, 0}, "")
	f.Add(w.Buf)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(b, 0, 0, false, 0)
		for n := 0; n < 100000; n++ {
			rec, ok, err := r.Next()
			if err != nil {
				var de *DecodeError
				if !errors.As(err, &de) || de.Offset < 0 || de.Offset > int64(len(b)) {
					t.Fatalf("error without a valid offset: %v", err)
				}
				return
			}
			if !ok {
				return
			}
			_ = Format(&rec)
		}
	})
}

func TestEveryCodeIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/trace-format.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Specs() {
		row := fmt.Sprintf("| 0x%02x | 0x%x | %s |", s.Major, s.Minor, s.Name)
		if !bytes.Contains(doc, []byte(row)) {
			t.Errorf("docs/trace-format.md lacks the row for %s (%q)", s.Name, row)
		}
	}
}

func TestUserRecordWordsOrBytes(t *testing.T) {
	var w Writer
	if err := w.Write(0x100, 1, LayoutBytes, 1, []uint64{7}, "x"); err == nil {
		t.Fatal("a user record with words and bytes was accepted: its words could not be told from its byte count")
	}
	if err := w.Write(0x100, 1, LayoutBytes, 1, nil, "hello"); err != nil {
		t.Fatal(err)
	}
	r := NewReader(w.Buf, 0, 0, false, 0)
	for {
		rec, ok, err := r.Next()
		if err != nil || !ok {
			t.Fatalf("no user record: %v", err)
		}
		if rec.Major == 0x100 {
			if rec.Str != "hello" {
				t.Fatalf("bytes %q", rec.Str)
			}
			return
		}
	}
}

// Lookup finds every code of the table, the small ones in its arrays:
// those of the facility's records, UNWIND (one a sample with call
// stacks) among them, are found without a map lookup.
func TestLookupFast(t *testing.T) {
	for i := range specs {
		s := &specs[i]
		if got := Lookup(s.Major, s.Minor); got != s {
			t.Errorf("Lookup(0x%x, %d) = %v, want %s", s.Major, s.Minor, got, s.Name)
		}
	}
	for _, c := range []struct {
		major uint16
		minor uint32
	}{{MajorTprof, TprofTick}, {MajorUnwind, UnwindTick}, {MajorUnwind, UnwindSwitch}, {MajorDispatch, 1}} {
		in := c.major < fastMajors && (c.minor < 8 && fast[c.major][c.minor] != nil ||
			c.minor <= highMinor && c.minor > highMinor-8 && fastHigh[c.major][highMinor-c.minor] != nil)
		if !in {
			t.Errorf("code 0x%x/0x%x is not in Lookup's arrays", c.major, c.minor)
		}
	}
}

func BenchmarkLookupUnwind(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if Lookup(MajorUnwind, UnwindTick) == nil {
			b.Fatal("no UNWIND")
		}
	}
}
