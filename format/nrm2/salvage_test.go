package nrm2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"perfinsp/format/trace"
)

// smallTrace is a trace of 2 CPUs with 15 trace chunks each (2 KiB
// segments), a TIME_HIGH record inside some chunks, MTE and kallsyms.
func smallTrace(t *testing.T) *built {
	t.Helper()
	b := buildTrace(t, 2, 900, 32<<10)
	b.index(t)
	if len(b.chunks) < 30 || len(b.highs) == 0 {
		t.Fatalf("the built trace has %d chunks and %d mid-chunk TIME_HIGH records: the test needs more", len(b.chunks), len(b.highs))
	}
	return b
}

// want returns the ids of the ticks keep selects, sorted.
func want(b *built, keep func(tk tick) bool) []uint64 {
	var out []uint64
	for _, tk := range b.ticks {
		if keep(tk) {
			out = append(out, tk.id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sorted(v []uint64) []uint64 {
	out := append([]uint64(nil), v...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sameIDs(got, want []uint64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d ticks, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("tick %d is id %#x, want %#x", i, got[i], want[i])
		}
	}
	return ""
}

// cutPoints returns every chunk boundary and several offsets inside every
// chunk: inside its header, inside its first TIME_HIGH record, inside a
// record in the middle, one byte short of its end.
func cutPoints(b *built) []int64 {
	var cuts []int64
	for i, off := range b.chunks {
		end := b.ends[i]
		start := off + ChunkHeaderSize
		cuts = append(cuts, off, off+1, off+8, off+15, start)
		if end-start > 8 {
			mid := start + (end-start)/2
			cuts = append(cuts, start+5, mid, mid+3, end-1)
		}
	}
	return append(cuts, int64(len(b.data)))
}

// TestTruncationKeepsEveryCompleteChunk cuts the file at every chunk
// boundary and at several places inside every chunk: the salvaging reader
// keeps exactly the ticks whose records lie wholly before the cut, says
// where the file was cut, and the refusing reader still refuses a torn
// chunk.
func TestTruncationKeepsEveryCompleteChunk(t *testing.T) {
	b := smallTrace(t)
	// A cut between chunks, or in the padding after a chunk's data, loses nothing.
	boundary := map[int64]bool{int64(len(b.data)): true}
	for i := range b.chunks {
		boundary[b.chunks[i]] = true
		for p := b.ends[i] - padding(b, i); p <= b.ends[i]; p++ {
			boundary[p] = true
		}
	}
	statsAt := int64(0)
	for i := len(b.chunks) - 1; i >= 0; i-- {
		if b.kinds[i] == ChunkStats {
			statsAt = b.chunks[i]
		}
	}
	for _, cut := range cutPoints(b) {
		if cut <= HeaderSize {
			continue
		}
		data := b.data[:cut]
		f, err := ParseWith(data, Options{Salvage: true})
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		exp := want(b, func(tk tick) bool { return tk.end <= cut })
		if msg := sameIDs(sorted(ids(t, f)), exp); msg != "" {
			t.Fatalf("cut at %d: %s", cut, msg)
		}
		dmg := f.Damage()
		if boundary[cut] {
			if len(dmg) != 0 {
				t.Fatalf("cut at chunk boundary %d: damage reported: %v", cut, dmg)
			}
			if _, err := Parse(data); err != nil {
				t.Fatalf("cut at chunk boundary %d: the refusing reader refused a file of whole chunks: %v", cut, err)
			}
		} else {
			if len(dmg) != 1 || !dmg[0].Cut || dmg[0].Offset > cut || dmg[0].Offset < HeaderSize {
				t.Fatalf("cut at %d: want one cut reported before it, got %+v", cut, dmg)
			}
			var fe *FormatError
			if _, err := Parse(data); !errors.As(err, &fe) {
				t.Fatalf("cut at %d: the refusing reader accepted a torn chunk (%v)", cut, err)
			}
			w := strings.Join(f.Warnings(), "\n")
			if !strings.Contains(w, "cut") || !strings.Contains(w, "byte offset") {
				t.Fatalf("cut at %d: warnings do not say where: %s", cut, w)
			}
		}
		noStats := strings.Contains(strings.Join(f.Warnings(), "\n"), "no CPU statistics")
		if noStats != (cut < statsAt+ChunkHeaderSize+StatsSize) {
			t.Fatalf("cut at %d (statistics at %d): warning that the statistics are missing: %v: %v", cut, statsAt, noStats, f.Warnings())
		}
	}
}

// TestTornChunkReportsItsCPUAndRecords checks the numbers of a cut inside a
// trace chunk: its CPU, how many of its records were kept, and the bytes lost.
func TestTornChunkReportsItsCPUAndRecords(t *testing.T) {
	b := smallTrace(t)
	ci := len(b.chunks) / 2
	for b.kinds[ci] != ChunkTrace || b.cpus[ci] != 1 {
		ci++
	}
	var in []tick
	for _, tk := range b.ticks {
		if tk.chunk == ci {
			in = append(in, tk)
		}
	}
	cut := in[10].start + 7 // inside the 11th tick of the chunk
	f, err := ParseWith(b.data[:cut], Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	d := f.Damage()
	if len(d) != 1 {
		t.Fatalf("damage %+v", d)
	}
	// The chunk's first record is a TIME_HIGH: 10 ticks and it were kept.
	if d[0].CPU != 1 || d[0].Kind != ChunkTrace || d[0].Kept != 11 || d[0].Offset != in[10].start || d[0].Lost != 7 {
		t.Fatalf("damage %+v: want CPU 1, trace, 11 records kept, cut after byte %d, 7 bytes lost", d[0], in[10].start)
	}
	if !strings.Contains(d[0].Msg, fmt.Sprintf("byte offset %d", b.chunks[ci])) || !strings.Contains(d[0].Msg, "CPU 1") {
		t.Fatalf("message does not name the chunk and its CPU: %s", d[0].Msg)
	}
}

// corrupt returns a copy of data with the record at off given a length
// shorter than a record header.
func corrupt(data []byte, off int64) []byte {
	out := append([]byte(nil), data...)
	binary.LittleEndian.PutUint16(out[off:], trace.TypeLen(trace.LayoutFixed, 4))
	return out
}

// TestCorruptRecordLosesOnlyItsSegment corrupts one record in the middle of
// a trace chunk of CPU 1: only the ticks from it to the end of its segment
// are lost, every other CPU's and chunk's ticks are merged as before, and
// the damage is counted and reported. The refusing reader still stops there.
func TestCorruptRecordLosesOnlyItsSegment(t *testing.T) {
	b := smallTrace(t)
	ci := len(b.chunks) / 3
	for b.kinds[ci] != ChunkTrace || b.cpus[ci] != 1 {
		ci++
	}
	var bad tick
	n := 0
	for _, tk := range b.ticks {
		if tk.chunk == ci {
			if n == 20 {
				bad = tk
			}
			n++
		}
	}
	data := corrupt(b.data, bad.start)
	f, err := ParseWith(data, Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	got := ids(t, f)
	exp := want(b, func(tk tick) bool { return tk.chunk != ci || tk.start < bad.start })
	if msg := sameIDs(sorted(got), exp); msg != "" {
		t.Fatalf("%s (lost %d of %d ticks; the segment after the bad record holds %d)", msg, len(b.ticks)-len(got), len(b.ticks), n-20)
	}
	d := f.Damage()
	if len(d) != 1 || d[0].CPU != 1 || d[0].Kind != ChunkTrace || d[0].Offset != bad.start || d[0].Lost != b.ends[ci]-bad.start-padding(b, ci) {
		t.Fatalf("damage %+v: want one bad trace record of CPU 1 at %d", d, bad.start)
	}
	w := strings.Join(f.Warnings(), "\n")
	if !strings.Contains(w, fmt.Sprintf("byte offset %d", bad.start)) || !strings.Contains(w, "1 segment had a record that does not decode (1 CPU affected") {
		t.Fatalf("warnings: %s", w)
	}
	// Records can be called again: the damage is not counted twice.
	_ = ids(t, f)
	if len(f.Damage()) != 1 {
		t.Fatalf("a second Records doubled the damage: %v", f.Damage())
	}
	strict, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var de *trace.DecodeError
	if err := strict.Records(func(*trace.Record) error { return nil }); !errors.As(err, &de) || de.Offset != bad.start {
		t.Fatalf("the refusing reader: %v, want a DecodeError at %d", err, bad.start)
	}
	if err := strict.Validate(); !errors.As(err, &de) {
		t.Fatalf("Validate: %v", err)
	}
}

// padding returns the zero bytes after chunk ci's data.
func padding(b *built, ci int) int64 {
	n := int64(binary.LittleEndian.Uint64(b.data[b.chunks[ci]+8:]))
	return b.ends[ci] - b.chunks[ci] - ChunkHeaderSize - n
}

// TestCorruptRecordResyncsAtTimeHigh corrupts a tick before a TIME_HIGH
// record inside a chunk: decoding starts again at that TIME_HIGH record and
// only the ticks between are lost. Corrupting one record in every fifth
// chunk of both CPUs loses only those chunks' tails.
func TestCorruptRecordResyncsAtTimeHigh(t *testing.T) {
	b := smallTrace(t)
	high := b.highs[0]
	var bad tick
	for _, tk := range b.ticks {
		if tk.end <= high && tk.start > b.chunks[0] {
			bad = tk
		}
	}
	if bad.end != high {
		t.Fatalf("no tick right before the TIME_HIGH record at %d", high)
	}
	f, err := ParseWith(corrupt(b.data, bad.start), Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	exp := want(b, func(tk tick) bool { return tk.id != bad.id })
	if msg := sameIDs(sorted(ids(t, f)), exp); msg != "" {
		t.Fatal(msg)
	}
	if d := f.Damage(); len(d) != 1 || d[0].Lost != high-bad.start {
		t.Fatalf("damage %+v, want %d bytes skipped", d, high-bad.start)
	}

	data := append([]byte(nil), b.data...)
	badAt := map[int]int64{}
	for _, tk := range b.ticks {
		if b.kinds[tk.chunk] == ChunkTrace && tk.chunk%5 == 0 && badAt[tk.chunk] == 0 && tk.id%3 == 0 {
			badAt[tk.chunk] = tk.start
			data = corrupt(data, tk.start)
		}
	}
	f, err = ParseWith(data, Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	exp = want(b, func(tk tick) bool {
		at, ok := badAt[tk.chunk]
		if !ok || tk.start < at {
			return true
		}
		for _, h := range b.highs {
			if h > at && h < tk.start && h < b.ends[tk.chunk] {
				return true
			}
		}
		return false
	})
	if msg := sameIDs(sorted(ids(t, f)), exp); msg != "" {
		t.Fatal(msg)
	}
	if len(f.Damage()) != len(badAt) {
		t.Fatalf("%d damaged places reported, %d made", len(f.Damage()), len(badAt))
	}
}

// TestBadChunkHeaders damages chunk headers: a wrong length keeps all the
// chunk's records and goes on at the next chunk; an unknown kind or a CPU
// out of range loses that chunk only.
func TestBadChunkHeaders(t *testing.T) {
	b := smallTrace(t)
	ci := len(b.chunks) / 2
	for b.kinds[ci] != ChunkTrace {
		ci++
	}
	off := b.chunks[ci]
	for name, c := range map[string]struct {
		field  int64
		value  uint64
		width  int
		losing bool
	}{
		"length past the end": {8, 1 << 40, 8, false},
		"length too long":     {8, uint64(b.ends[ci+1] - off), 8, false},
		"unknown kind":        {0, 9, 4, true},
		"CPU out of range":    {4, 7, 4, true},
	} {
		data := append([]byte(nil), b.data...)
		if c.width == 8 {
			binary.LittleEndian.PutUint64(data[off+c.field:], c.value)
		} else {
			binary.LittleEndian.PutUint32(data[off+c.field:], uint32(c.value))
		}
		if _, err := Parse(data); err == nil {
			t.Fatalf("%s: the refusing reader accepted it", name)
		}
		f, err := ParseWith(data, Options{Salvage: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		exp := want(b, func(tk tick) bool { return !c.losing || tk.chunk != ci })
		if msg := sameIDs(sorted(ids(t, f)), exp); msg != "" {
			t.Fatalf("%s: %s", name, msg)
		}
		if len(f.Damage()) != 1 || f.Damage()[0].Cut {
			t.Fatalf("%s: damage %+v", name, f.Damage())
		}
		if !f.Complete || !f.HasStats {
			t.Fatalf("%s: the chunks after the damaged one were not all read", name)
		}
	}
}

// TestZeroTail reads a file whose end was allocated but never written (a
// crash after the file grew): the chunks before are read, the zeros are
// reported as such, and the refusing reader refuses it.
func TestZeroTail(t *testing.T) {
	b := smallTrace(t)
	ci := len(b.chunks) / 2
	data := append(append([]byte(nil), b.data[:b.chunks[ci]]...), make([]byte, 8192)...)
	if _, err := Parse(data); err == nil {
		t.Fatal("the refusing reader accepted a zero tail")
	}
	f, err := ParseWith(data, Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	exp := want(b, func(tk tick) bool { return tk.chunk < ci })
	if msg := sameIDs(sorted(ids(t, f)), exp); msg != "" {
		t.Fatal(msg)
	}
	d := f.Damage()
	if len(d) != 1 || !d[0].Cut || d[0].Offset != b.chunks[ci] || d[0].Lost != 8192 || !strings.Contains(d[0].Msg, "8192 zero bytes") {
		t.Fatalf("damage %+v", d)
	}
}

// TestWriteErrorFlagWarns: a file whose writer met a write error (the
// header flag) is read with a warning that says so.
func TestWriteErrorFlagWarns(t *testing.T) {
	b := buildTrace(t, 1, 10, 4<<10)
	f, err := Parse(b.data)
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(f.Warnings(), "\n"); strings.Contains(w, "write to the trace file failed") {
		t.Fatalf("a clean file warns: %s", w)
	}
	data := append([]byte(nil), b.data...)
	binary.LittleEndian.PutUint32(data[44:], binary.LittleEndian.Uint32(data[44:])|FlagWriteError)
	if f, err = Parse(data); err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(f.Warnings(), "\n"); !strings.Contains(w, "write to the trace file failed") {
		t.Fatalf("no warning for the write error: %q", w)
	}
}
