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
	b, err := tracebuf.New(1<<16, tracebuf.Normal)
	if err != nil {
		t.Fatal(err)
	}
	w := func(major uint16, minor uint32, layout int, tm uint64, f []uint64, s string) {
		t.Helper()
		if ok, err := b.Write(major, minor, layout, tm, f, s); !ok || err != nil {
			t.Fatalf("write %v %v", ok, err)
		}
	}
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
		if len(f) >= 8 && f[0] != "Lvl" && f[0] != "Merged" && f[0] != "Thread" {
			got = append(got, strings.Join(f, " "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("merge.out tree:\n%s\nwant:\n%s\n\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), text)
	}
	if !strings.Contains(string(text), "Thread pid 777 tid 778") || !strings.Contains(string(text), "ArcFlow") {
		t.Errorf("merge.out lacks the thread or the ArcFlow:\n%s", text)
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
