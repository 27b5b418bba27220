package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// TestFoldedProcessNameEscaped: a process may name itself anything
// (prctl PR_SET_NAME takes any byte but NUL): a name with a newline and a
// ';' still gives one folded line per stack, with and without call
// stacks, whose counts add up to the ticks.
func TestFoldedProcessNameEscaped(t *testing.T) {
	for _, stacks := range []bool{false, true} {
		dir := t.TempDir()
		m, tr, must := fakeApp(t, "evil\n7 x;y", jitFunc{0x7000, "main"}, jitFunc{0x7100, "work"})
		tm := uint64(1000)
		const ticks = 50
		for i := 0; i < ticks; i++ {
			tm += 10
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{600, 600, 0x7110, 0}, ""))
			if stacks {
				b := make([]byte, 16)
				binary.LittleEndian.PutUint64(b, 0x7110)
				binary.LittleEndian.PutUint64(b[8:], 0x7010)
				must(tr.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{600, 600, 0}, string(b)))
			}
		}
		path := filepath.Join(dir, "s.nrm2")
		w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
		must(err)
		must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
		must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
		n := uint64(2 + ticks)
		if stacks {
			n += ticks
		}
		must(w.Close(0, []nrm2.CPUStats{{Records: n}}))
		folded := filepath.Join(dir, "f.folded")
		if _, errs, code := runPost(t, dir, "-r", path, "-tprof", "--folded", folded); code != 0 {
			t.Fatalf("post: exit %d: %s", code, errs)
		}
		b, err := os.ReadFile(folded)
		must(err)
		sum := 0
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			i := strings.LastIndexByte(l, ' ')
			c, err := strconv.Atoi(l[i+1:])
			if i < 0 || err != nil || !strings.HasPrefix(l, "evil 7 x:y (pid 600);") {
				t.Fatalf("stacks %v: line %q of\n%s", stacks, l, b)
			}
			sum += c
		}
		if sum != ticks {
			t.Fatalf("stacks %v: %d ticks in the folded stacks, want %d:\n%s", stacks, sum, ticks, b)
		}
	}
}
