package tprof

import (
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// A build's Progress counts every byte of the trace's records, read on
// every CPU at once or by the one reader, and a trace the CPUs' readers
// give up on (a time that goes back) is not counted twice.
func TestProgressCountsTheTrace(t *testing.T) {
	back := func(w *trace.Writer, _ func()) {
		w.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 5, []uint64{100, 100, 0x400010, 0}, "")
	}
	for _, c := range []struct {
		name     string
		extra    func(w *trace.Writer, cut func())
		parallel bool
		filter   *Filter
	}{
		{"every CPU at once", nil, true, nil},
		{"the one reader", nil, false, &Filter{Pids: map[uint32]bool{100: true, 200: true, 300: true}}},
		{"given up on", back, false, nil},
	} {
		path := randomTrace(t, 5, 3, true, c.extra)
		old := parallelMin
		parallelMin = 0
		f, err := nrm2.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var p Progress
		rep := BuildWith(f, a2n.New(nil), Options{Filter: c.filter, Progress: &p})
		parallelMin = old
		if rep.RecordErr != nil {
			t.Fatal(rep.RecordErr)
		}
		if rep.parallel != c.parallel {
			t.Errorf("%s: read at once %v, want %v", c.name, rep.parallel, c.parallel)
		}
		if got, want := p.Read(), TraceBytes(f); got != want || want == 0 {
			t.Errorf("%s: %d bytes read, want %d", c.name, got, want)
		}
		f.Close()
	}
}
