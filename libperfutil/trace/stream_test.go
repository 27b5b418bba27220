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
