package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/analysis/merge"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
)

// post --merge of a trace with FIG. 18A's method events, the interpreter
// and B's compiled code as JIT_LOAD records, and ticks: the ticks in the
// interpreter (named by A2N from the JIT_LOAD record) land in the
// interpreted method current at their time, the tick in B's compiled code
// in B, and merge.out and the pprof profile hold the FIG. 20 tree.
func TestPostMerge(t *testing.T) {
	dir := t.TempDir()
	const pid, tid = 777, 778
	const interp, bCode = 0x7000000, 0x7100000
	path := mergeTrace(t, dir, func(w recordWriter) {
		w(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{pid, 1}, "java")
		w(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, 1, []uint64{pid, tid, interp, 0x10000}, "Interpreter")
		w(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, 1, []uint64{pid, tid, bCode, 0x100}, "B")
		ids := map[string]uint64{"A": 1, "B": 2, "C": 3, "X": 4}
		for n, id := range ids {
			w(trace.MajorJITLoad, trace.JITMethod, trace.LayoutString, 1, []uint64{pid, id}, n)
		}
		seq := []string{"+C", "+A", "+B", "-B", "+B", "+B", "-B", "-B", "-A", "+B", "+A", "+B", "+A", "-A", "-B", "+X", "-X", "-A", "-B", "-C"}
		for i, ev := range seq {
			minor := merge.MinorEntry
			if ev[0] == '-' {
				minor = merge.MinorExit
			}
			tm := uint64(1000 + 100*i)
			w(trace.MajorInterp, minor, trace.LayoutWords, tm, []uint64{pid, tid, ids[ev[1:]], 0}, "")
			if i%2 == 0 && i < 19 {
				ip := uint64(interp + 0x40)
				if i == 2 {
					ip = bCode + 0x10 // B is current: its compiled code
				}
				w(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm+50, []uint64{pid, tid, ip, 0}, "")
			}
		}
	})
	pb := filepath.Join(dir, "m.pb.gz")
	out, errs, code := runPost(t, dir, "-r", path, "--merge", "--merge-pprof", pb)
	if code != 0 {
		t.Fatalf("post: %d\n%s\n%s", code, out, errs)
	}
	text, err := os.ReadFile(filepath.Join(dir, "merge.out"))
	if err != nil {
		t.Fatal(err)
	}
	// Lvl RL Calls Base Cum Ticks CumTicks Name (times in 100 ns steps).
	want := []string{
		"0 1 1 0 1900 0 10 pt_pidtid",
		"1 1 1 300 1900 3 10 - C",
		"2 1 1 300 700 0 3 - - A",
		"3 1 2 300 400 3 3 - - - B",
		"4 2 1 100 100 0 0 - - - - B",
		"2 1 1 200 900 0 4 - - B",
		"3 1 1 300 700 3 4 - - - A",
		"4 2 1 200 300 0 1 - - - - B",
		"5 2 1 100 100 1 1 - - - - - A",
		"4 1 1 100 100 0 0 - - - - X",
	}
	var got []string
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "Flat:") {
			break // the tree ends here
		}
		f := strings.Fields(l)
		if len(f) >= 8 && f[0] != "Lvl" && f[0] != "Merged" && f[0] != "Thread" && f[0] != "Agent" {
			got = append(got, strings.Join(f, " "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("merge.out tree:\n%s\nwant:\n%s\n\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), text)
	}
	if !strings.Contains(string(text), "Thread pid 777 tid 778") || !strings.Contains(string(text), "ArcFlow") {
		t.Errorf("merge.out lacks the thread or the ArcFlow:\n%s", text)
	}
	if !strings.Contains(string(text), "\nAgent : pid 777: 0 of its 10 ticks (0.0 %) interrupted the JProf agent: ") {
		t.Errorf("merge.out lacks the agent's share (none) of the process whose events it merged:\n%.600s", text)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var ticks, tm int64
	for _, s := range p.Sample {
		ticks += s.Value[0]
		tm += s.Value[1]
	}
	if len(p.SampleType) != 2 || p.SampleType[0].Type != "ticks" || p.SampleType[1].Type != "time" || ticks != 10 || tm != 1900 {
		t.Errorf("pprof: types %v, %d ticks, time %d; want ticks and time, 10, 1900", p.SampleType, ticks, tm)
	}
}

// recordWriter writes one record into a test trace.
type recordWriter func(major uint16, minor uint32, layout int, tm uint64, f []uint64, s string)

// mergeTrace writes the records fill gives into a one-CPU trace in dir.
func mergeTrace(t *testing.T, dir string, fill func(w recordWriter)) string {
	t.Helper()
	b, err := tracebuf.New(1<<16, tracebuf.Normal)
	if err != nil {
		t.Fatal(err)
	}
	fill(func(major uint16, minor uint32, layout int, tm uint64, f []uint64, s string) {
		t.Helper()
		if ok, err := b.Write(major, minor, layout, tm, f, s); !ok || err != nil {
			t.Fatalf("write %v %v", ok, err)
		}
	})
	path := filepath.Join(dir, "m.nrm2")
	nw, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, Mode: nrm2.ModeNormal, TraceBufSize: 1 << 16, MTEBufSize: tracebuf.MinSegment,
		SegmentSize: uint64(tracebuf.SegmentSize(1 << 16)), RateHz: 1000, KernelRelease: "6.1.0-test", Hostname: "host"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range b.Snapshot() {
		if err := nw.WriteChunk(nrm2.ChunkTrace, 0, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := nw.Close(0, make([]nrm2.CPUStats, 1)); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMergeAgentShare: merge.out says, for each process whose method
// events it merged, how many of its ticks interrupted the JProf agent
// (a tick in libjprof.so: recording an event), and says nothing of a
// process without events.
func TestMergeAgentShare(t *testing.T) {
	dir := t.TempDir()
	const pid, tid, other = 777, 778, 900
	const interp, agent = 0x7000000, 0x7200000
	path := mergeTrace(t, dir, func(w recordWriter) {
		w(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{pid, 1}, "java")
		w(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 1, []uint64{pid, agent, 0x10000, 0, 5}, "/opt/perfinsp/bin/libjprof.so")
		w(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, 1, []uint64{pid, tid, interp, 0x10000}, "Interpreter")
		w(trace.MajorJITLoad, trace.JITMethod, trace.LayoutString, 1, []uint64{pid, 1}, "A")
		w(trace.MajorInterp, merge.MinorEntry, trace.LayoutWords, 100, []uint64{pid, tid, 1, 0}, "")
		for i, ip := range []uint64{interp + 0x40, agent + 0x10, interp + 0x40, interp + 0x80} {
			w(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, uint64(200+10*i), []uint64{pid, tid, ip, 0}, "")
		}
		w(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 250, []uint64{other, other, agent + 0x10, 0}, "")
		w(trace.MajorInterp, merge.MinorExit, trace.LayoutWords, 300, []uint64{pid, tid, 1, 0}, "")
	})
	out, errs, code := runPost(t, dir, "-r", path, "--merge")
	if code != 0 {
		t.Fatalf("post: %d\n%s\n%s", code, out, errs)
	}
	text, err := os.ReadFile(filepath.Join(dir, "merge.out"))
	if err != nil {
		t.Fatal(err)
	}
	want := "\nAgent : pid 777: 1 of its 4 ticks (25.0 %) interrupted the JProf agent (/opt/perfinsp/bin/libjprof.so): "
	if !strings.Contains(string(text), want) || !strings.Contains(out, "post: pid 777: 1 of its 4 ticks (25.0 %)") {
		t.Errorf("merge.out or post's output lacks %q:\n%s\n%.600s", want, out, text)
	}
	if strings.Contains(string(text), "Agent : pid 900") {
		t.Errorf("a share for pid 900, which has no method events:\n%.600s", text)
	}
}
