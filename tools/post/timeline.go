package main

// The time line (--timeline FILE): one file for every kind of trace, in
// Perfetto's protobuf trace format (format/perfetto; timeline_perfetto.go) or
// in Chrome's trace-event JSON (format/traceevent), by the file's
// extension or --timeline-format.
//
// The formats: Perfetto's protobuf format is the smaller, streams, and
// carries each CPU's scheduling as the kernel's own sched_switch events,
// from which ui.perfetto.dev draws CPU tracks and thread states, and
// call stacks it shows as flame graphs; it opens in Perfetto only. The
// JSON trace-event format opens both in the Perfetto UI and in
// chrome://tracing. Perfetto's JSON importer does not read the
// stackFrames dictionary (chrome://tracing does), so each JSON sample
// carries its stack twice: as "sf" and as the "stack" argument Perfetto
// shows.
//
// What the JSON holds, by process and thread:
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

// timelineOpts are the time line's options.
type timelineOpts struct {
	path, format string
	begin        uint64 // the thread states' (schedBegin)
}

func timelineFlags(o *timelineOpts) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "timeline", Usage: "write a time line to `FILE` (FILE.pftrace: Perfetto's protobuf trace, open it in ui.perfetto.dev; FILE.json: trace-event JSON, open it in ui.perfetto.dev or chrome://tracing): per thread its tprof samples with their call stacks, its states and each CPU's scheduling and interrupts (swtrace enable dispatch [interrupt]), its ITrace calls as nested slices with their instructions (and in Perfetto's, its system calls and page faults, and the trace hooks as markers)", Destination: &o.path},
		&cli.StringFlag{Name: "timeline-format", Usage: "the time line's format: `perfetto` or json (default: perfetto for a FILE ending in .pftrace, .perfetto-trace or .perfetto, else json)", Destination: &o.format},
	}
}

// timelineFormat is the format of the time line o writes: "perfetto" or
// "json".
func timelineFormat(o timelineOpts) (string, error) {
	switch o.format {
	case "perfetto", "json":
		return o.format, nil
	case "":
	default:
		return "", fmt.Errorf("--timeline-format %q: say perfetto or json", o.format)
	}
	switch strings.ToLower(filepath.Ext(o.path)) {
	case ".pftrace", ".perfetto-trace", ".perfetto":
		return "perfetto", nil
	}
	return "json", nil
}

// callsTrack is the track id of a thread's ITrace calls, in its process:
// beside the thread's own (thread ids are below 2^22).
func callsTrack(tid uint32) uint32 { return 1<<30 | tid }

type trackKey struct{ pid, tid uint32 }

// tlOut is a time line's format: what the time line writes, and how.
type tlOut interface {
	// begin starts the file; t is the first record's time.
	begin(t uint64)
	// Name and FrameOf make the stack frames of samples: a frame is a
	// function (its name and module, ids of Name) called from its
	// parent frame (0: none).
	Name(s string) int32
	FrameOf(parent int, name, mod int32) int
	// newTrack is told of each track the time line writes to, once,
	// before its first event.
	newTrack(pid, tid uint32, calls bool)
	// sample writes a tprof sample, its stack's leaf frame sf.
	sample(t *scriptTick, sf int, leaf tlFunc)
	// call writes the begin or end of an ITrace frame.
	call(ev *itrace.FrameEvent)
	// record takes each record post reads after the time line did.
	record(rec *trace.Record)
	// finish writes what is left; the file is closed after.
	finish() error
}

// timeline writes the time line from the records post reads.
type timeline struct {
	path    string
	f       *os.File
	out     tlOut
	w       *traceevent.Writer // the JSON's
	pf      *pfTimeline        // Perfetto's
	started bool
	now     uint64 // the time of the record read
	// dispatches counts the DISPATCH switch records.
	dispatches uint64
	r          *a2n.Resolver
	filt       *tprof.Filter
	sched      *offcpu.Analyzer // the JSON's thread states
	calls      *itrace.Report
	namer      *a2nNamer
	off        uint64 // time of the trace's end (SysTraceOff)

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
// With own (a resolver of its own, nil: none) the time line is written on
// a goroutine of its own, beside the reading (tlFeed); else by the reader.
func timelineHook(o timelineOpts, r, own *a2n.Resolver, filt *tprof.Filter, next func(*trace.Record, *a2n.Result), stdout io.Writer) (func(*trace.Record, *a2n.Result), func() error, error) {
	path := o.path
	if own != nil {
		r = own
	}
	if path == "" {
		return next, func() error { return nil }, nil
	}
	format, err := timelineFormat(o)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	tl := &timeline{path: path, f: f, r: r, filt: growingFilter(filt),
		namer:  &a2nNamer{r: r, cache: map[[2]uint64]named{}},
		tracks: map[trackKey]string{}, keep: map[trackKey]bool{}, procs: map[uint32]*tlProc{}, funcIDs: map[tlFunc]int32{}, kernelFuncs: map[uint64]int32{}}
	var onBranch func(*itrace.Branch)
	opener := "chrome://tracing"
	if format == "perfetto" {
		tl.pf = newPfTimeline(tl)
		tl.out = tl.pf
		onBranch = tl.pf.branch
		opener = "ui.perfetto.dev"
	} else {
		tl.out = &jsonTimeline{tl}
		// the threads' states: the stacks go unnamed (the off-CPU
		// profiles' names); Perfetto makes them from the switches
		tl.sched = offcpu.New(nil)
		tl.sched.KeepSpans, tl.sched.StatesOnly = true, true
		tl.sched.Begin = o.begin
		opener = "ui.perfetto.dev or " + opener
	}
	tl.calls = itrace.NewReport(tl.namer, onBranch)
	tl.calls.OnFrame(tl.frame)
	hook := func(rec *trace.Record, res *a2n.Result) {
		if next != nil {
			next(rec, res)
		}
		tl.record(rec, res != nil)
	}
	wait := func() {}
	if own != nil {
		feed := newTLFeed(tl)
		hook = func(rec *trace.Record, res *a2n.Result) {
			if next != nil {
				next(rec, res)
			}
			feed.record(rec, res != nil)
		}
		wait = feed.wait
	}
	end := func() error {
		wait()
		if err := tl.finish(); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Fprintf(stdout, "post: wrote %s (%d samples, %d dispatches, %d calls; open it in %s)\n", path, tl.samples, tl.dispatches, tl.callSlices, opener)
		return nil
	}
	return hook, end, nil
}

// record takes each record post reads, in time order (selected: a tick
// the selection keeps).
func (tl *timeline) record(rec *trace.Record, selected bool) {
	if !tl.started {
		tl.started = true
		tl.out.begin(rec.Time)
	}
	tl.now = rec.Time
	if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
		return // time bookkeeping, also between a tick and its stack
	}
	if rec.Major != trace.MajorUnwind {
		tl.flush(rec.CPU) // its stack would have come next
	}
	growFilter(tl.filt, rec)
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
		if selected && rec.CPU >= 0 { // else left out by --pid, --tid or --comm
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
	if rec.Major == trace.MajorDispatch && rec.Minor == trace.DispatchSwitch {
		tl.dispatches++
	}
	if tl.sched != nil && rec.Major != trace.MajorUnwind { // (stacks: the off-CPU profiles')
		tl.sched.Record(rec)
	}
	tl.out.record(rec)
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
			tl.frameNames = append(tl.frameNames, tlFuncID{tl.out.Name(f.sym), tl.out.Name(filepath.Base(f.mod))})
			tl.funcIDs[f] = fn
		}
		funcs[at.pc] = fn
	}
	n := tl.frameNames[fn]
	return tlFrame{int32(tl.out.FrameOf(int(parent), n.sym, n.mod)), fn}
}

// track notes a track written to: thread (pid, tid)'s, or with calls
// its ITrace calls', and its process.
func (tl *timeline) track(pid, tid uint32, calls bool) {
	k := trackKey{pid, tid}
	if calls {
		k.tid = callsTrack(tid)
	}
	if _, ok := tl.tracks[k]; !ok {
		if calls {
			tl.tracks[k] = fmt.Sprintf("%s %d calls", tl.threadName(pid, tid), tid)
		} else {
			tl.tracks[k] = fmt.Sprintf("%s %d", tl.threadName(pid, tid), tid)
		}
		tl.proc(pid)
		tl.out.newTrack(pid, tid, calls)
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
	tl.track(t.pid, t.tid, false)
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
	tl.samples++
	tl.out.sample(t, int(fr.sf), tl.funcs[fr.fn])
}

// frame writes one ITrace frame change as the begin or end of a slice.
func (tl *timeline) frame(ev *itrace.FrameEvent) {
	if !tl.kept(ev.PID, ev.TID) {
		return
	}
	tl.track(ev.PID, ev.TID, true)
	if ev.Begin && ev.Kind == itrace.FrameCall {
		tl.callSlices++
	}
	tl.out.call(ev)
}

// kept tells whether --pid, --tid and --comm select thread (pid, tid),
// decided at its first call.
func (tl *timeline) kept(pid, tid uint32) bool {
	k := trackKey{pid, tid}
	keep, ok := tl.keep[k]
	if !ok {
		keep = tl.filt == nil || schedSelected(tl.filt, pid, tid, tl.r.ProcessName)
		tl.keep[k] = keep
	}
	return keep
}

// finish writes the samples still pending, closes the calls still open,
// writes what the format keeps for the end and closes the file.
func (tl *timeline) finish() error {
	if !tl.started {
		tl.started = true
		tl.out.begin(0) // an empty trace
	}
	for cpu := range tl.pending {
		tl.flush(cpu)
	}
	tl.calls.Finish()
	if tl.sched != nil {
		tl.sched.Finish(tl.off)
	}
	err := tl.out.finish()
	if cerr := tl.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// jsonTimeline writes the time line in trace-event JSON.
type jsonTimeline struct{ tl *timeline }

func (j *jsonTimeline) begin(t uint64) {
	j.tl.w = traceevent.New(j.tl.f, t) // the first record's time is 0
}

func (j *jsonTimeline) Name(s string) int32 { return j.tl.w.Name(s) }

func (j *jsonTimeline) FrameOf(parent int, name, mod int32) int {
	return j.tl.w.FrameOf(parent, name, mod)
}

func (j *jsonTimeline) newTrack(pid, tid uint32, calls bool) {}

func (j *jsonTimeline) record(rec *trace.Record) {}

func (j *jsonTimeline) sample(t *scriptTick, sf int, leaf tlFunc) {
	j.tl.w.InstantStack(t.pid, t.tid, "sample", leaf.sym, t.time, sf,
		traceevent.Str("module", leaf.mod), traceevent.Num("cpu", uint64(t.cpu)))
}

func (j *jsonTimeline) call(ev *itrace.FrameEvent) {
	tid := callsTrack(ev.TID)
	if !ev.Begin {
		j.tl.w.End(ev.PID, tid, ev.Time, traceevent.Num("instructions", ev.Instructions))
		return
	}
	j.tl.w.Begin(ev.PID, tid, ev.Kind.String(), ev.Func.Name, ev.Time, traceevent.Str("module", ev.Func.Module))
}

// finish names the tracks, writes the threads' states and ends the
// document.
func (j *jsonTimeline) finish() error {
	tl := j.tl
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
	return tl.w.Close()
}
