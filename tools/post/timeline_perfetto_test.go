package main

import (
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// The reader below decodes a Perfetto trace apart from the writer
// (format/perfetto): from the wire format and the field numbers of
// Perfetto's .proto files, named at each message.

// pfSwitch is one sched_switch (ftrace/sched.proto: SchedSwitchFtraceEvent).
type pfSwitch struct {
	ts                   uint64
	prev, next           uint64
	prevComm, nextComm   string
	prevState            uint64
	hasPrevPID, hasState bool
}

// pfEvent is one TrackEvent (track_event/track_event.proto).
type pfEvent struct {
	ts    uint64
	typ   uint64 // 1 begin, 2 end, 3 instant
	track uint64
	cat   string
	name  string
	stack []string // the callstack's function names, root first
	args  map[string]any
}

// pfTrack is one TrackDescriptor (track_event/track_descriptor.proto).
type pfTrack struct {
	name, threadName, procName string
	pid, tid, parent           uint64
	thread, process            bool
}

// pfDoc is what readPerfetto finds in a trace.
type pfDoc struct {
	switches      map[uint64][]pfSwitch // by CPU
	wakings       int
	newTasks      int
	exits         int
	treeThreads   map[uint64]string // tid -> name (ProcessTree)
	treeTGID      map[uint64]uint64
	treeProcs     map[uint64]string
	tracks        map[uint64]*pfTrack
	events        []pfEvent
	maxDepth      int
	instrOf       map[string][]uint64 // call slices' instructions at their end, by name
	callBegins    int                 // slices of category "call"
	kernelSlices  map[string]int      // slices of category syscall, fault, interrupt
	packets, size int
}

type pbField struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// pbFields splits a message into its fields.
func pbFields(t *testing.T, b []byte) []pbField {
	t.Helper()
	var fs []pbField
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := pbField{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		default:
			t.Fatalf("field %d: wire type %d", num, typ)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		fs = append(fs, f)
	}
	return fs
}

// pfInterned is a sequence's interned data (interned_data/interned_data.proto).
type pfInterned struct {
	cats, names, annNames, annStrings, funcNames map[uint64]string
	frames                                       map[uint64]uint64   // Frame iid -> function name iid
	stacks                                       map[uint64][]uint64 // Callstack iid -> frame iids, root first
}

// entry reads an {iid = 1, name/str = 2} message into m, failing on an
// iid defined twice.
func (in *pfInterned) entry(t *testing.T, m map[uint64]string, b []byte) {
	t.Helper()
	var iid uint64
	var s string
	for _, f := range pbFields(t, b) {
		switch f.num {
		case 1:
			iid = f.v
		case 2:
			s = string(f.b)
		}
	}
	if iid == 0 {
		t.Fatal("an interned entry without its iid")
	}
	if old, ok := m[iid]; ok && old != s {
		t.Fatalf("iid %d interned as %q, then as %q", iid, old, s)
	}
	m[iid] = s
}

func (in *pfInterned) read(t *testing.T, b []byte) {
	t.Helper()
	for _, f := range pbFields(t, b) {
		switch f.num {
		case 1: // event_categories: EventCategory
			in.entry(t, in.cats, f.b)
		case 2: // event_names: EventName
			in.entry(t, in.names, f.b)
		case 3: // debug_annotation_names
			in.entry(t, in.annNames, f.b)
		case 29: // debug_annotation_string_values: InternedString
			in.entry(t, in.annStrings, f.b)
		case 5: // function_names: InternedString
			in.entry(t, in.funcNames, f.b)
		case 6: // frames: Frame (profiling/profile_common.proto)
			var iid, fn uint64
			for _, g := range pbFields(t, f.b) {
				switch g.num {
				case 1:
					iid = g.v
				case 2:
					fn = g.v
				}
			}
			in.frames[iid] = fn
		case 7: // callstacks: Callstack, frame_ids = 2 (packed or not)
			var iid uint64
			var ids []uint64
			for _, g := range pbFields(t, f.b) {
				switch {
				case g.num == 1:
					iid = g.v
				case g.num == 2 && g.typ == protowire.VarintType:
					ids = append(ids, g.v)
				case g.num == 2:
					for p := g.b; len(p) > 0; {
						v, n := protowire.ConsumeVarint(p)
						if n < 0 {
							t.Fatal("bad packed frame_ids")
						}
						ids, p = append(ids, v), p[n:]
					}
				}
			}
			in.stacks[iid] = ids
		}
	}
}

func str(t *testing.T, m map[uint64]string, iid uint64, what string) string {
	t.Helper()
	s, ok := m[iid]
	if !ok {
		t.Fatalf("%s iid %d used before it is interned", what, iid)
	}
	return s
}

// readPerfetto decodes a --timeline file as Perfetto's trace.proto
// defines it, and fails the test where trace_processor would meet
// something wrong: a packet that uses interned data not given before on
// its sequence (or before the sequence cleared its state), a TrackEvent
// on a track not described, an end with no slice open, a slice never
// ended, time going back on a track, a thread track or a thread of the
// scheduling without its name, a sample without its call stack or whose
// stack's leaf is not its name.
func readPerfetto(t *testing.T, path string) pfDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := pfDoc{switches: map[uint64][]pfSwitch{}, treeThreads: map[uint64]string{}, treeTGID: map[uint64]uint64{}, treeProcs: map[uint64]string{},
		tracks: map[uint64]*pfTrack{}, instrOf: map[string][]uint64{}, kernelSlices: map[string]int{}, size: len(b)}
	in := pfInterned{cats: map[uint64]string{}, names: map[uint64]string{}, annNames: map[uint64]string{}, annStrings: map[uint64]string{},
		funcNames: map[uint64]string{}, frames: map[uint64]uint64{}, stacks: map[uint64][]uint64{}}
	cleared := map[uint64]bool{}
	type open struct {
		name string
		cat  string
	}
	stacks := map[uint64][]open{}
	last := map[uint64]uint64{}
	for _, pf := range pbFields(t, b) { // Trace (trace.proto): packet = 1
		if pf.num != 1 || pf.typ != protowire.BytesType {
			t.Fatalf("Trace field %d (want only packets, field 1)", pf.num)
		}
		d.packets++
		var ts, seq, flags uint64
		var te, interned []byte
		fields := pbFields(t, pf.b)
		for _, f := range fields { // TracePacket (trace_packet.proto)
			switch f.num {
			case 8:
				ts = f.v
			case 10:
				seq = f.v
			case 13:
				flags = f.v
			case 12:
				interned = f.b
			case 11:
				te = f.b
			}
		}
		if flags&1 != 0 { // SEQ_INCREMENTAL_STATE_CLEARED
			cleared[seq] = true
		}
		if interned != nil || flags&2 != 0 {
			if !cleared[seq] {
				t.Fatalf("packet %d needs the incremental state of sequence %d, not cleared before", d.packets, seq)
			}
		}
		if interned != nil {
			in.read(t, interned)
		}
		for _, f := range fields {
			switch f.num {
			case 1: // ftrace_events: FtraceEventBundle
				d.bundle(t, f.b)
			case 2: // process_tree: ProcessTree (ps/process_tree.proto)
				d.processTree(t, f.b)
			case 60: // track_descriptor: TrackDescriptor
				d.trackDescriptor(t, f.b)
			}
		}
		if te == nil {
			continue
		}
		ev := pfEvent{ts: ts, args: map[string]any{}}
		for _, f := range pbFields(t, te) { // TrackEvent (track_event/track_event.proto)
			switch f.num {
			case 9:
				ev.typ = f.v
			case 11:
				ev.track = f.v
			case 3:
				ev.cat = str(t, in.cats, f.v, "category")
			case 10:
				ev.name = str(t, in.names, f.v, "event name")
			case 56: // callstack_iid
				ids, ok := in.stacks[f.v]
				if !ok {
					t.Fatalf("callstack iid %d used before it is interned", f.v)
				}
				for _, id := range ids {
					fn, ok := in.frames[id]
					if !ok {
						t.Fatalf("frame iid %d used before it is interned", id)
					}
					ev.stack = append(ev.stack, str(t, in.funcNames, fn, "function name"))
				}
			case 4: // debug_annotations: DebugAnnotation (debug_annotation.proto)
				var k string
				var v any
				for _, g := range pbFields(t, f.b) {
					switch g.num {
					case 1:
						k = str(t, in.annNames, g.v, "annotation name")
					case 3:
						v = g.v
					case 17:
						v = str(t, in.annStrings, g.v, "annotation string")
					case 6:
						v = string(g.b)
					}
				}
				ev.args[k] = v
			}
		}
		tr := d.tracks[ev.track]
		if tr == nil {
			t.Fatalf("packet %d: a TrackEvent on track %#x, not described before", d.packets, ev.track)
		}
		if ts < last[ev.track] {
			t.Fatalf("packet %d: an event at %d on track %#x, after one at %d", d.packets, ts, ev.track, last[ev.track])
		}
		last[ev.track] = ts
		switch ev.typ {
		case 1:
			if ev.name == "" {
				t.Fatalf("packet %d: a slice without a name", d.packets)
			}
			stacks[ev.track] = append(stacks[ev.track], open{ev.name, ev.cat})
			d.maxDepth = max(d.maxDepth, len(stacks[ev.track]))
			switch ev.cat {
			case "call":
				d.callBegins++
			case "syscall", "fault", "interrupt":
				d.kernelSlices[ev.cat]++
			}
		case 2:
			s := stacks[ev.track]
			if len(s) == 0 {
				t.Fatalf("packet %d: an end on track %#x with no slice open", d.packets, ev.track)
			}
			top := s[len(s)-1]
			if top.cat == "call" || top.cat == "base" || top.cat == "signal" {
				n, ok := ev.args["instructions"].(uint64)
				if !ok {
					t.Fatalf("packet %d: the end of %s without its instructions", d.packets, top.name)
				}
				d.instrOf[top.name] = append(d.instrOf[top.name], n)
			}
			stacks[ev.track] = s[:len(s)-1]
		case 3:
			if ev.cat == "sample" {
				if len(ev.stack) == 0 || ev.stack[len(ev.stack)-1] != ev.name {
					t.Fatalf("packet %d: sample %q with the stack %q", d.packets, ev.name, ev.stack)
				}
				if !tr.thread {
					t.Fatalf("packet %d: a sample on track %q, not a thread's", d.packets, tr.name)
				}
			}
		default:
			t.Fatalf("packet %d: TrackEvent type %d", d.packets, ev.typ)
		}
		d.events = append(d.events, ev)
	}
	for k, s := range stacks {
		if len(s) > 0 {
			t.Fatalf("track %#x: %d slices never ended (%s first)", k, len(s), s[0].name)
		}
	}
	for uuid, tr := range d.tracks {
		if tr.thread && tr.threadName == "" || tr.process && tr.procName == "" || !tr.thread && !tr.process && tr.name == "" {
			t.Errorf("track %#x without its name: %+v", uuid, tr)
		}
		if tr.parent != 0 && d.tracks[tr.parent] == nil {
			t.Errorf("track %#x: its parent %#x is not described", uuid, tr.parent)
		}
	}
	for cpu, sw := range d.switches {
		for i, s := range sw {
			if !s.hasPrevPID || !s.hasState {
				t.Fatalf("CPU %d switch %d without prev_pid or prev_state", cpu, i)
			}
			if i > 0 && s.ts < sw[i-1].ts {
				t.Fatalf("CPU %d: switch %d at %d, after one at %d", cpu, i, s.ts, sw[i-1].ts)
			}
			for _, tid := range []uint64{s.prev, s.next} {
				if tid != 0 && d.treeThreads[tid] == "" {
					t.Errorf("CPU %d: thread %d switched without a name in the process tree", cpu, tid)
				}
			}
			if s.prev != 0 && s.prevComm == "" || s.next != 0 && s.nextComm == "" {
				t.Errorf("CPU %d: switch %d without its comms: %+v", cpu, i, s)
			}
		}
	}
	return d
}

// bundle reads a FtraceEventBundle (ftrace/ftrace_event_bundle.proto).
func (d *pfDoc) bundle(t *testing.T, b []byte) {
	t.Helper()
	var cpu uint64
	var evs [][]byte
	for _, f := range pbFields(t, b) {
		switch f.num {
		case 1:
			cpu = f.v
		case 2:
			evs = append(evs, f.b)
		}
	}
	for _, e := range evs { // FtraceEvent (ftrace/ftrace_event.proto)
		var ts uint64
		for _, f := range pbFields(t, e) {
			switch f.num {
			case 1:
				ts = f.v
			case 4: // sched_switch
				s := pfSwitch{ts: ts}
				for _, g := range pbFields(t, f.b) {
					switch g.num {
					case 1:
						s.prevComm = string(g.b)
					case 2:
						s.prev, s.hasPrevPID = g.v, true
					case 4:
						s.prevState, s.hasState = g.v, true
					case 5:
						s.nextComm = string(g.b)
					case 6:
						s.next = g.v
					}
				}
				d.switches[cpu] = append(d.switches[cpu], s)
			case 20, 114: // sched_waking, sched_wakeup_new
				d.wakings++
			case 235: // task_newtask
				d.newTasks++
			case 238: // sched_process_exit
				d.exits++
			}
		}
	}
}

// processTree reads a ProcessTree (ps/process_tree.proto).
func (d *pfDoc) processTree(t *testing.T, b []byte) {
	t.Helper()
	for _, f := range pbFields(t, b) {
		var id, tgid uint64
		var name string
		for _, g := range pbFields(t, f.b) {
			switch {
			case g.num == 1:
				id = g.v
			case f.num == 1 && g.num == 3: // Process.cmdline
				name = string(g.b)
			case f.num == 2 && g.num == 2: // Thread.name
				name = string(g.b)
			case f.num == 2 && g.num == 3: // Thread.tgid
				tgid = g.v
			}
		}
		if name == "" {
			t.Fatalf("process tree: %d without its name", id)
		}
		if f.num == 1 {
			d.treeProcs[id] = name
		} else {
			d.treeThreads[id], d.treeTGID[id] = name, tgid
		}
	}
}

// trackDescriptor reads a TrackDescriptor and its Thread- or
// ProcessDescriptor (track_event/*_descriptor.proto).
func (d *pfDoc) trackDescriptor(t *testing.T, b []byte) {
	t.Helper()
	tr := &pfTrack{}
	var uuid uint64
	for _, f := range pbFields(t, b) {
		switch f.num {
		case 1:
			uuid = f.v
		case 2:
			tr.name = string(f.b)
		case 5:
			tr.parent = f.v
		case 3:
			tr.process = true
			for _, g := range pbFields(t, f.b) {
				switch g.num {
				case 1:
					tr.pid = g.v
				case 6:
					tr.procName = string(g.b)
				}
			}
		case 4:
			tr.thread = true
			for _, g := range pbFields(t, f.b) {
				switch g.num {
				case 1:
					tr.pid = g.v
				case 2:
					tr.tid = g.v
				case 5:
					tr.threadName = string(g.b)
				}
			}
		}
	}
	if uuid == 0 {
		t.Fatal("a TrackDescriptor without its uuid")
	}
	if d.tracks[uuid] != nil {
		t.Fatalf("track %#x described twice", uuid)
	}
	d.tracks[uuid] = tr
}

// onCPU is each thread's time on a CPU as the sched_switch events give
// it: from its switch in to the next switch of its CPU.
func (d *pfDoc) onCPU() map[uint64]uint64 {
	on := map[uint64]uint64{}
	for _, sw := range d.switches {
		for i := 1; i < len(sw); i++ {
			on[sw[i-1].next] += sw[i].ts - sw[i-1].ts
		}
	}
	delete(on, 0)
	return on
}

// schedTrace writes a trace of two processes' five threads on ncpu CPUs:
// random switches (preempted, sleeping, blocked), wake-ups, interrupts,
// a thread made and one ended, and ticks with stacks. It returns its
// path, each thread's time on a CPU between its switch in and the next
// switch of its CPU, and the counts written.
func schedTrace(t *testing.T, dir string) (path string, want map[uint64]uint64, n map[string]int) {
	t.Helper()
	const ncpu = 3
	rng := rand.New(rand.NewSource(35))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var m trace.Writer
	trs := make([]trace.Writer, ncpu)
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{3000, 1}, "server"))
	must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, 100, []uint64{3000, 3001}, "worker one"))
	must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, 100, []uint64{3000, 3002}, "worker two"))
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{4000, 1}, "client"))
	must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, 100, []uint64{4000, 4001}, "io"))
	pidOf := map[uint64]uint64{3000: 3000, 3001: 3000, 3002: 3000, 4000: 4000, 4001: 4000}
	tids := []uint64{3000, 3001, 3002, 4000, 4001}
	want, n = map[uint64]uint64{}, map[string]int{}
	cur := make([]uint64, ncpu)   // the thread each CPU runs (0: idle)
	since := make([]uint64, ncpu) // its switch in (0: none yet)
	running := map[uint64]bool{}
	tm := uint64(1000)
	const forkAt, exitAt = 300, 1500
	for i := 0; i < 2000; i++ {
		tm += 100 + uint64(rng.Intn(5000))
		cpu := rng.Intn(ncpu)
		tw := &trs[cpu]
		switch {
		case i == forkAt: // 3000 makes the thread 3003
			must(m.Write(trace.MajorMTE, trace.MTEFork, trace.LayoutFixed, tm, []uint64{3000, 3000, 3000, 3003, 1}, ""))
			must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, tm, []uint64{3000, 3003}, "worker three"))
			pidOf[3003] = 3000
			tids = append(tids, 3003)
			n["fork"]++
			continue
		case i >= exitAt && n["exit"] == 0 && !running[4001]: // 4001 ends, off its CPU
			must(m.Write(trace.MajorMTE, trace.MTEExit, trace.LayoutFixed, tm, []uint64{4000, 4001}, ""))
			tids = slices.DeleteFunc(tids, func(x uint64) bool { return x == 4001 })
			n["exit"]++
			continue
		}
		if i%500 == 7 { // a user hook record, with its string or words only
			if i%1000 == 7 {
				must(tw.Write(0x1234, 5, trace.LayoutString, tm, nil, "request done"))
			} else {
				must(tw.Write(0x1234, 6, trace.LayoutWords, tm, []uint64{7, 8}, ""))
			}
			n["hook"]++
		}
		switch r := rng.Intn(10); {
		case r < 6: // a switch
			var next uint64
			if rng.Intn(5) > 0 {
				c := tids[rng.Intn(len(tids))]
				if !running[c] {
					next = c
				}
			}
			prev := cur[cpu]
			if prev == next {
				continue
			}
			st := []uint64{0, trace.StateSleeping, trace.StateBlocked, trace.StateBlocked | trace.StateRawNoLoad}[rng.Intn(4)]
			if prev == 0 {
				st = 0
			}
			must(tw.Write(trace.MajorDispatch, trace.DispatchSwitch, trace.LayoutFixed, tm, []uint64{pidOf[prev], prev, pidOf[next], next, st}, ""))
			n["switch"]++
			if since[cpu] != 0 && prev != 0 {
				want[prev] += tm - since[cpu]
			}
			delete(running, prev)
			cur[cpu], since[cpu] = next, tm
			if next != 0 {
				running[next] = true
			}
		case r < 8: // a wake-up
			tid := tids[rng.Intn(len(tids))]
			must(tw.Write(trace.MajorDispatch, trace.DispatchWakeup, trace.LayoutFixed, tm, []uint64{pidOf[tid], tid, uint64(rng.Intn(ncpu)), pidOf[cur[cpu]], cur[cpu], 0}, ""))
			n["wakeup"]++
		case r < 9: // an interrupt, a softirq in it
			must(tw.Write(trace.MajorInterrupt, trace.IntrHard, trace.LayoutFixed, tm, []uint64{33}, ""))
			must(tw.Write(trace.MajorInterrupt, trace.IntrSoft, trace.LayoutFixed, tm+10, []uint64{3}, ""))
			must(tw.Write(trace.MajorInterrupt, trace.IntrSoft|trace.ExitBit, trace.LayoutFixed, tm+20, []uint64{3}, ""))
			must(tw.Write(trace.MajorInterrupt, trace.IntrHard|trace.ExitBit, trace.LayoutFixed, tm+30, []uint64{33}, ""))
			tm += 30
			n["irq"]++
			n["softirq"]++
		default: // a tick of the thread running, with its stack
			tid := cur[cpu]
			if tid == 0 {
				continue
			}
			must(tw.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pidOf[tid], tid, 0x401010, 0}, ""))
			b := make([]byte, 16)
			b[0], b[1], b[2] = 0x10, 0x10, 0x40
			b[8], b[9], b[10] = 0x20, 0x10, 0x40
			must(tw.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{pidOf[tid], tid, 0}, string(b)))
			n["tick"]++
		}
	}
	path = filepath.Join(dir, "sched.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: ncpu, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	stats := make([]nrm2.CPUStats, ncpu)
	for c := range trs {
		must(w.WriteChunk(nrm2.ChunkTrace, uint32(c), trs[c].Buf))
	}
	must(w.Close(0, stats))
	return path, want, n
}

// The scheduling of a trace on three CPUs is the Perfetto time line's
// sched_switch events: each thread's time on a CPU summed from them is
// what the DISPATCH records give, every thread switched is named, and
// the wake-ups, the thread made and the one ended, the interrupts and
// the samples (with their stacks) are all there.
func TestTimelinePerfettoSched(t *testing.T) {
	dir := t.TempDir()
	nrm, want, n := schedTrace(t, dir)
	tl := filepath.Join(dir, "t.pftrace")
	out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl)
	if code != 0 || !strings.Contains(out, "t.pftrace") || !strings.Contains(out, "ui.perfetto.dev") {
		t.Fatalf("post --timeline: %d %s %s", code, out, errs)
	}
	d := readPerfetto(t, tl)
	got := d.onCPU()
	if len(want) < 5 {
		t.Fatalf("the trace runs %d threads", len(want))
	}
	for tid, ns := range want {
		if got[tid] != ns {
			t.Errorf("thread %d: %d ns on a CPU from the sched_switch events, %d from the DISPATCH records", tid, got[tid], ns)
		}
	}
	for tid := range got {
		if _, ok := want[tid]; !ok {
			t.Errorf("thread %d on a CPU in the time line, never in the trace", tid)
		}
	}
	switches := 0
	for _, sw := range d.switches {
		switches += len(sw)
	}
	if switches != n["switch"] || d.wakings != n["wakeup"] || d.newTasks != n["fork"] || d.exits != n["exit"] || n["exit"] == 0 {
		t.Fatalf("%d switches, %d wake-ups, %d new threads, %d exits in the time line; the trace has %v", switches, d.wakings, d.newTasks, d.exits, n)
	}
	for tid, name := range map[uint64]string{3000: "server", 3001: "worker one", 3002: "worker two", 3003: "worker three", 4000: "client", 4001: "io"} {
		if d.treeThreads[tid] != name {
			t.Errorf("thread %d named %q in the process tree, want %q", tid, d.treeThreads[tid], name)
		}
	}
	if d.treeTGID[3003] != 3000 || d.treeProcs[3000] != "server" || d.treeProcs[4000] != "client" {
		t.Errorf("process tree: 3003 in %d, processes %v", d.treeTGID[3003], d.treeProcs)
	}
	// the switches name idle sleeping kernel threads' D state I, as the
	// kernel's sched_switch does
	states := map[uint64]int{}
	for _, sw := range d.switches {
		for _, s := range sw {
			states[s.prevState]++
		}
	}
	if states[0] == 0 || states[1] == 0 || states[2] == 0 || states[0x80] == 0 || len(states) != 4 {
		t.Errorf("prev_state values %v, want 0, 1, 2 and 0x80", states)
	}
	irqs, samples, hooks := map[string]int{}, 0, map[string]int{}
	for _, ev := range d.events {
		switch {
		case ev.cat == "hook":
			if d.tracks[ev.track].name != "trace hooks" || ev.args["major"] != uint64(0x1234) {
				t.Fatalf("a hook %+v on %+v", ev, d.tracks[ev.track])
			}
			if ev.name == "hook 0x1234/0x6" && (ev.args["w0"] != uint64(7) || ev.args["w1"] != uint64(8)) {
				t.Fatalf("a hook's words: %+v", ev.args)
			}
			hooks[ev.name]++
		case ev.typ == 1 && ev.cat == "interrupt":
			irqs[ev.name]++
			if tr := d.tracks[ev.track]; !strings.HasPrefix(tr.name, "CPU ") || d.tracks[tr.parent].name != "interrupts" {
				t.Fatalf("an interrupt on the track %+v", tr)
			}
		case ev.typ == 3 && ev.cat == "sample":
			samples++
			tr := d.tracks[ev.track]
			if !tr.thread || tr.threadName == "" || len(ev.stack) != 2 {
				t.Fatalf("a sample on %+v with the stack %q", tr, ev.stack)
			}
		}
	}
	if irqs["irq"] != n["irq"] || irqs["softirq"] != n["softirq"] || samples != n["tick"] || samples == 0 {
		t.Fatalf("%v interrupts and %d samples in the time line; the trace has %v", irqs, samples, n)
	}
	if hooks["request done"]+hooks["hook 0x1234/0x6"] != n["hook"] || hooks["request done"] == 0 || hooks["hook 0x1234/0x6"] == 0 {
		t.Fatalf("hooks %v in the time line; the trace has %d", hooks, n["hook"])
	}
	if d.maxDepth != 2 {
		t.Fatalf("interrupts nest %d deep, want 2 (a softirq in an irq)", d.maxDepth)
	}
	t.Logf("%d switches, %d packets, %d bytes", switches, d.packets, d.size)
}

// The golden trace's 8,000 samples are the Perfetto time line's sample
// events, each with its call stack, and with --pid the selection's;
// --timeline-format chooses the format whatever the file's name.
func TestTimelinePerfettoSamples(t *testing.T) {
	dir := t.TempDir()
	nrm := goldenTrace(t, dir)
	for _, sel := range [][]string{nil, {"--pid", "1003,1010"}} {
		tl := filepath.Join(dir, "timeline.perfetto-trace")
		if out, errs, code := runPost(t, dir, append([]string{"-r", nrm, "--timeline", tl}, sel...)...); code != 0 {
			t.Fatalf("post --timeline: %d %s %s", code, out, errs)
		}
		d := readPerfetto(t, tl)
		var samples []pfEvent
		deep := 0
		for _, ev := range d.events {
			if ev.cat != "sample" {
				continue
			}
			tr := d.tracks[ev.track]
			if sel != nil && tr.pid != 1003 && tr.pid != 1010 {
				t.Fatalf("--pid 1003,1010: a sample of pid %d", tr.pid)
			}
			if _, ok := ev.args["module"].(string); !ok {
				t.Fatalf("a sample without its module: %+v", ev)
			}
			samples = append(samples, ev)
			deep = max(deep, len(ev.stack))
		}
		want := tprofTicks(t, dir, nrm, sel...)
		if len(samples) != want || want == 0 {
			t.Fatalf("%v: %d samples in the time line, post -tprof counts %d ticks", sel, len(samples), want)
		}
		if deep < 5 {
			t.Fatalf("%v: the deepest sample stack has %d frames (the trace's go to 10)", sel, deep)
		}
		// the renaming of 1003's function at 0x10000 mid-trace
		before, after := 0, 0
		for _, s := range samples {
			if d.tracks[s.track].pid != 1003 {
				continue
			}
			old, renamed := slices.Contains(s.stack, "fn_0 0"), slices.Contains(s.stack, "replaced")
			switch {
			case renamed:
				after++
			case old && after > 0:
				t.Fatalf("a sample at %d names fn_0 0 after the renaming: %q", s.ts, s.stack)
			case old:
				before++
			}
		}
		if before == 0 || after == 0 {
			t.Fatalf("pid 1003: %d stacks with fn_0 0, then %d with its new name (want both)", before, after)
		}
		for uuid, tr := range d.tracks {
			if tr.thread && (tr.threadName == "" || d.tracks[uuid] == nil) {
				t.Fatalf("thread track %+v without its name", tr)
			}
		}
	}
	// the format by flag: JSON to a .pftrace, Perfetto to a .json
	tl := filepath.Join(dir, "x.pftrace")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl, "--timeline-format", "json"); code != 0 {
		t.Fatalf("post --timeline-format json: %d %s %s", code, out, errs)
	}
	if d := checkTimeline(t, tl); len(d.samples) == 0 {
		t.Fatal("--timeline-format json: no samples")
	}
	tl = filepath.Join(dir, "x.json")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl, "--timeline-format", "perfetto"); code != 0 {
		t.Fatalf("post --timeline-format perfetto: %d %s %s", code, out, errs)
	}
	if d := readPerfetto(t, tl); len(d.events) == 0 {
		t.Fatal("--timeline-format perfetto: no events")
	}
	if _, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl, "--timeline-format", "svg"); code == 0 || !strings.Contains(errs, "perfetto or json") {
		t.Fatalf("--timeline-format svg: exit %d, %q", code, errs)
	}
}

// An ITrace of a recursion in the Perfetto time line: each call one
// slice on the thread's calls track, nested as deep as the recursion,
// as many as itrace.out counts, each with its inclusive instructions.
func TestTimelinePerfettoITraceCalls(t *testing.T) {
	dir := t.TempDir()
	const depth = 200
	nrm := itraceTrace(t, dir, "/nonexistent/deep", depth)
	tl := filepath.Join(dir, "t.pftrace")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", tl); code != 0 {
		t.Fatalf("post --timeline: %d %s %s", code, out, errs)
	}
	d := readPerfetto(t, tl)
	calls := itraceCalls(t, dir, nrm)
	if uint64(d.callBegins) != calls || calls != depth {
		t.Fatalf("%d call slices in the time line, itrace.out counts %d calls (the trace makes %d)", d.callBegins, calls, depth)
	}
	if d.maxDepth < depth+1 {
		t.Fatalf("slices nest %d deep, want %d (main and %d calls)", d.maxDepth, depth+1, depth)
	}
	in := d.instrOf["deep+0x2000"]
	if len(in) != depth {
		t.Fatalf("%d ends of f's slices, want %d", len(in), depth)
	}
	for i, n := range in {
		if want := uint64(5*i + 2); n != want {
			t.Fatalf("f's activation %d (innermost first) ran %d instructions, want %d", i, n, want)
		}
	}
	found := false
	for _, tr := range d.tracks {
		if tr.name == "calls" {
			p := d.tracks[tr.parent]
			if p == nil || !p.thread || p.tid != 900 || p.threadName != "deep" {
				t.Fatalf("the calls track's parent is %+v", p)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no calls track")
	}
}
