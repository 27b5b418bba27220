package trace

import (
	"encoding/binary"
	"testing"
)

// TestResyncAtNextTimeHigh: after a record that does not decode, Resync
// skips to the next TIME_HIGH record (4-byte aligned, not earlier in time)
// and the records after it decode with their full time stamps.
func TestResyncAtNextTimeHigh(t *testing.T) {
	var w Writer
	tick := func(tm uint64, id uint64) {
		t.Helper()
		if err := w.Write(MajorTprof, TprofTick, LayoutFixed, tm, []uint64{1, 1, id, 0}, ""); err != nil {
			t.Fatal(err)
		}
	}
	tick(5<<32+10, 1)
	bad := len(w.Buf)
	tick(5<<32+20, 2)
	tick(5<<32+30, 3)
	// A fake TIME_HIGH going back in time inside an opaque user record,
	// then one at an odd offset: neither is a place to start again.
	var fake [TimeHighSize]byte
	copy(fake[:], timeHighHead[:])
	binary.LittleEndian.PutUint32(fake[HeaderSize:], 4)
	if err := w.Write(0x100, 1, LayoutBytes, 5<<32+40, nil, string(fake[:])+"x"+string(timeHighHead[:])); err != nil {
		t.Fatal(err)
	}
	tick(6<<32+50, 4) // preceded by a real TIME_HIGH (6)
	tick(6<<32+60, 5)
	binary.LittleEndian.PutUint16(w.Buf[bad:], TypeLen(LayoutFixed, 4)) // tick 2: length 4 < header

	r := NewReader(w.Buf, 1000, 0, false, 0)
	var got []uint64
	var times []uint64
	skips := 0
	var rec Record
	for {
		ok, err := r.NextInto(&rec)
		if err != nil {
			skipped, found := r.Resync()
			skips++
			if !found || skipped <= 0 || skipped%4 != 0 {
				t.Fatalf("Resync: %d bytes, found %v", skipped, found)
			}
			continue
		}
		if !ok {
			break
		}
		if rec.Major == MajorTprof {
			got = append(got, rec.Field(2))
			times = append(times, rec.Time)
		}
	}
	if skips != 1 || len(got) != 3 || got[0] != 1 || got[1] != 4 || got[2] != 5 {
		t.Fatalf("ticks %v after %d resyncs, want [1 4 5] after 1", got, skips)
	}
	if times[1] != 6<<32+50 || times[2] != 6<<32+60 {
		t.Fatalf("times after resync %x, want the high half 6", times)
	}
	if !IsTimeHigh(w.Buf) || IsTimeHigh(w.Buf[TimeHighSize:]) {
		t.Fatal("IsTimeHigh")
	}
}

// TestResyncWithoutTimeHigh: with no TIME_HIGH record after the bad one,
// Resync ends the buffer and says how much it skipped.
func TestResyncWithoutTimeHigh(t *testing.T) {
	var w Writer
	for i := uint64(0); i < 3; i++ {
		if err := w.Write(MajorTprof, TprofTick, LayoutFixed, 10+i, []uint64{1, 1, i, 0}, ""); err != nil {
			t.Fatal(err)
		}
	}
	w.Buf[TimeHighSize] = 0xff // the first tick: layout 0xf is unknown
	w.Buf[TimeHighSize+1] = 0xff
	r := NewReader(w.Buf, 0, 0, false, 0)
	var rec Record
	if ok, err := r.NextInto(&rec); !ok || err != nil {
		t.Fatalf("TIME_HIGH: %v %v", ok, err)
	}
	if _, err := r.NextInto(&rec); err == nil {
		t.Fatal("the damaged tick decoded")
	}
	skipped, found := r.Resync()
	if found || skipped != len(w.Buf)-TimeHighSize {
		t.Fatalf("Resync: %d bytes, found %v; want %d, false", skipped, found, len(w.Buf)-TimeHighSize)
	}
	if ok, err := r.NextInto(&rec); ok || err != nil {
		t.Fatalf("after Resync at the end: %v %v", ok, err)
	}
}

// TestNextOf: a reader taking one code's records undecoded gets the
// same records and times as NextInto, takes nothing else (other codes,
// other layouts, too short, cut at the end, padding), and leaves those
// to NextInto where they were.
func TestNextOf(t *testing.T) {
	var w Writer
	write := func(major uint16, minor uint32, layout int, tm uint64, f []uint64, s string) {
		t.Helper()
		if err := w.Write(major, minor, layout, tm, f, s); err != nil {
			t.Fatal(err)
		}
	}
	write(MajorTprof, TprofTick, LayoutFixed, 3<<32+1, []uint64{7, 8, 0xffffffff81000010, 1}, "")
	write(MajorTprof, TprofEvent, LayoutFixed, 3<<32+2, []uint64{7, 8, 0x401000, 0, 2}, "")
	write(MajorTprof, TprofTick, LayoutFixed, 4<<32+3, []uint64{9, 10, 0x402000, 0}, "") // after a TIME_HIGH
	write(MajorTprof, TprofTick, LayoutWords, 4<<32+4, []uint64{9, 10, 0x403000, 0}, "")
	write(MajorMTE, MTEFork, LayoutFixed, 4<<32+5, []uint64{1, 2, 3}, "")
	short := len(w.Buf)
	write(MajorTprof, TprofTick, LayoutFixed, 4<<32+6, []uint64{9, 10, 0x404000, 0}, "")
	write(MajorTprof, TprofTick, LayoutFixed, 4<<32+7, []uint64{11, 12, 0x405000, 0}, "")
	cut := len(w.Buf) - 4
	// the sixth record claims 16 bytes: a header and one field, no ip
	binary.LittleEndian.PutUint16(w.Buf[short:], TypeLen(LayoutFixed, 16))
	offs, size, ok := FieldOffsets(MajorTprof, TprofTick)
	if !ok || size != 32 || len(offs) < 3 || offs[2] != 20 {
		t.Fatalf("FieldOffsets: TPROF_TICK size %d offsets %v (%v), want 32 and the ip at 20", size, offs, ok)
	}
	ipAt := offs[2]
	if len(offs) > 4 {
		t.Fatal("FieldOffsets gave a fifth field of TPROF_TICK")
	}
	type got struct {
		fast bool
		time uint64
		ip   uint64
	}
	var out []got
	r := NewReader(w.Buf[:cut], 0, 0, false, 0)
	var rec Record
	for {
		if b, tm, ok := r.NextOf(MajorTprof, TprofTick, LayoutFixed, size); ok {
			out = append(out, got{true, tm, binary.LittleEndian.Uint64(b[ipAt:])})
			continue
		}
		ok, err := r.NextInto(&rec)
		if err != nil {
			out = append(out, got{false, 0, 0}) // reported
			break
		}
		if !ok {
			break
		}
		if rec.Major != MajorSys {
			out = append(out, got{false, rec.Time, rec.Field(2)})
		}
	}
	want := []got{
		{true, 3<<32 + 1, 0xffffffff81000010},
		{false, 3<<32 + 2, 0x401000},
		{true, 4<<32 + 3, 0x402000},
		{false, 4<<32 + 4, 0}, // words: field 2 is the ip's low half
		{false, 4<<32 + 5, 3},
		{false, 0, 0}, // too short for its fields: NextInto reports it
	}
	out[3].ip = 0
	if len(out) != len(want) {
		t.Fatalf("records %+v, want %+v", out, want)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, out[i], want[i])
		}
	}
	// the last tick, cut by 4 bytes, is not taken (NextInto reports it)
	r = NewReader(w.Buf[len(w.Buf)-32:cut], 0, 0, false, 0)
	if _, _, ok := r.NextOf(MajorTprof, TprofTick, LayoutFixed, size); ok {
		t.Error("NextOf took a record cut at the end of the buffer")
	}
	if _, err := r.NextInto(&rec); err == nil {
		t.Error("NextInto did not report the cut record")
	}
	// a call stack: its bytes where NextInto finds them
	w = Writer{}
	pcs := "\x10\x00\x00\x81\xff\xff\xff\xff\x20\x10\x40\x00\x00\x00\x00\x00"
	write(MajorUnwind, UnwindTick, LayoutBytes, 5, []uint64{7, 8, 1 << UnwindKernShift}, pcs)
	_, usize, _ := FieldOffsets(MajorUnwind, UnwindTick)
	r = NewReader(w.Buf, 0, 0, false, 0)
	if ok, err := r.NextInto(&rec); !ok || err != nil || rec.Major != MajorSys {
		t.Fatalf("the writer's first record: %+v %v %v, want its TIME_HIGH", rec, ok, err)
	}
	at := r.off
	b, _, ok := r.NextOf(MajorUnwind, UnwindTick, LayoutBytes, usize)
	if !ok {
		t.Fatal("NextOf did not take the UNWIND record")
	}
	if got, ok := TrailingBytes(b, usize); !ok || string(got) != pcs {
		t.Errorf("TrailingBytes: %q %v, want %q", got, ok, pcs)
	}
	if ok, err := NewReader(w.Buf[at:], 0, 0, false, 0).NextInto(&rec); !ok || err != nil || rec.Str != pcs {
		t.Errorf("NextInto: %q %v %v, want %q", rec.Str, ok, err, pcs)
	}
	binary.LittleEndian.PutUint32(b[usize:], uint32(len(b)-usize-3)) // one byte too many
	if _, ok := TrailingBytes(b, usize); ok {
		t.Error("TrailingBytes took a count that overruns the record")
	}
	if _, ok := TrailingBytes(b[:usize+2], usize); ok {
		t.Error("TrailingBytes took a record without room for the count")
	}
	// padding (zeros after the last record) is not a record
	r = NewReader(make([]byte, 64), 0, 0, false, 0)
	if _, _, ok := r.NextOf(MajorTprof, TprofTick, LayoutFixed, size); ok {
		t.Error("NextOf took padding")
	}
	if ok, err := r.NextInto(&rec); ok || err != nil {
		t.Errorf("padding: NextInto %v %v, want the end", ok, err)
	}
}

// A stream read in pieces (Refill at record boundaries, as a reader of a
// large buffer does) gives the records one reader gives, times included:
// the time-high value of an earlier piece holds in the next.
func TestRefill(t *testing.T) {
	var w Writer
	for i := range 40 {
		tm := uint64(i/10)<<32 | uint64(100+i) // a new time-high every 10 records
		if err := w.Write(MajorTprof, TprofTick, LayoutFixed, tm, []uint64{1, 2, uint64(0x1000 + i), 0}, ""); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(r *Reader, until int) (recs []Record) {
		for r.Buffered() > until {
			rec, ok, err := r.Next()
			if err != nil || !ok {
				t.Fatalf("record %d: ok %v, %v", len(recs), ok, err)
			}
			recs = append(recs, rec)
		}
		return recs
	}
	want := readAll(NewReader(w.Buf, 0, 0, false, 0), 0)
	if len(want) < 44 || want[len(want)-1].Time != 3<<32|139 {
		t.Fatalf("%d records, the last at %#x: want 40 ticks and 4 TIME_HIGH records, the last at 0x3_0000008b", len(want), want[len(want)-1].Time)
	}
	bounds := []int{0}
	r := NewReader(w.Buf, 0, 0, false, 0)
	for r.Buffered() > 0 {
		r.Next()
		bounds = append(bounds, len(w.Buf)-r.Buffered())
	}
	for _, p := range bounds {
		r := NewReader(w.Buf[:p], 0, 0, false, 0)
		got := readAll(r, 0)
		r.Refill(w.Buf[p:], int64(p))
		if r.Offset() != int64(p) {
			t.Fatalf("split at %d: offset %d after Refill", p, r.Offset())
		}
		got = append(got, readAll(r, 0)...)
		if len(got) != len(want) {
			t.Fatalf("split at %d: %d records, want %d", p, len(got), len(want))
		}
		for i := range got {
			if got[i].Time != want[i].Time || got[i].Major != want[i].Major || got[i].Field(2) != want[i].Field(2) {
				t.Fatalf("split at %d: record %d at %#x (major %#x, ip %#x), want %#x (%#x, %#x)", p, i, got[i].Time, got[i].Major, got[i].Field(2), want[i].Time, want[i].Major, want[i].Field(2))
			}
		}
	}
}
