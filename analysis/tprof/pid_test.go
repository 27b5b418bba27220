package tprof

import (
	"path/filepath"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// Every pid value is a real one: the kernel reports pid -1 (0xffffffff)
// for a tick in a task whose pid is gone (an exiting thread). Such ticks,
// first in the trace, between others and after an MTE record of their
// pid, are counted like any other (post panicked on the first one).
func TestTickOfPidMinusOne(t *testing.T) {
	const gone = 0xffffffff
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{7, 1}, "prog"))
	tick := func(tm, pid, tid uint64) {
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, tid, 0x401000, 0}, ""))
	}
	tick(10, gone, gone)
	tick(11, gone, gone)
	tick(12, 7, 7)
	tick(13, gone, gone)
	must(tr.Write(trace.MajorMTE, trace.MTEFork, trace.LayoutFixed, 14, []uint64{7, 7, gone}, ""))
	tick(15, gone, gone)
	tick(16, 7, 7)
	path := filepath.Join(t.TempDir(), "t.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: 7}}))
	f, err := nrm2.Open(path)
	must(err)
	rep := Build(f, a2n.New(nil), nil)
	if rep.RecordErr != nil {
		t.Fatal(rep.RecordErr)
	}
	per := map[uint32]uint64{}
	for k, n := range rep.TickCounts() {
		per[k.PID] += n
	}
	if rep.Total != 6 || per[gone] != 4 || per[7] != 2 {
		t.Fatalf("total %d, pid -1: %d, pid 7: %d; want 6, 4, 2", rep.Total, per[gone], per[7])
	}
}
