package main

// The time line (--timeline FILE): one file for every kind of trace, in
// Chrome's trace-event JSON (format/traceevent).
//
// The format: the JSON trace-event format is the one that opens both in
// the Perfetto UI (ui.perfetto.dev) and in chrome://tracing, and the one
// the scheduling time line already wrote. Perfetto's own protobuf format
// (TracePacket with TrackEvent, PerfSample) would be smaller, but opens
// in Perfetto only, and has no Go package of its published definitions
// to encode it with. Perfetto's JSON importer does not read the
// stackFrames dictionary (chrome://tracing does), so each sample carries
// its stack twice: as "sf" and as the "stack" argument Perfetto shows.
//
// What it holds, by process and thread:
//   - each tprof sample as an instant event on its thread's track, named
//     for the sampled function, with its call stack;
//   - with DISPATCH records, each thread's running, run-queue, sleeping
//     and blocked stretches as slices on its track, and each CPU's
//     interrupts (analysis/offcpu);
//   - with ITrace records, each thread's calls and returns as nested
//     slices on a track of their own beside the thread's ("NAME TID
//     calls": the slices span the thread's states, so they cannot nest
//     with them on one track), begun at the call and ended at the return,
//     with the activation's inclusive instructions as an argument. The
//     outermost slice is the function the thread ran in where its trace
//     began (category "base"); calls are category "call", signal handlers
//     "signal".

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/itrace"
	"perfinsp/analysis/offcpu"
	"perfinsp/analysis/tprof"
	"perfinsp/format/trace"
	"perfinsp/format/traceevent"
)

func timelineFlags(path *string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "timeline", Usage: "write a time line to `FILE` (trace-event JSON: open it in ui.perfetto.dev or chrome://tracing): per thread its tprof samples with their call stacks, its states and each CPU's interrupts (swtrace enable dispatch [interrupt]), its ITrace calls as nested slices with their instructions", Destination: path},
	}
}

// callsTrack is the track id of a thread's ITrace calls, in its process:
// beside the thread's own (thread ids are below 2^22).
func callsTrack(tid uint32) uint32 { return 1<<30 | tid }

type trackKey struct{ pid, tid uint32 }

// timeline writes the time line from the records post reads.
type timeline struct {
	path  string
	f     *os.File
	w     *traceevent.Writer
	r     *a2n.Resolver
	filt  *tprof.Filter
	sched *offcpu.Analyzer
	calls *itrace.Report
	namer *a2nNamer
	off   uint64 // time of the trace's end (SysTraceOff)

	pending             []pendingTick       // by CPU: the sample whose stack may follow
	procs               map[uint32]*tlProc  // processes with a track, with their frames
	tracks              map[trackKey]string // every track written to, with its name
	keep                map[trackKey]bool   // --pid/--tid/--comm, decided at a thread's first call
	funcs               []tlFunc            // the functions named, by id
	funcIDs             map[tlFunc]int32
	kernelFuncs         map[uint64]int32 // the function of each kernel address (in every process)
	frameNames          []tlFuncID       // by function id
	last                []lastStack      // by CPU
	samples, callSlices uint64
}

type pendingTick struct {
	scriptTick
	ok bool
}

// tlFunc is a function a sample names: its symbol and module, and their
// ids in the writer's frames (the module's base name).
type tlFunc struct{ sym, mod string }

type tlFuncID struct{ sym, mod int32 }

// tlProc holds what the time line knows of a process while its mappings
// stay: the function of each user address (a kernel address's is the
// same in every process: timeline.kernelFuncs). Its keys and values hold
// no pointers: the collector does not scan them (a system-wide trace
// makes hundreds of thousands). A frame is the writer's frame of its
// function called from its parent frame (traceevent.Writer.FrameOf),
// found in the writer's table: a table of frames by parent and address
// would hold about twice as many entries as there are frames.
type tlProc struct {
	funcs map[uint64]int32 // the function's id in timeline.funcs
}

// lastStack is the stack of a CPU's last sample, root first: the
// addresses and their frames in process p.
type lastStack struct {
	p      *tlProc
	pcs    []tlPC
	frames []tlFrame
}

// tlFrame is a stack frame: its traceevent id and its function's (in
// timeline.funcs).
type tlFrame struct{ sf, fn int32 }

type tlPC struct {
	pc     uint64
	kernel bool
}

// timelineHook chains the time line after next on every record post
// reads; the returned function writes what is left and closes the file.
func timelineHook(path string, r *a2n.Resolver, filt *tprof.Filter, next func(*trace.Record, *a2n.Result), stdout io.Writer) (func(*trace.Record, *a2n.Result), func() error, error) {
	if path == "" {
		return next, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	tl := &timeline{path: path, f: f, r: r, filt: filt,
		// the states only: stacks go unnamed (the off-CPU profiles' names)
		sched:  offcpu.New(nil),
		namer:  &a2nNamer{r: r, cache: map[[2]uint64]named{}},
		tracks: map[trackKey]string{}, keep: map[trackKey]bool{}, procs: map[uint32]*tlProc{}, funcIDs: map[tlFunc]int32{}, kernelFuncs: map[uint64]int32{}}
	tl.sched.KeepSpans, tl.sched.StatesOnly = true, true
	tl.calls = itrace.NewReport(tl.namer, nil)
	tl.calls.OnFrame(tl.frame)
	hook := func(rec *trace.Record, res *a2n.Result) {
		if next != nil {
			next(rec, res)
		}
		tl.record(rec, res)
	}
	end := func() error {
		if err := tl.finish(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Fprintf(stdout, "post: wrote %s (%d samples, %d dispatches, %d calls; open it in ui.perfetto.dev or chrome://tracing)\n", path, tl.samples, tl.sched.Dispatches, tl.callSlices)
		return nil
	}
	return hook, end, nil
}

// record takes each record post reads, in time order (res: a tick's
// name, nil for a tick the selection leaves out).
func (tl *timeline) record(rec *trace.Record, res *a2n.Result) {
	if tl.w == nil {
		tl.w = traceevent.New(tl.f, rec.Time) // the first record's time is 0
	}
	if rec.Major != trace.MajorUnwind {
		tl.flush(rec.CPU) // its stack would have come next
	}
	switch rec.Major {
	case trace.MajorMTE, trace.MajorJITLoad:
		// a process whose mappings change (or that a fork makes) is
		// named afresh
		switch {
		case rec.Major == trace.MajorJITLoad, rec.Minor == trace.MTEExec, rec.Minor == trace.MTESegment, rec.Minor == trace.MTEUnmap:
			tl.forget(uint32(rec.Field(0)))
		case rec.Minor == trace.MTEFork:
			tl.forget(uint32(rec.Field(2)))
		}
		if len(tl.namer.cache) > 0 {
			tl.namer.cache = map[[2]uint64]named{}
		}
	case trace.MajorSys:
		if rec.Minor == trace.SysTraceOff {
			tl.off = rec.Time
		}
	case trace.MajorTprof:
		if res != nil && rec.CPU >= 0 { // else left out by --pid, --tid or --comm
			for len(tl.pending) <= rec.CPU {
				tl.pending = append(tl.pending, pendingTick{})
			}
			tl.pending[rec.CPU] = pendingTick{scriptTick{pid: uint32(rec.Field(0)), tid: uint32(rec.Field(1)), cpu: rec.CPU, time: rec.Time,
				ip: rec.Field(2), kernel: rec.Field(3)&trace.TprofKernel != 0}, true}
		}
	case trace.MajorUnwind:
		if rec.Minor == trace.UnwindTick && rec.CPU >= 0 && rec.CPU < len(tl.pending) && tl.pending[rec.CPU].ok {
			t := &tl.pending[rec.CPU]
			t.ok = false
			if t.pid != uint32(rec.Field(0)) || t.tid != uint32(rec.Field(1)) {
				tl.sample(&t.scriptTick, "", 0)
			} else {
				tl.sample(&t.scriptTick, rec.Str, int(rec.Field(2)>>trace.UnwindKernShift))
			}
		}
	case trace.MajorITraceU, trace.MajorITraceK:
		tl.calls.Apply(rec)
	}
	if rec.Major != trace.MajorUnwind { // (stacks: the off-CPU profiles')
		tl.sched.Record(rec)
	}
}

// flush writes the sample pending on cpu (no stack followed it).
func (tl *timeline) flush(cpu int) {
	if cpu >= 0 && cpu < len(tl.pending) && tl.pending[cpu].ok {
		t := &tl.pending[cpu]
		t.ok = false
		tl.sample(&t.scriptTick, "", 0)
	}
}

// proc is what the time line knows of process pid.
func (tl *timeline) proc(pid uint32) *tlProc {
	p := tl.procs[pid]
	if p == nil {
		p = &tlProc{funcs: map[uint64]int32{}}
		tl.procs[pid] = p
	}
	return p
}

// forget drops what the time line knows of process pid's addresses (its
// mappings change), keeping it among the processes with a track.
func (tl *timeline) forget(pid uint32) {
	if p := tl.procs[pid]; p != nil && len(p.funcs) > 0 {
		tl.procs[pid] = &tlProc{funcs: map[uint64]int32{}}
	}
}

// frameOf is the stack frame of the address at called from parent in
// process pid.
func (tl *timeline) frameOf(p *tlProc, pid uint32, parent int32, at tlPC) tlFrame {
	funcs := p.funcs
	if at.kernel {
		funcs = tl.kernelFuncs
	}
	fn, ok := funcs[at.pc]
	if !ok {
		res := tl.r.Resolve(pid, at.pc, at.kernel)
		f := tlFunc{res.Symbol, res.Module}
		if fn, ok = tl.funcIDs[f]; !ok {
			fn = int32(len(tl.funcs))
			tl.funcs = append(tl.funcs, f)
			tl.frameNames = append(tl.frameNames, tlFuncID{tl.w.Name(f.sym), tl.w.Name(filepath.Base(f.mod))})
			tl.funcIDs[f] = fn
		}
		funcs[at.pc] = fn
	}
	n := tl.frameNames[fn]
	return tlFrame{int32(tl.w.FrameOf(int(parent), n.sym, n.mod)), fn}
}

// track notes a track written to, named name, and its process.
func (tl *timeline) track(pid, tid uint32, name func() string) {
	k := trackKey{pid, tid}
	if _, ok := tl.tracks[k]; !ok {
		tl.tracks[k] = name()
		tl.proc(pid)
	}
}

func (tl *timeline) threadName(pid, tid uint32) string {
	n := tl.r.ThreadName(pid, tid)
	if n == "" {
		n = tl.r.ProcessName(pid)
	}
	return strings.ReplaceAll(n, "\n", " ")
}

// sample writes one sample: its stack (the addresses of an UNWIND
// record, interrupted first, the first nk in the kernel), or with none
// its own address.
func (tl *timeline) sample(t *scriptTick, stack string, nk int) {
	tl.track(t.pid, t.tid, func() string { return fmt.Sprintf("%s %d", tl.threadName(t.pid, t.tid), t.tid) })
	p := tl.proc(t.pid)
	var fr tlFrame
	if n := len(stack) / 8; n == 0 {
		fr = tl.frameOf(p, t.pid, 0, tlPC{t.ip, t.kernel})
	} else {
		// the frames the stack shares with the CPU's last sample's, from
		// the root, are those; the others are looked up
		for t.cpu >= len(tl.last) {
			tl.last = append(tl.last, lastStack{})
		}
		ls := &tl.last[t.cpu]
		if ls.p != p {
			*ls = lastStack{p: p, pcs: ls.pcs[:0], frames: ls.frames[:0]}
		}
		same := true
		for j := range n {
			i := n - 1 - j
			at := le64(stack[8*i:])
			if i > 0 && i != nk {
				at-- // a return address: name the call, not what follows it
			}
			pc := tlPC{at, i < nk}
			if same && j < len(ls.pcs) && ls.pcs[j] == pc {
				fr = ls.frames[j]
				continue
			}
			if same {
				same = false
				ls.pcs, ls.frames = ls.pcs[:j], ls.frames[:j]
			}
			fr = tl.frameOf(p, t.pid, fr.sf, pc)
			ls.pcs, ls.frames = append(ls.pcs, pc), append(ls.frames, fr)
		}
		ls.pcs, ls.frames = ls.pcs[:n], ls.frames[:n]
	}
	leaf := tl.funcs[fr.fn]
	tl.samples++
	tl.w.InstantStack(t.pid, t.tid, "sample", leaf.sym, t.time, int(fr.sf),
		traceevent.Str("module", leaf.mod), traceevent.Num("cpu", uint64(t.cpu)))
}

// frame writes one ITrace frame change as the begin or end of a slice.
func (tl *timeline) frame(ev *itrace.FrameEvent) {
	k := trackKey{ev.PID, ev.TID}
	keep, ok := tl.keep[k]
	if !ok {
		keep = tl.filt == nil || schedSelected(tl.filt, ev.PID, ev.TID, tl.r.ProcessName)
		tl.keep[k] = keep
	}
	if !keep {
		return
	}
	tid := callsTrack(ev.TID)
	tl.track(ev.PID, tid, func() string { return fmt.Sprintf("%s %d calls", tl.threadName(ev.PID, ev.TID), ev.TID) })
	if !ev.Begin {
		tl.w.End(ev.PID, tid, ev.Time, traceevent.Num("instructions", ev.Instructions))
		return
	}
	if ev.Kind == itrace.FrameCall {
		tl.callSlices++
	}
	tl.w.Begin(ev.PID, tid, ev.Kind.String(), ev.Func.Name, ev.Time, traceevent.Str("module", ev.Func.Module))
}

// finish writes the samples still pending, closes the calls still open,
// names the tracks, writes the threads' states and closes the file.
func (tl *timeline) finish() error {
	if tl.w == nil {
		tl.w = traceevent.New(tl.f, 0) // an empty trace
	}
	for cpu := range tl.pending {
		tl.flush(cpu)
	}
	tl.calls.Finish()
	tl.sched.Finish(tl.off)
	named := map[uint64]bool{}
	pids := make([]uint32, 0, len(tl.procs))
	for pid := range tl.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		named[uint64(pid)] = true
		tl.w.ProcessName(pid, fmt.Sprintf("%s %d", tl.r.ProcessName(pid), pid))
	}
	keys := make([]trackKey, 0, len(tl.tracks))
	for k := range tl.tracks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].pid < keys[j].pid || keys[i].pid == keys[j].pid && keys[i].tid < keys[j].tid
	})
	for _, k := range keys {
		named[uint64(k.pid)<<32|uint64(k.tid)] = true
		tl.w.ThreadName(k.pid, k.tid, tl.tracks[k])
	}
	for _, th := range tl.sched.Threads() {
		th.Name = tl.r.ThreadName(th.PID, th.TID)
	}
	var sel func(*offcpu.Thread) bool
	if tl.filt != nil {
		sel = func(th *offcpu.Thread) bool { return schedSelected(tl.filt, th.PID, th.TID, tl.r.ProcessName) }
	}
	tl.sched.EmitTimeline(tl.w, tl.r.ProcessName, sel, named)
	err := tl.w.Close()
	if cerr := tl.f.Close(); err == nil {
		err = cerr
	}
	return err
}
