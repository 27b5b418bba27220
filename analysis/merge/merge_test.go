package merge

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
)

// fig18A is the event sequence of FIG. 18A: at time i, enter (+) or return
// from (-) a routine.
var fig18A = []string{"+C", "+A", "+B", "-B", "+B", "+B", "-B", "-B", "-A", "+B", "+A", "+B", "+A", "-A", "-B", "+X", "-X", "-A", "-B", "-C"}

var methodIDs = map[string]uint64{"C": 0x7f0000000001, "A": 0x7f0000000002, "B": 0x7f0000000003, "X": 0x7f0000000004}

const (
	pid, tid    = 4242, 4243
	interpPC    = 0x10000 // in the generated interpreter
	nativePC    = 0x20000 // in a native function
	clockScale  = 1000    // trace clock units per FIG. 18A time step
	tickOffset  = 500     // ticks half a step after the event
	eventCPU    = 0
	tickCPU     = 1
	interpreter = "Interpreter"
)

// buildFig18 writes a two-CPU trace file: FIG. 18A's events on CPU 0 (as
// jitted or interpreted method entry/exit records), FIG. 18B's ticks (one
// every two steps, in the interpreter) on CPU 1, so the merge depends on
// the CPUs' buffers being merged by time. extra writes more records, in
// time order, into a third CPU's buffer.
func buildFig18(t *testing.T, extra func(tick *tracebuf.Buffer)) *nrm2.File {
	t.Helper()
	must := func(ok bool, err error) {
		t.Helper()
		if err != nil || !ok {
			t.Fatalf("write: ok=%v %v", ok, err)
		}
	}
	bufs := [3]*tracebuf.Buffer{}
	for i := range bufs {
		b, err := tracebuf.New(1<<16, tracebuf.Normal)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = b
	}
	for name, id := range methodIDs {
		must(bufs[eventCPU].Write(trace.MajorJITLoad, trace.JITMethod, trace.LayoutString, 0, []uint64{pid, id}, name))
	}
	for i, ev := range fig18A {
		id := methodIDs[ev[1:]]
		minor := MinorEntry
		if ev[0] == '-' {
			minor = MinorExit
		}
		major := trace.MajorInterp
		if ev[1:] == "B" {
			major = trace.MajorJitted // both kinds of method records
		}
		tm := uint64(i) * clockScale
		must(bufs[eventCPU].Write(major, minor, trace.LayoutWords, tm, []uint64{pid, tid, id & 0xffffffff, id >> 32}, ""))
		if i%2 == 0 && i < 19 {
			must(bufs[tickCPU].Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm+tickOffset, []uint64{pid, tid, interpPC, 0}, ""))
		}
	}
	if extra != nil {
		extra(bufs[2])
	}
	path := filepath.Join(t.TempDir(), "fig18.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 3, Mode: nrm2.ModeNormal, TraceBufSize: 1 << 16, MTEBufSize: tracebuf.MinSegment,
		SegmentSize: uint64(tracebuf.SegmentSize(1 << 16)), RateHz: 1000, KernelRelease: "6.1.0-test", Hostname: "host"})
	if err != nil {
		t.Fatal(err)
	}
	for cpu, b := range bufs {
		for _, s := range b.Snapshot() {
			if err := w.WriteChunk(nrm2.ChunkTrace, uint32(cpu), s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(0, make([]nrm2.CPUStats, 3)); err != nil {
		t.Fatal(err)
	}
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func names(pid uint32, pc uint64, kernel bool) string {
	switch pc {
	case interpPC:
		return interpreter
	case nativePC, nativePC - 1:
		return "memcpy"
	}
	return fmt.Sprintf("0x%x", pc)
}

func mergeFile(t *testing.T, f *nrm2.File) *Merger {
	t.Helper()
	m := New()
	if err := f.Records(func(r *trace.Record) error { return m.Record(r, names) }); err != nil {
		t.Fatal(err)
	}
	m.Finish()
	return m
}

// The golden example of the trace-merge digest: FIG. 18A's events give
// FIG. 20's tree exactly (times in steps of the trace clock), FIG. 26's
// flat values, and FIG. 18B's ticks land in the nodes current at their
// time; ticks in the interpreter go to the interpreted method.
func TestGoldenFig18(t *testing.T) {
	m := mergeFile(t, buildFig18(t, nil))
	if len(m.Threads) != 1 {
		t.Fatalf("%d threads, want 1", len(m.Threads))
	}
	if len(m.Problems) != 0 {
		t.Fatalf("problems: %v", m.Problems)
	}
	want := []string{
		"0/1/1/0/19 pt_pidtid",
		"1/1/1/3/19 C",
		"2/1/1/3/7 A",
		"3/1/2/3/4 B",
		"4/2/1/1/1 B",
		"2/1/1/2/9 B",
		"3/1/1/3/7 A",
		"4/2/1/2/3 B",
		"5/2/1/1/1 A",
		"4/1/1/1/1 X",
	}
	// FIG. 18B: the call stack at each sample, i.e. the ticks per path.
	wantTicks := map[string]uint64{"C": 3, "C/A/B": 3, "C/B/A": 3, "C/B/A/B/A": 1}
	var got []string
	gotTicks := map[string]uint64{}
	m.Threads[0].Root.Walk(func(n *Node) {
		if n.Base%clockScale != 0 || n.Cum%clockScale != 0 {
			t.Errorf("%s: base %d cum %d not whole steps", n.Name, n.Base, n.Cum)
		}
		got = append(got, fmt.Sprintf("%d/%d/%d/%d/%d %s", n.Level, n.RL, n.Calls, n.Base/clockScale, n.Cum/clockScale, n.Name))
		if n.Ticks > 0 {
			var p []string
			for x := n; x.Parent != nil; x = x.Parent {
				p = append([]string{x.Name}, p...)
			}
			gotTicks[strings.Join(p, "/")] = n.Ticks
		}
	})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant (FIG. 20):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fmt.Sprint(gotTicks) != fmt.Sprint(wantTicks) {
		t.Errorf("ticks per path %v, want %v (FIG. 18B)", gotTicks, wantTicks)
	}
	if m.Ticks != 10 || m.Threads[0].Root.CumTicks != 10 || m.Events != 20 {
		t.Errorf("ticks %d (root cum %d), events %d; want 10, 10, 20", m.Ticks, m.Threads[0].Root.CumTicks, m.Events)
	}
	flat := map[string]string{}
	for _, r := range m.Flat() {
		flat[r.Name] = fmt.Sprintf("%d/%d/%d/%d", r.Calls, r.Base/clockScale, r.Cum/clockScale, r.Cum2/clockScale)
	}
	wantFlat := map[string]string{"pt_pidtid": "1/0/19/19", "C": "1/3/19/19", "A": "3/7/14/15", "B": "5/8/13/17", "X": "1/1/1/1"}
	if fmt.Sprint(flat) != fmt.Sprint(wantFlat) {
		t.Errorf("flat %v, want (FIG. 26) %v", flat, wantFlat)
	}
}

// The ArcFlow stanzas keep their invariants on the golden tree, and A's
// stanza has FIG. 27's parent rows.
func TestArcFlowInvariants(t *testing.T) {
	m := mergeFile(t, buildFig18(t, nil))
	stanzas := m.ArcFlow()
	if len(stanzas) != 5 {
		t.Fatalf("%d stanzas, want 5", len(stanzas))
	}
	var seenA bool
	for _, st := range stanzas {
		var self ArcRow
		var pc, pb, pcum, cc, rl1Base uint64
		var parents []string
		for _, r := range st {
			switch r.Source {
			case "Self":
				self = r
			case "Parent", "rParent":
				pc += r.Calls
				pb += r.Base
				if r.Source == "Parent" {
					pcum += r.Cum
					rl1Base += r.Base
				}
				parents = append(parents, fmt.Sprintf("%s %s %d %d %d", r.Source, r.Name, r.Calls, r.Base/clockScale, r.Cum/clockScale))
			case "Child":
				cc += r.Cum
			}
		}
		if self.Name == RootName {
			rl1Base, pc, pb, pcum = self.Base, self.Calls, self.Base, self.Cum
		}
		if pc != self.Calls || pb != self.Base || pcum != self.Cum || cc != self.Cum-rl1Base {
			t.Errorf("%s: Σparent calls %d base %d cum %d, Σchild cum %d; self %+v (outermost base %d)", self.Name, pc, pb, pcum, cc, self, rl1Base)
		}
		if self.Name == "A" {
			seenA = true
			if w := "[Parent C 1 3 7 Parent B 1 3 7 rParent B 1 1 1]"; fmt.Sprint(parents) != w {
				t.Errorf("A's parents %v, want %s (FIG. 27)", parents, w)
			}
		}
	}
	if !seenA {
		t.Error("no stanza for A")
	}
	var buf bytes.Buffer
	if err := m.WriteArcFlow(&buf, "steps"); err != nil || !strings.Contains(buf.String(), "[2] A") {
		t.Errorf("arcflow report (err %v):\n%s", err, buf.String())
	}
}

// Ticks outside the interpreter and the current method hang below the
// current node as sampled nodes; a call stack moves its tick below the
// deepest frame of the event stack it holds, leaving out interpreter
// frames; a stack whose interrupted frame is the interpreter leaves the
// tick with the interpreted method.
func TestSampledNodes(t *testing.T) {
	pcs := func(root2leaf ...uint64) string { // UNWIND bytes: the interrupted PC first
		var b []byte
		for i := len(root2leaf) - 1; i >= 0; i-- {
			pc := root2leaf[i]
			if i != len(root2leaf)-1 {
				pc++ // return addresses
			}
			for k := 0; k < 8; k++ {
				b = append(b, byte(pc>>(8*k)))
			}
		}
		return string(b)
	}
	const cPC, aPC, libPC, basePC, stubPC = 0x30000, 0x30100, 0x40000, 0x50000, 0x50100
	nm := map[uint64]string{cPC: "C", aPC: "A", libPC: "libjvm_helper", basePC: "start_thread", stubPC: "call_stub"}
	f := buildFig18(t, func(b *tracebuf.Buffer) {
		// at step 1.6 (stack C A): a tick in a helper called from C's frame... the stack says C→A→helper→memcpy
		b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 1*clockScale+600, []uint64{pid, tid, nativePC, 0}, "")
		b.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, 1*clockScale+600, []uint64{pid, tid, 0}, pcs(cPC, aPC, interpPC, libPC, nativePC))
		// at step 3.6 (stack C A): a tick in the interpreter with its stack
		b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 3*clockScale+600, []uint64{pid, tid, interpPC, 0}, "")
		b.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, 3*clockScale+600, []uint64{pid, tid, 0}, pcs(cPC, aPC, interpPC))
		// at step 10.6 (stack C B A): a native tick, no stack
		b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 10*clockScale+600, []uint64{pid, tid, nativePC, 0}, "")
		// at step 16.6 (stack C B A, all interpreted): the stack names no
		// event frame; the frames above the last interpreter frame (the
		// thread's native base) are left out
		b.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 16*clockScale+600, []uint64{pid, tid, nativePC, 0}, "")
		b.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, 16*clockScale+600, []uint64{pid, tid, 0}, pcs(basePC, stubPC, interpPC, interpPC, nativePC))
	})
	m := New()
	name := func(pid uint32, pc uint64, kernel bool) string {
		if n, ok := nm[pc]; ok {
			return n
		}
		return names(pid, pc, kernel)
	}
	if err := f.Records(func(r *trace.Record) error { return m.Record(r, name) }); err != nil {
		t.Fatal(err)
	}
	m.Finish()
	ticks := map[string]uint64{}
	m.Threads[0].Root.Walk(func(n *Node) {
		var p []string
		for x := n; x.Parent != nil; x = x.Parent {
			s := x.Name
			if x.Sampled {
				s = "+" + s
			}
			p = append([]string{s}, p...)
		}
		if n.Ticks > 0 {
			ticks[strings.Join(p, "/")] = n.Ticks
		}
	})
	want := map[string]uint64{"C": 3, "C/A": 1, "C/A/B": 3, "C/A/+libjvm_helper/+memcpy": 1, "C/B/A": 3, "C/B/A/+memcpy": 2, "C/B/A/B/A": 1}
	if fmt.Sprint(ticks) != fmt.Sprint(want) {
		t.Errorf("ticks %v\nwant  %v", ticks, want)
	}
	if m.Ticks != 14 || m.Threads[0].Root.CumTicks != 14 {
		t.Errorf("ticks %d, root cum %d; want 14", m.Ticks, m.Threads[0].Root.CumTicks)
	}
	var buf bytes.Buffer
	if err := m.WriteTree(&buf, "ns"); err != nil || !strings.Contains(buf.String(), "- - - +libjvm_helper") {
		t.Errorf("tree report (err %v):\n%s", err, buf.String())
	}
	// pprof: both values; the sampled native tick's stack is memcpy←A←B←C.
	var pb bytes.Buffer
	if err := m.WritePprof(&pb, "ns"); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&pb)
	if err != nil {
		t.Fatal(err)
	}
	var tks, tm int64
	found := false
	for _, s := range p.Sample {
		tks += s.Value[0]
		tm += s.Value[1]
		var fr []string
		for _, l := range s.Location {
			fr = append(fr, l.Line[0].Function.Name)
		}
		if strings.Join(fr, ";") == fmt.Sprintf("memcpy;A;B;C;pid_%d_tid_%d", pid, tid) && s.Value[0] == 2 {
			found = true
		}
	}
	if tks != 14 || tm != 19*clockScale || !found {
		t.Errorf("pprof: %d ticks, time %d, memcpy←A←B←C found %v", tks, tm, found)
	}
}

// Unbalanced streams: an exit at the root and an exit of a method not on
// the stack are counted, not fatal; an exit below the top pops the frames
// above it (an exception); an unknown event minor is an error naming it.
func TestUnbalanced(t *testing.T) {
	m := New()
	m.Exit(1, 1, 0, "A") // at the root
	m.Enter(1, 1, 1, "main")
	m.Enter(1, 1, 2, "f")
	m.Enter(1, 1, 3, "g")
	m.Exit(1, 1, 5, "f") // g's exit missing: thrown through
	m.Enter(1, 1, 6, "h")
	m.Exit(1, 1, 7, "h")
	m.Exit(1, 1, 8, "main")
	m.Finish()
	var rows []string
	for _, r := range m.Threads[0].Rows() {
		rows = append(rows, fmt.Sprintf("%d %s %d/%d", r.Lvl, r.Name, r.Base, r.Cum))
	}
	if w := "[0 pt_pidtid 1/8 1 main 3/7 2 f 1/3 3 g 2/2 2 h 1/1]"; fmt.Sprint(rows) != w {
		t.Errorf("rows %v, want %s", rows, w)
	}
	if len(m.Problems) != 2 {
		t.Errorf("problems %v, want the root exit and the repair", m.Problems)
	}
	rec := &trace.Record{Major: trace.MajorJitted, Minor: 0x11, Fixed: []uint64{1, 1, 0, 0}, Time: 9}
	if err := m.Record(rec, nil); err == nil || !strings.Contains(err.Error(), "minor 0x11") {
		t.Errorf("unknown minor: %v", err)
	}
	short := &trace.Record{Major: trace.MajorInterp, Minor: MinorEntry, Fixed: []uint64{1}}
	if err := m.Record(short, nil); err == nil {
		t.Error("a short event record was accepted")
	}
}

// Records of one thread that reach the trace out of time order (an agent's
// batches written after the daemon's ticks) are merged in time order.
func TestOutOfOrder(t *testing.T) {
	m := New()
	m.Tick(1, 1, 5, interpreter) // written first, taken at 5
	m.Tick(1, 1, 12, interpreter)
	m.Enter(1, 1, 1, "main")
	m.Enter(1, 1, 4, "work")
	m.Exit(1, 1, 9, "work")
	m.Exit(1, 1, 10, "main")
	m.Finish()
	var rows []string
	for _, r := range m.Threads[0].Rows() {
		rows = append(rows, fmt.Sprintf("%s %d/%d", r.Name, r.Base, r.Ticks))
	}
	if w := "[pt_pidtid 0/1 main 4/0 work 5/1]"; fmt.Sprint(rows) != w {
		t.Errorf("rows %v, want %s", rows, w)
	}
}

// A method's JIT_METHOD can come after its first events in the merged trace
// (the agent's batches reach a CPU's buffer after records of later times,
// as in the VM test's daemon run): the events still carry its name, and a
// name known at the event's time is the one kept.
func TestMethodNamedAfterItsEvents(t *testing.T) {
	m := New()
	ev := func(minor uint32, tm, id uint64) {
		t.Helper()
		rec := &trace.Record{Major: trace.MajorJitted, Minor: minor, Time: tm, Fixed: []uint64{1, 2, id, 0}}
		if err := m.Record(rec, nil); err != nil {
			t.Fatal(err)
		}
	}
	name := func(tm, id uint64, n string) {
		t.Helper()
		rec := &trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITMethod, Time: tm, Fixed: []uint64{1, id}, Str: n}
		if err := m.Record(rec, nil); err != nil {
			t.Fatal(err)
		}
	}
	name(1, 7, "Worker.run")
	ev(MinorEntry, 10, 7)
	ev(MinorEntry, 11, 3) // named below, read later
	ev(MinorExit, 20, 3)
	name(5, 3, "Work.hot")
	ev(MinorExit, 30, 7)
	name(40, 7, "Renamed.later") // an id named anew: the earlier events keep their name
	m.Finish()
	var rows []string
	for _, r := range m.Threads[0].Rows() {
		rows = append(rows, r.Name)
	}
	if w := "[pt_pidtid Worker.run Work.hot]"; fmt.Sprint(rows) != w {
		t.Errorf("rows %v, want %s", rows, w)
	}
	if len(m.Problems) != 0 {
		t.Errorf("problems: %v", m.Problems)
	}
}
