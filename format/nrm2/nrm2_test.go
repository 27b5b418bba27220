package nrm2

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"perfinsp/format/trace"
)

func segment(t *testing.T, times []uint64, cpu int) []byte {
	t.Helper()
	var w trace.Writer
	for _, tm := range times {
		if err := w.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{100, 100 + uint64(cpu), tm, 0}, ""); err != nil {
			t.Fatal(err)
		}
	}
	return w.Buf
}

func writeSample(t *testing.T, path string) {
	t.Helper()
	w, err := Create(path, Header{NCPUs: 2, Mode: ModeNormal, TraceBufSize: 1 << 20, MTEBufSize: 1 << 16, KernelRelease: "6.1.0-test", Hostname: "host", RateHz: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var m trace.Writer
	if err := m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{100, 1}, "prog"); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.WriteChunk(ChunkKallsyms, 0, []byte("ffffffff81000000 T _stext\n")))
	must(w.WriteChunk(ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(ChunkTrace, 0, segment(t, []uint64{10, 30, 1<<32 + 5}, 0)))
	must(w.WriteChunk(ChunkTrace, 1, segment(t, []uint64{20, 40}, 1)))
	must(w.WriteChunk(ChunkTrace, 0, segment(t, []uint64{1<<32 + 50}, 0)))
	must(w.Close(0, []CPUStats{{Records: 4, Lost: 2}, {Records: 2}}))
}

func TestFileRoundTripAndMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.nrm2")
	writeSample(t, path)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Complete || f.Header.NCPUs != 2 || f.Header.KernelRelease != "6.1.0-test" || f.Header.Hostname != "host" || f.Header.RateHz != 1000 {
		t.Fatalf("header: %+v complete=%v", f.Header, f.Complete)
	}
	if f.Header.Flags&FlagLost == 0 || f.Header.Flags&FlagComplete == 0 {
		t.Fatalf("flags %b: lost and complete expected", f.Header.Flags)
	}
	if tl, _ := f.Lost(); tl != 2 {
		t.Fatalf("lost %d, want 2", tl)
	}
	if string(f.Kallsyms) != "ffffffff81000000 T _stext\n" {
		t.Fatalf("kallsyms %q", f.Kallsyms)
	}
	var times []uint64
	var cpus []int
	mteFirst := false
	err = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorSys {
			return nil
		}
		if r.Major == trace.MajorMTE {
			mteFirst = len(times) == 0
			return nil
		}
		times = append(times, r.Time)
		cpus = append(cpus, r.CPU)
		if r.Field(2) != r.Time {
			t.Errorf("record fields do not match its time: %x vs %x", r.Field(2), r.Time)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{10, 20, 30, 40, 1<<32 + 5, 1<<32 + 50}
	wantCPU := []int{0, 1, 0, 1, 0, 0}
	if len(times) != len(want) {
		t.Fatalf("times %v, want %v", times, want)
	}
	for i := range want {
		if times[i] != want[i] || cpus[i] != wantCPU[i] {
			t.Fatalf("merged order %v on %v, want %v on %v", times, cpus, want, wantCPU)
		}
	}
	if !mteFirst {
		t.Fatal("the MTE record (time 1) was not delivered first")
	}
}

func TestBadFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.nrm2")
	writeSample(t, path)
	good, _ := os.ReadFile(path)
	for name, b := range map[string][]byte{
		"empty":     {},
		"foreign":   []byte("\x7fELF this is not a trace"),
		"truncated": good[:len(good)-20],
		"header":    good[:100],
	} {
		_, err := Parse(b)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("%s: want FormatError, got %v", name, err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.nrm2")); err == nil {
		t.Fatal("missing file opened")
	}
}

// FuzzParse reads arbitrary bytes as a trace file, refusing damage and
// salvaging it: neither panics, errors and damage name offsets inside the
// input, the salvaging reader accepts every file whose header is good and
// never stops on a record, and the work is bounded by the input's size.
// The seeds (testdata/fuzz/FuzzParse, see TestFuzzCorpusIsCurrent) are a
// good trace and its damaged shapes.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		strict, serr := Parse(b)
		if serr != nil {
			var fe *FormatError
			if !errors.As(serr, &fe) || fe.Offset < 0 || fe.Offset > int64(len(b)) {
				t.Fatalf("error without a valid offset: %v", serr)
			}
		}
		_, herr := DecodeHeader(b)
		file, err := ParseWith(b, Options{Salvage: true})
		if (err != nil) != (herr != nil) {
			t.Fatalf("salvaging reader: %v with header error %v", err, herr)
		}
		if err != nil {
			return
		}
		if serr == nil && (len(file.Damage()) != 0 || len(file.Chunks) != len(strict.Chunks)) {
			t.Fatalf("a file the refusing reader accepts was salvaged: %v", file.Damage())
		}
		n := 0
		if err := file.Records(func(r *trace.Record) error {
			n++
			return nil
		}); err != nil {
			t.Fatalf("the salvaging reader stopped: %v", err)
		}
		if n > len(b)/trace.HeaderSize {
			t.Fatalf("%d records from %d bytes", n, len(b))
		}
		for _, d := range file.Damage() {
			if d.Offset < 0 || d.Offset > int64(len(b)) || d.Lost < 0 || d.Lost > int64(len(b)) {
				t.Fatalf("damage outside the input: %+v", d)
			}
		}
		_ = file.Warnings()
		if strict != nil {
			err := strict.Records(func(r *trace.Record) error { return nil })
			if err != nil {
				var de *trace.DecodeError
				if !errors.As(err, &de) || de.Offset < 0 || de.Offset > int64(len(b)) {
					t.Fatalf("record error without a valid offset: %v", err)
				}
			}
			if (err == nil) != (strict.Validate() == nil) {
				t.Fatalf("Validate and Records disagree: %v", err)
			}
		}
	})
}

// ReadData gives the bytes of a chunk's Data, from the file when it was
// mapped (pieces at any offset) and from memory when it was parsed there;
// a range outside the chunk is an error, not a panic.
func TestReadData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.nrm2")
	writeSample(t, path)
	mapped, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	if mapped.src == nil {
		t.Fatal("an opened file keeps no source to read from")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inMemory, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	mapped.Populate() // (a no-op without a mapping)
	inMemory.Populate()
	for _, f := range []*File{mapped, inMemory} {
		for i, c := range f.Chunks {
			for _, off := range []int{0, 1, len(c.Data) / 2, len(c.Data)} {
				p := make([]byte, len(c.Data)-off)
				if err := f.ReadData(c, p, off); err != nil {
					t.Fatalf("chunk %d at %d: %v", i, off, err)
				}
				if string(p) != string(c.Data[off:]) {
					t.Fatalf("chunk %d at %d: %q, want %q", i, off, p, c.Data[off:])
				}
			}
			for _, bad := range [][2]int{{-1, 1}, {0, len(c.Data) + 1}, {len(c.Data), 1}} {
				if err := f.ReadData(c, make([]byte, bad[1]), bad[0]); err == nil {
					t.Fatalf("chunk %d: %d bytes at %d of %d read", i, bad[1], bad[0], len(c.Data))
				}
			}
		}
	}
}
