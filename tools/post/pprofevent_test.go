package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// TestPprofEventBased: the profile of an event-based trace (swtrace
// setrate -e EVENT -c N: the header's rate is N, a sample every N events)
// counts the event, N a sample, not CPU time at 1/N s a sample (which made
// 1,000 page-fault samples "100 s of CPU"); the software clocks count
// nanoseconds of CPU. A time-based trace keeps cpu/nanoseconds at 1/rate.
func TestPprofEventBased(t *testing.T) {
	for _, c := range []struct {
		event    string // "": time-based at 1000 Hz
		rate     uint32
		typ      string
		unit     string
		perTick  int64
		withAddr bool
	}{
		{"page-faults", 10, "page-faults", "count", 10, false},
		{"page-faults", 10, "page-faults", "count", 10, true},
		{"task-clock", 250000, "cpu", "nanoseconds", 250000, true},
		{"", 1000, "cpu", "nanoseconds", 1000000, true},
	} {
		dir := t.TempDir()
		m, tr, must := fakeApp(t, "app", jitFunc{0x7000, "work"})
		tm := uint64(1000)
		records := uint64(2)
		if c.event != "" {
			must(tr.Write(trace.MajorSys, trace.SysEvent, trace.LayoutString, tm, []uint64{1, 2, uint64(c.rate)}, c.event))
			records++
		}
		const ticks = 40
		for i := 0; i < ticks; i++ {
			tm += 10
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{600, 600, 0x7010, 0}, ""))
		}
		path := filepath.Join(dir, "e.nrm2")
		w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: c.rate, KernelRelease: "6.1.0", Hostname: "h"})
		must(err)
		must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
		must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
		must(w.Close(0, []nrm2.CPUStats{{Records: records + ticks}}))
		pb := filepath.Join(dir, "p.pb.gz")
		args := []string{"-r", path, "--pprof", pb}
		if !c.withAddr {
			args = append(args, "-show") // one location per name
		}
		if _, errs, code := runPost(t, dir, args...); code != 0 {
			t.Fatalf("%q: post: exit %d: %s", c.event, code, errs)
		}
		f, err := os.Open(pb)
		must(err)
		p, err := profile.Parse(f)
		f.Close()
		must(err)
		if len(p.SampleType) != 2 || p.SampleType[1].Type != c.typ || p.SampleType[1].Unit != c.unit ||
			p.PeriodType == nil || p.PeriodType.Type != c.typ || p.Period != c.perTick {
			t.Fatalf("%q: sample types %v, period %v %d; want %s/%s, %d a sample", c.event, p.SampleType, p.PeriodType, p.Period, c.typ, c.unit, c.perTick)
		}
		var n, v int64
		for _, s := range p.Sample {
			n += s.Value[0]
			v += s.Value[1]
		}
		if n != ticks || v != ticks*c.perTick {
			t.Fatalf("%q: %d samples worth %d, want %d worth %d", c.event, n, v, ticks, ticks*c.perTick)
		}
	}
}
