package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// writeSchedTrace writes a one-CPU trace of MTE records and per-CPU
// trace records to dir/name.
func writeSchedTrace(t *testing.T, dir, name string, mte func(w *trace.Writer) error, cpu0 func(w *trace.Writer) error) string {
	t.Helper()
	var m, c trace.Writer
	if err := mte(&m); err != nil {
		t.Fatal(err)
	}
	if err := cpu0(&c); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteChunk(nrm2.ChunkTrace, 0, c.Buf); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(0, make([]nrm2.CPUStats, 1)); err != nil {
		t.Fatal(err)
	}
	return path
}

// --pid selects the processes the selected one creates in the
// scheduling reports and the time line's thread states, as in tprof.out
// (run.tprof selects its command by --pid: a shell's pipeline is its
// children): the parent 100 makes the process 200 and both wait; 300 is
// another process.
func TestSchedPidTakesChildren(t *testing.T) {
	dir := t.TempDir()
	fx := trace.LayoutFixed
	nrm := writeSchedTrace(t, dir, "fork.nrm2", func(w *trace.Writer) error {
		for _, p := range []struct {
			pid  uint64
			name string
		}{{100, "parent"}, {300, "other"}} {
			if err := w.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 500, []uint64{p.pid, 1}, p.name); err != nil {
				return err
			}
		}
		if err := w.Write(trace.MajorMTE, trace.MTEFork, fx, 2000, []uint64{100, 100, 200, 200, 0}, ""); err != nil {
			return err
		}
		return w.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 2000, []uint64{200, 1}, "child")
	}, func(w *trace.Writer) error {
		for _, r := range []struct {
			minor uint32
			t     uint64
			f     []uint64
		}{
			{trace.DispatchSwitch, 1000, []uint64{0, 0, 100, 100, 0}},
			{trace.DispatchSwitch, 3000, []uint64{100, 100, 200, 200, trace.StateSleeping}},
			{trace.DispatchSwitch, 5000, []uint64{200, 200, 300, 300, trace.StateSleeping}},
			{trace.DispatchWakeup, 6000, []uint64{200, 200, 0, 300, 300, 0}},
			{trace.DispatchSwitch, 7000, []uint64{300, 300, 200, 200, trace.StateSleeping}},
			{trace.DispatchSwitch, 9000, []uint64{200, 200, 0, 0, trace.StateSleeping}},
		} {
			if err := w.Write(trace.MajorDispatch, r.minor, fx, r.t, r.f, ""); err != nil {
				return err
			}
		}
		return nil
	})
	tl := filepath.Join(dir, "tl.json")
	off := filepath.Join(dir, "off.folded")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--pid", "100", "-sched", "--offcpu", off, "--timeline", tl); code != 0 {
		t.Fatalf("post: %d %s %s", code, out, errs)
	}
	var sj schedJSON
	b, err := os.ReadFile(filepath.Join(dir, "sched.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sj); err != nil {
		t.Fatal(err)
	}
	tids := map[uint32]bool{}
	for _, th := range sj.Threads {
		tids[th.TID] = true
	}
	if !tids[100] || !tids[200] || tids[300] || len(tids) != 2 {
		t.Errorf("sched.json of --pid 100 has the threads %v, want 100 and the child 200", tids)
	}
	folded, err := os.ReadFile(off)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(folded), "-200;[sleeping]") || strings.Contains(string(folded), "-300;") {
		t.Errorf("off-CPU profile of --pid 100:\n%s", folded)
	}
	d := checkTimeline(t, tl)
	states := map[uint64]int{}
	for _, ev := range d.events {
		if ev.Ph == "X" && ev.Tid != nil && ev.Name != "" && ev.Cat != "interrupt" {
			states[*ev.Tid]++
		}
	}
	if states[100] == 0 || states[200] == 0 || states[300] != 0 {
		t.Errorf("state slices by thread in the time line of --pid 100: %v, want 100's and 200's", states)
	}
}

// A wrap-mode trace keeps the newest records of each CPU's buffer: where
// a CPU's buffer wrapped, its records begin later than the trace. The
// scheduling reports count the threads' time before every CPU's records
// begin as unknown, not as the state a record of the other CPUs left
// them in. CPU 0 wrapped and its records begin at 5 ms (an interrupt);
// the thread 300, made at 1 ms (its MTE record, never overwritten), first
// runs at 6 ms on CPU 0, where 400, running since before, switches out.
func TestSchedWrapBegin(t *testing.T) {
	dir := t.TempDir()
	var m trace.Writer
	cpu := make([]trace.Writer, 2)
	fx := trace.LayoutFixed
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 0, []uint64{100, 1}, "server"))
	must(m.Write(trace.MajorMTE, trace.MTEFork, fx, 1e6, []uint64{100, 100, 100, 300, 1}, ""))
	must(cpu[1].Write(trace.MajorDispatch, trace.DispatchSwitch, fx, 500_000, []uint64{0, 0, 100, 102, 0}, ""))
	must(cpu[0].Write(trace.MajorInterrupt, trace.IntrSoft, fx, 5e6, []uint64{3}, ""))
	must(cpu[0].Write(trace.MajorInterrupt, trace.IntrSoft|trace.ExitBit, fx, 5e6+1000, []uint64{3}, ""))
	must(cpu[0].Write(trace.MajorDispatch, trace.DispatchSwitch, fx, 6e6, []uint64{100, 400, 100, 300, trace.StateSleeping}, ""))
	must(cpu[0].Write(trace.MajorDispatch, trace.DispatchSwitch, fx, 8e6, []uint64{100, 300, 0, 0, trace.StateSleeping}, ""))
	must(cpu[1].Write(trace.MajorDispatch, trace.DispatchSwitch, fx, 19e6, []uint64{100, 102, 0, 0, trace.StateSleeping}, ""))
	must(cpu[1].Write(trace.MajorSys, trace.SysTraceOff, fx, 20e6, nil, ""))
	path := filepath.Join(dir, "wrap.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 2, Mode: nrm2.ModeWrap, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	for c := range cpu {
		must(w.WriteChunk(nrm2.ChunkTrace, uint32(c), cpu[c].Buf))
	}
	must(w.Close(0, []nrm2.CPUStats{{Records: 4, Lost: 1000}, {Records: 3}}))
	if out, errs, code := runPost(t, dir, "-r", path, "-sched"); code != 0 {
		t.Fatalf("post: %d %s %s", code, out, errs)
	}
	var sj schedJSON
	b, err := os.ReadFile(filepath.Join(dir, "sched.json"))
	must(err)
	must(json.Unmarshal(b, &sj))
	got := map[uint32]map[string]uint64{}
	for _, th := range sj.Threads {
		got[th.TID] = th.StateNs
	}
	if s := got[300]; s["runqueue"] != 0 || s["unknown"] != 5e6 || s["running"] != 2e6 {
		t.Errorf("thread 300 (made at 1 ms, first runs at 6 ms, CPU 0's records from 5 ms): %v", s)
	}
	if s := got[400]; s["running"] != 1e6 || s["unknown"] != 5e6 {
		t.Errorf("thread 400 (switched out at 6 ms, CPU 0's records from 5 ms): %v", s)
	}
	if s := got[102]; s["running"] != 14e6 || s["unknown"] != 5e6 {
		t.Errorf("thread 102 (on CPU 1 from 0.5 to 19 ms; the reports begin at 5 ms on every CPU): %v", s)
	}
	if text := readString(t, filepath.Join(dir, "sched.out")); !strings.Contains(text, "Every CPU's records from 0.005 s on") {
		t.Errorf("sched.out does not say where the records begin:\n%s", text)
	}
}
