package tracebuf

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"testing"

	"perfinsp/format/trace"
)

// write writes n tprof records whose ip field is a sequence number.
func write(t *testing.T, b *Buffer, from, n int) (written int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		ok, err := b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, uint64(i), []uint64{1, 1, uint64(i), 0}, "")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			written++
		}
	}
	return
}

// seqs decodes segments and returns the tprof sequence numbers and the LOST counts.
func seqs(t *testing.T, segs [][]byte) (out []uint64, lost uint64) {
	t.Helper()
	for _, s := range segs {
		r := trace.NewReader(s, 0, 0, false, 0)
		first := true
		for {
			rec, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if first && (rec.Major != trace.MajorSys || rec.Minor != trace.SysTimeHigh) {
				t.Fatalf("segment does not start with TIME_HIGH: %s", trace.Format(&rec))
			}
			first = false
			switch {
			case rec.Major == trace.MajorTprof:
				out = append(out, rec.Field(2))
			case rec.Major == trace.MajorSys && rec.Minor == trace.SysLost:
				lost += rec.Field(0)
			}
		}
	}
	return
}

const recSize = trace.HeaderSize + 20 // tprof tick

func TestNormalStopsWhenFull(t *testing.T) {
	b, err := New(4096, Normal)
	if err != nil {
		t.Fatal(err)
	}
	w := write(t, b, 0, 1000)
	st := b.Stats()
	if !st.Full || !b.Full() {
		t.Fatal("normal buffer did not report full")
	}
	// Records counts the BUFFER_FULL record the last segment kept room for.
	if uint64(w)+1 != st.Records || st.Lost != uint64(1000-w) {
		t.Fatalf("written %d, stats %+v", w, st)
	}
	fulls := 0
	for _, seg := range b.Snapshot() {
		r := trace.NewReader(seg, 0, 0, false, 0)
		var rec trace.Record
		for {
			ok, err := r.NextInto(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if rec.Major == trace.MajorSys && rec.Minor == trace.SysBufFull {
				fulls++
			}
		}
	}
	if fulls != 1 {
		t.Fatalf("%d BUFFER_FULL records in the full buffer, want 1", fulls)
	}
	got, _ := seqs(t, b.Snapshot())
	if len(got) != w {
		t.Fatalf("snapshot has %d records, %d written", len(got), w)
	}
	for i, s := range got {
		if s != uint64(i) {
			t.Fatalf("normal mode must keep the oldest records in order: record %d is %d", i, s)
		}
	}
	if w < 4096/recSize-8*4 {
		t.Fatalf("only %d records fit a 4K buffer", w)
	}
}

func TestWrapKeepsNewest(t *testing.T) {
	b, err := New(4096, Wrap)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	write(t, b, 0, n)
	st := b.Stats()
	if st.Full {
		t.Fatal("wrap buffer reported full")
	}
	got, _ := seqs(t, b.Snapshot())
	if len(got) == 0 || got[len(got)-1] != n-1 {
		t.Fatalf("newest record missing: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("wrap buffer is not a contiguous newest run at %d: %d after %d", i, got[i], got[i-1])
		}
	}
	if st.Records != uint64(len(got)) || st.Lost != uint64(n-len(got)) {
		t.Fatalf("stats %+v, held %d of %d", st, len(got), n)
	}
}

func TestContLosesNothingWhenDrained(t *testing.T) {
	b, err := New(4096, Cont)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var drained [][]byte
	drain := func() {
		segs := b.Take()
		mu.Lock()
		for _, s := range segs {
			drained = append(drained, append([]byte(nil), s.Data...))
		}
		mu.Unlock()
		b.Release(segs)
	}
	b.Notify = drain // drains synchronously whenever a segment completes
	const n = 20000  // about 30 times the buffer
	write(t, b, 0, n)
	b.Flush()
	drain()
	got, lost := seqs(t, drained)
	if len(got) != n || lost != 0 || b.Stats().Lost != 0 {
		t.Fatalf("cont mode drained %d of %d records, lost %d", len(got), n, lost)
	}
	for i, s := range got {
		if s != uint64(i) {
			t.Fatalf("record %d is %d", i, s)
		}
	}
}

func TestContCountsLostAndMarksThem(t *testing.T) {
	b, err := New(4096, Cont)
	if err != nil {
		t.Fatal(err)
	}
	// Nobody drains: the buffer fills and records are lost.
	w1 := write(t, b, 0, 1000)
	lost1 := b.Stats().Lost
	if lost1 != uint64(1000-w1) || lost1 == 0 {
		t.Fatalf("written %d, lost %d", w1, lost1)
	}
	// The drainer catches up; the next record is preceded by a LOST record.
	var segs [][]byte
	taken := b.Take()
	for _, s := range taken {
		segs = append(segs, append([]byte(nil), s.Data...))
	}
	b.Release(taken)
	w2 := write(t, b, 1000, 10)
	if w2 != 10 {
		t.Fatalf("after draining only %d of 10 written", w2)
	}
	b.Flush()
	for _, s := range b.Take() {
		segs = append(segs, s.Data)
	}
	got, lostRec := seqs(t, segs)
	if lostRec != lost1 {
		t.Fatalf("LOST records say %d, stats say %d", lostRec, lost1)
	}
	if len(got) != w1+w2 {
		t.Fatalf("got %d records, wrote %d", len(got), w1+w2)
	}
}

func TestAddLost(t *testing.T) {
	b, _ := New(8192, Normal)
	b.AddLost(7)
	write(t, b, 0, 1)
	got, lost := seqs(t, b.Snapshot())
	if lost != 7 || len(got) != 1 || b.Stats().Lost != 7 {
		t.Fatalf("lost %d, records %d, stats %+v", lost, len(got), b.Stats())
	}
}

func TestTooSmall(t *testing.T) {
	if _, err := New(100, Normal); err == nil {
		t.Fatal("100-byte buffer accepted")
	}
}

// records counts the records of segments that are not TIME_HIGH (the
// segments' own time base, which the statistics do not count).
func records(t *testing.T, segs [][]byte) (n uint64) {
	t.Helper()
	for _, s := range segs {
		r := trace.NewReader(s, 0, 0, false, 0)
		for {
			rec, ok, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if rec.Major != trace.MajorSys || rec.Minor != trace.SysTimeHigh {
				n++
			}
		}
	}
	return n
}

// The statistics count every record the buffer holds, the LOST records
// that say what was lost before them included: a trace file's statistics
// then agree with its records.
func TestStatsCountLostRecords(t *testing.T) {
	for _, mode := range []Mode{Normal, Wrap, Cont} {
		b, _ := New(8192, mode)
		for i := 0; i < 3; i++ {
			b.AddLost(2)
			write(t, b, i*10, 10)
		}
		if got, st := records(t, b.Snapshot()), b.Stats(); got != st.Records {
			t.Errorf("mode %v: the buffer holds %d records, its statistics count %d", mode, got, st.Records)
		}
	}
}

// A record written encoded (WriteRecord) reads back as the same record
// written decoded (Write), across time-high changes, LOST records and full
// segments; bytes that are not exactly one record are refused and counted
// lost, and the buffer goes on.
func TestWriteRecord(t *testing.T) {
	const n = 1000
	for _, mode := range []Mode{Normal, Cont} {
		b, _ := New(8192, mode)
		enc, _ := trace.Encode(nil, trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 0, []uint64{1, 1, 0, 0}, "")
		hostile := map[string][]byte{
			"empty":                    nil,
			"cut":                      enc[:len(enc)-4],
			"a length beyond it":       append(append([]byte(nil), enc...), 0, 0, 0, 0),
			"a header shorter than 12": enc[:8],
			"an unknown layout":        append([]byte{enc[0], 0x70}, enc[2:]...),
		}
		lostHostile := uint64(0)
		written := 0
		b.Batch(func(l *Locked) {
			for i := 0; i < n; i++ {
				tm := uint64(i)<<29 | 7 // the high half changes every 8 records
				rec, _ := trace.Encode(nil, trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 0, []uint64{1, 1, uint64(i), 0}, "")
				ok, err := l.WriteRecord(rec, tm)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if ok {
					written++
				}
				if i == 3 {
					for name, h := range hostile {
						if ok, err := l.WriteRecord(h, tm); ok || err == nil {
							t.Errorf("%s: written %v, err %v", name, ok, err)
						}
						lostHostile++
					}
				}
			}
		})
		segs := b.Snapshot()
		got, lostRec := seqs(t, segs)
		if len(got) != written || written == 0 {
			t.Fatalf("mode %d: %d records read back, %d written", mode, len(got), written)
		}
		st := b.Stats()
		if st.Lost != lostHostile+uint64(n-written) {
			t.Fatalf("mode %d: %d lost, want the %d refused and %d that did not fit", mode, st.Lost, lostHostile, n-written)
		}
		if lostRec != lostHostile {
			t.Fatalf("mode %d: no LOST record says what was refused", mode)
		}
		for i, s := range got {
			if s != uint64(i) {
				t.Fatalf("mode %d: record %d is %d", mode, i, s)
			}
		}
		// the times: each record's full time is the one given
		for _, seg := range segs {
			r := trace.NewReader(seg, 0, 0, false, 0)
			for {
				rec, ok, err := r.Next()
				if err != nil || !ok {
					break
				}
				if rec.Major == trace.MajorTprof && rec.Time != rec.Field(2)<<29|7 {
					t.Fatalf("record %d at %#x, written at %#x", rec.Field(2), rec.Time, rec.Field(2)<<29|7)
				}
			}
		}
	}
}

// Runs of records written at once (WriteRecords) read back in order with
// their times, split across segments; the buffer's limits are kept as
// record by record (normal mode stops with room for BUFFER_FULL, the rest
// counted lost); bytes that are not whole records of the size are refused
// and every record counted lost.
func TestWriteRecords(t *testing.T) {
	const n, runLen = 1000, 37
	for _, mode := range []Mode{Normal, Wrap, Cont} {
		b, _ := New(8192, mode)
		written := 0
		b.Batch(func(l *Locked) {
			for i := 0; i < n; i += runLen {
				var run []byte
				high := uint64(i/runLen) << 32
				for k := i; k < min(i+runLen, n); k++ {
					run, _ = trace.Encode(run, trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, uint64(k), []uint64{1, 1, uint64(k), 0}, "")
				}
				w, err := l.WriteRecords(run, recSize, high|uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				written += w
			}
			for _, bad := range []struct {
				b    []byte
				size int
			}{{make([]byte, recSize+4), recSize}, {make([]byte, 64), 8}, {make([]byte, 9000), 9000}, {make([]byte, 30), 30}} {
				if w, err := l.WriteRecords(bad.b, bad.size, 0); w != 0 || err == nil {
					t.Errorf("mode %d: %d bytes of %d-byte records: %d written, %v", mode, len(bad.b), bad.size, w, err)
				}
			}
		})
		st := b.Stats()
		got, _ := seqs(t, b.Snapshot())
		if mode != Wrap && (len(got) != written || written == 0) {
			t.Fatalf("mode %d: %d read back, %d written", mode, len(got), written)
		}
		if mode == Wrap && written != n {
			t.Fatalf("wrap: %d of %d written", written, n)
		}
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]+1 {
				t.Fatalf("mode %d: record %d after %d", mode, got[i], got[i-1])
			}
		}
		if mode != Wrap && got[0] != 0 {
			t.Fatalf("mode %d: the first record read back is %d", mode, got[0])
		}
		// the bad runs' records: of the size given, at least a header
		refused := uint64((recSize+4)/recSize + 64/trace.HeaderSize + 1 + 1)
		if mode == Normal && (st.Lost != uint64(n-written)+refused || !st.Full) {
			t.Fatalf("normal: %d written, %d lost (want %d and the %d refused), full %v", written, st.Lost, n-written, refused, st.Full)
		}
		for _, seg := range b.Snapshot() {
			r := trace.NewReader(seg, 0, 0, false, 0)
			for {
				rec, ok, err := r.Next()
				if err != nil || !ok {
					break
				}
				if s := rec.Field(2); rec.Major == trace.MajorTprof && rec.Time != (s/runLen)<<32|s {
					t.Fatalf("mode %d: record %d at %#x, want %#x", mode, s, rec.Time, (s/runLen)<<32|s)
				}
			}
		}
	}
}

// allocated is the bytes fn allocates.
func allocated(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A buffer takes the memory of the segments it has written into, not its
// whole size: a 64 MB buffer holding a few records is one segment.
func TestSegmentsAllocatedWhenUsed(t *testing.T) {
	const size = 64 << 20
	var b *Buffer
	n := allocated(func() {
		var err error
		if b, err = New(size, Normal); err != nil {
			t.Fatal(err)
		}
		write(t, b, 0, 100)
	})
	if seg := uint64(SegmentSize(size)); n > seg+64<<10 {
		t.Fatalf("a %d-byte buffer with 100 records allocated %d bytes, want about one %d-byte segment", size, n, seg)
	}
	// Filled, it holds its size, and no more.
	n = allocated(func() {
		for {
			if ok, _ := b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 1, []uint64{1, 1, 1, 0}, ""); !ok {
				break
			}
		}
	})
	if n > size {
		t.Fatalf("filling the buffer allocated %d bytes, more than its %d", n, size)
	}
	if !b.Full() {
		t.Fatal("buffer not full")
	}
}

// Each passes the segments Snapshot copies, the same bytes in the same
// order, and stops at fn's error.
func TestEachIsSnapshot(t *testing.T) {
	b, err := New(8*MinSegment, Normal)
	if err != nil {
		t.Fatal(err)
	}
	write(t, b, 0, 300)
	var got [][]byte
	if err := b.Each(func(d []byte) error { got = append(got, d); return nil }); err != nil {
		t.Fatal(err)
	}
	want := b.Snapshot()
	if len(got) != len(want) || len(got) < 2 {
		t.Fatalf("Each gave %d segments, Snapshot %d (want the same, at least 2)", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("segment %d differs", i)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := b.Each(func([]byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("Each after an error: %v after %d calls, want stop after 1", err, calls)
	}
}
