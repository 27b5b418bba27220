package main

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// TestStderrWarningsGrouped: more than maxListed unreadable modules make
// one line on stderr (how many, how many deleted, the first few); a few
// stay one line each; other warnings are kept as they are.
func TestStderrWarningsGrouped(t *testing.T) {
	var many []string
	for i := 0; i < 12; i++ {
		many = append(many, fmt.Sprintf("%s/tmp/go-build%d/x.test: missing (deleted since tracing?)", notReadPrefix, i))
	}
	other := "WARNING: records were lost during tracing"
	got := stderrWarnings(append([]string{other}, many...))
	if len(got) != 2 || got[0] != other || !strings.Contains(got[1], "12 modules not read (12 of them deleted)") ||
		!strings.Contains(got[1], "and 9 more") || !strings.Contains(got[1], "go-build0") {
		t.Fatalf("grouped: %q", got)
	}
	if got := stderrWarnings(many[:3]); len(got) != 3 || got[2] != many[2] {
		t.Fatalf("three modules: %q", got)
	}
}

// TestStackHintOnUnmappedFrames: a trace whose call stacks pass through
// addresses no module maps (a frame-pointer walk through code without
// frame pointers) gets one line on stderr suggesting DWARF unwinding; a
// trace whose stacks all resolve gets none.
func TestStackHintOnUnmappedFrames(t *testing.T) {
	for _, c := range []struct {
		name  string
		bad   int
		hint  bool
		share string
	}{{"unmapped", 30, true, "30 %"}, {"clean", 0, false, ""}} {
		dir := t.TempDir()
		m, tr, must := fakeApp(t, "app", jitFunc{0x7000, "main"}, jitFunc{0x7100, "work"})
		tm := uint64(1000)
		tick := func(pcs ...uint64) {
			tm += 10
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{600, 600, pcs[0], 0}, ""))
			b := make([]byte, 8*len(pcs))
			for i, pc := range pcs {
				binary.LittleEndian.PutUint64(b[8*i:], pc)
			}
			must(tr.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{600, 600, 0}, string(b)))
		}
		for i := 0; i < 100-c.bad; i++ {
			tick(0x7110, 0x7010)
		}
		for i := 0; i < c.bad; i++ {
			tick(0x7110, 0xdead0000, 0x7010) // a return address in no mapping
		}
		path := filepath.Join(dir, "s.nrm2")
		w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
		must(err)
		must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
		must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
		must(w.Close(0, []nrm2.CPUStats{{Records: uint64(2 + 200)}}))
		_, errs, code := runPost(t, dir, "-r", path, "-tprof")
		if code != 0 {
			t.Fatalf("%s: post: exit %d: %s", c.name, code, errs)
		}
		has := strings.Contains(errs, "--call-graph dwarf")
		if has != c.hint || (c.hint && (!strings.Contains(errs, c.share) || strings.Count(errs, "--call-graph dwarf") != 1)) {
			t.Errorf("%s: the DWARF hint on stderr is %v, want %v:\n%s", c.name, has, c.hint, errs)
		}
	}
}

// TestRootHintOnShortStacks: frame-pointer stacks that stop before their
// thread's first function (no _start below them: code without frame
// pointers ended the walk) get one line on stderr suggesting DWARF
// unwinding; whole stacks get none, nor stacks unwound by call-frame
// information (the flag of their UNWIND records), nor stacks the other
// hint (unmapped frames) already explains.
func TestRootHintOnShortStacks(t *testing.T) {
	for _, c := range []struct {
		name  string
		root  uint64 // the outermost frame's pc
		flags uint64
		hint  bool
	}{
		{"short", 0x7110, 0, true},
		{"whole", 0x7210, 0, false},
		{"dwarf", 0x7110, trace.UnwindCFI, false},
		{"unmapped", 0xdead0000, 0, false},
	} {
		dir := t.TempDir()
		m, tr, must := fakeApp(t, "app", jitFunc{0x7000, "cmp"}, jitFunc{0x7100, "msort"}, jitFunc{0x7200, "_start"})
		tm := uint64(1000)
		for i := 0; i < 100; i++ {
			tm += 10
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{600, 600, 0x7010, 0}, ""))
			b := make([]byte, 16)
			binary.LittleEndian.PutUint64(b, 0x7010)
			binary.LittleEndian.PutUint64(b[8:], c.root)
			must(tr.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{600, 600, c.flags}, string(b)))
		}
		path := filepath.Join(dir, "s.nrm2")
		w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
		must(err)
		must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
		must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
		must(w.Close(0, []nrm2.CPUStats{{Records: uint64(3 + 200)}}))
		_, errs, code := runPost(t, dir, "-r", path, "-tprof")
		if code != 0 {
			t.Fatalf("%s: post: exit %d: %s", c.name, code, errs)
		}
		has := strings.Contains(errs, "stop before their thread's first function")
		if has != c.hint || strings.Count(errs, "--call-graph dwarf") > 1 {
			t.Errorf("%s: the root hint on stderr is %v, want %v:\n%s", c.name, has, c.hint, errs)
		}
	}
}
