package tprof

import (
	"path/filepath"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// OnRecord with Options.Unnamed: a tick the selection keeps comes with a
// Result that names nothing, one it leaves out with nil; named (the
// default), the kept one comes with its name. The same ticks are counted.
func TestOnRecordUnnamed(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var m, tr trace.Writer
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{7, 7}, "prog"))
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{8, 8}, "other"))
	must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 10, []uint64{7, 7, 0x401000, 0}, ""))
	must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 11, []uint64{8, 8, 0x401000, 0}, ""))
	path := filepath.Join(t.TempDir(), "t.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: 2}}))
	for _, unnamed := range []bool{false, true} {
		f, err := nrm2.Open(path)
		must(err)
		var got []*a2n.Result
		rep := BuildWith(f, a2n.New(nil), Options{Filter: &Filter{Pids: map[uint32]bool{7: true}}, Unnamed: unnamed,
			OnRecord: func(rec *trace.Record, res *a2n.Result) {
				if rec.Major == trace.MajorTprof {
					if res != nil {
						c := *res
						res = &c
					}
					got = append(got, res)
				}
			}})
		if rep.RecordErr != nil || rep.Total != 1 || rep.Filtered != 1 {
			t.Fatalf("unnamed %v: %d ticks, %d left out (%v); want 1, 1", unnamed, rep.Total, rep.Filtered, rep.RecordErr)
		}
		if len(got) != 2 || got[0] == nil || got[1] != nil {
			t.Fatalf("unnamed %v: ticks given %v; want the kept one's result, then nil", unnamed, got)
		}
		if named := got[0].Module != "" || got[0].Symbol != ""; named == unnamed {
			t.Fatalf("unnamed %v: the kept tick came as %+v", unnamed, *got[0])
		}
	}
}
