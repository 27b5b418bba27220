package tprof

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// Deferred naming (Locs named beside the reading, each module symbol's
// Locs named once) names every tick as naming at once does, with real
// modules: two copies of one library at the same address in two
// processes (the same symbol starts, two modules), ticks at several
// places of each function and in the gaps between them.
func TestDeferredNamesAsAtOnce(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/liblzma.so.5" // stripped: .dynsym and .eh_frame ranges
	src, err := os.ReadFile(lib)
	if err != nil {
		testenv.Missing(t, "%s: %v (apt-get install liblzma5)", lib, err)
	}
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.so"), filepath.Join(dir, "b.so")}
	for _, p := range paths {
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ef, err := elf.Open(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var text *elf.Prog
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	ef.Close()
	if text == nil {
		t.Fatalf("%s: no executable segment", lib)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const base = 0x7f0000000000
	var m, tr trace.Writer
	for i, p := range paths {
		pid := uint64(7 + i)
		must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{pid, 1}, "prog"))
		must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 1, []uint64{pid, base + text.Vaddr, text.Filesz, text.Off, 5}, p))
	}
	ticks := 0
	for off := uint64(0); off < text.Filesz; off += 97 { // odd: many places in each function
		for pid := uint64(7); pid <= 8; pid++ {
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 2, []uint64{pid, pid, base + text.Vaddr + off, 0}, ""))
			ticks++
		}
	}
	reps := bothWays(t, oneCPUTrace(t, &m, &tr, uint64(ticks+4)))
	deferred, atOnce := reps[0].TickCounts(), reps[1].TickCounts()
	perModule := map[string]int{}
	for k, n := range atOnce {
		if deferred[k] != n {
			t.Errorf("%+v: %d ticks named at once, %d deferred", k, n, deferred[k])
		}
		perModule[k.Module]++
	}
	for k, n := range deferred {
		if _, ok := atOnce[k]; !ok {
			t.Errorf("%+v: %d ticks deferred, none named at once", k, n)
		}
	}
	if perModule[paths[0]] < 100 || perModule[paths[0]] != perModule[paths[1]] {
		t.Fatalf("rows per module %v: want the same hundreds in each copy", perModule)
	}
	t.Logf("%d ticks, %d rows per module", ticks, perModule[paths[0]])
}

// oneCPUTrace writes the records of m (MTE) and tr (trace) as a trace of
// one CPU and returns its path.
func oneCPUTrace(t *testing.T, m, tr *trace.Writer, records uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0"})
	if err == nil {
		err = w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf)
	}
	if err == nil {
		err = w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf)
	}
	if err == nil {
		err = w.Close(0, []nrm2.CPUStats{{Records: records}})
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// bothWays is path's report with deferred naming and with naming at once.
func bothWays(t *testing.T, path string) [2]*Report {
	t.Helper()
	var reps [2]*Report
	for i, atOnce := range []bool{false, true} {
		f, err := nrm2.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var onRecord func(*trace.Record, *a2n.Result)
		if atOnce {
			onRecord = func(*trace.Record, *a2n.Result) {}
		}
		reps[i] = Build(f, a2n.New(nil), onRecord)
		f.Close()
		if reps[i].RecordErr != nil {
			t.Fatal(reps[i].RecordErr)
		}
	}
	return reps
}
