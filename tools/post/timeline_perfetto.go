package main

// The time line in Perfetto's protobuf trace format (format/perfetto).
// What it holds:
//   - each CPU's scheduling, from the DISPATCH records, as the kernel's
//     sched_switch events, with the wake-ups (sched_waking,
//     sched_wakeup_new), the threads made (task_newtask) and ended
//     (sched_process_exit): Perfetto draws a track per CPU of the
//     threads it ran, and each thread's states, from them. They are the
//     whole system's, whatever --pid, --tid or --comm select;
//   - every thread and process seen, with its name (ProcessTree
//     packets), and a track for each thread with events, under its
//     process;
//   - each tprof sample as an instant event on its thread's track, named
//     for the sampled function, with its call stack (Perfetto shows the
//     stacks of the samples selected as a flame graph) and its module and
//     CPU as arguments;
//   - each CPU's hard and soft interrupts as slices on a track of the
//     CPU's under "interrupts";
//   - each user hook record (TraceHook, majors from 0x100) as an instant
//     event on the track "trace hooks", named for its string (or its
//     major and minor), with its CPU and words as arguments;
//   - with ITrace records, each thread's calls and returns as nested
//     slices on a track "calls" under the thread's (begun at the call,
//     ended at the return, with the activation's inclusive instructions
//     as an argument), and its system calls, page faults and interrupts
//     as slices inside them, of the time the kernel took.

import (
	"fmt"
	"strconv"

	"perfinsp/analysis/itrace"
	"perfinsp/format/perfetto"
	"perfinsp/format/trace"
)

// pfTimeline writes the time line in Perfetto's format.
type pfTimeline struct {
	tl       *timeline
	w        *perfetto.Writer
	threads  map[uint32]uint32 // the process of each thread in the trace's process tree
	procs    map[uint32]bool   // the processes in it
	intr     [][]bool          // by CPU: the interrupts open, innermost last (soft or hard)
	lastCall map[uint32]uint64 // by thread: the time of the last event on its calls track
	sysNames map[int]string
	args     []perfetto.Arg
}

func newPfTimeline(tl *timeline) *pfTimeline {
	return &pfTimeline{tl: tl, threads: map[uint32]uint32{}, procs: map[uint32]bool{}, lastCall: map[uint32]uint64{}, sysNames: map[int]string{}}
}

// The tracks of the time line's own: the interrupts of each CPU, and
// the calls of each thread.
const (
	pfIntrTrack = 1
	pfHookTrack = 2
	pfCPUBase   = 16
	pfCallsBase = 1 << 50
)

func pfCPUTrack(cpu int) uint64 { return perfetto.NamedTrack(pfCPUBase + uint64(cpu)) }

// pfWordNames are the names of a hook's words as arguments.
var pfWordNames = func() (n [8]string) {
	for i := range n {
		n[i] = "w" + strconv.Itoa(i)
	}
	return n
}()

func pfCallsTrack(pid, tid uint32) uint64 {
	return perfetto.NamedTrack(pfCallsBase | uint64(pid)<<24 | uint64(tid))
}

func (p *pfTimeline) begin(t uint64) { p.w = perfetto.New(p.tl.f) }

func (p *pfTimeline) Name(s string) int32 { return p.w.Name(s) }

func (p *pfTimeline) FrameOf(parent int, name, mod int32) int {
	return p.w.FrameOf(parent, name, mod)
}

// comm is thread (pid, tid)'s name, as the kernel's events name it.
func (p *pfTimeline) comm(pid, tid uint32) string {
	if tid == 0 {
		return "swapper"
	}
	return p.tl.threadName(pid, tid)
}

// seen puts thread (pid, tid) in the trace's process tree at t, with its
// process, when it is not yet (or was renamed).
func (p *pfTimeline) seen(t uint64, pid, tid uint32) {
	if tid == 0 || pid == 0 {
		return
	}
	if q, ok := p.threads[tid]; ok && q == pid {
		return
	}
	p.threads[tid] = pid
	proc := ""
	if !p.procs[pid] {
		p.procs[pid] = true
		proc = p.tl.r.ProcessName(pid)
		if proc == "" {
			proc = p.comm(pid, pid)
		}
		if pid != tid {
			p.w.ProcessTree(t, pid, pid, proc, "")
		}
	}
	if pid != tid {
		proc = ""
	}
	p.w.ProcessTree(t, pid, tid, proc, p.comm(pid, tid))
}

// prevState is a DISPATCH record's prev_state as sched_switch reports it.
func prevState(st uint64) uint64 {
	s := st & trace.StateMask
	if s&trace.StateBlocked != 0 && st&trace.StateRawNoLoad != 0 {
		s = s&^trace.StateBlocked | trace.StateIdle // the module's raw state of an idle kernel thread
	}
	return s
}

func (p *pfTimeline) record(rec *trace.Record) {
	t := rec.Time
	switch rec.Major {
	case trace.MajorDispatch:
		switch rec.Minor {
		case trace.DispatchSwitch:
			prevPid, prev, nextPid, next := uint32(rec.Field(0)), uint32(rec.Field(1)), uint32(rec.Field(2)), uint32(rec.Field(3))
			p.seen(t, prevPid, prev)
			p.seen(t, nextPid, next)
			p.w.Switch(rec.CPU, t, prev, p.comm(prevPid, prev), prevState(rec.Field(4)), next, p.comm(nextPid, next))
		case trace.DispatchWakeup:
			pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
			p.seen(t, pid, tid)
			p.w.Waking(rec.CPU, t, uint32(rec.Field(4)), tid, p.comm(pid, tid), int(rec.Field(2)), rec.Field(5)&trace.WakeupNew != 0)
		}
	case trace.MajorMTE:
		switch rec.Minor {
		case trace.MTEFork:
			ppid, ptid, pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1)), uint32(rec.Field(2)), uint32(rec.Field(3))
			delete(p.threads, tid)
			p.w.NewTask(rec.CPU, t, ptid, tid, p.comm(ppid, ptid), rec.Field(4)&1 != 0)
			p.seen(t, pid, tid)
		case trace.MTEExit:
			pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
			p.w.Exit(rec.CPU, t, pid, tid, p.comm(pid, tid))
		case trace.MTEExec:
			delete(p.procs, uint32(rec.Field(0))) // named afresh, with its process
			delete(p.threads, uint32(rec.Field(1)))
		case trace.MTEThreadName:
			delete(p.threads, uint32(rec.Field(1)))
		case trace.MTEProcess:
			delete(p.procs, uint32(rec.Field(0)))
			delete(p.threads, uint32(rec.Field(0)))
		}
	case trace.MajorInterrupt:
		p.interrupt(rec)
	default:
		if rec.Major >= trace.MajorUserFirst {
			p.hook(rec)
		}
	}
}

// hook writes a user hook record as a marker.
func (p *pfTimeline) hook(rec *trace.Record) {
	track := perfetto.NamedTrack(pfHookTrack)
	p.w.Track(track, 0, "trace hooks")
	name := fmt.Sprintf("hook 0x%x/0x%x", rec.Major, rec.Minor)
	if rec.Layout == trace.LayoutString && rec.Str != "" {
		name = rec.Str
	}
	p.args = append(p.args[:0], perfetto.Num("major", uint64(rec.Major)), perfetto.Num("minor", uint64(rec.Minor)), perfetto.Num("cpu", uint64(max(rec.CPU, 0))))
	for i, v := range rec.Fixed[:min(len(rec.Fixed), len(pfWordNames))] {
		p.args = append(p.args, perfetto.Num(pfWordNames[i], v))
	}
	p.w.Instant(track, rec.Time, "hook", name, 0, p.args...)
}

// interrupt writes a hard or soft interrupt's entry or exit on its CPU's
// track, pairing them as the scheduler analysis does: an exit that is not
// the innermost entry's closes every interrupt open.
func (p *pfTimeline) interrupt(rec *trace.Record) {
	kind := rec.Minor &^ trace.ExitBit
	if (kind != trace.IntrHard && kind != trace.IntrSoft) || rec.CPU < 0 {
		return
	}
	soft := kind == trace.IntrSoft
	for len(p.intr) <= rec.CPU {
		p.intr = append(p.intr, nil)
	}
	open := p.intr[rec.CPU]
	track := pfCPUTrack(rec.CPU)
	if rec.Minor&trace.ExitBit == 0 {
		p.w.Track(perfetto.NamedTrack(pfIntrTrack), 0, "interrupts")
		p.w.Track(track, perfetto.NamedTrack(pfIntrTrack), "CPU "+strconv.Itoa(rec.CPU))
		name, arg := "irq", "irq"
		if soft {
			name, arg = "softirq", "vec"
		}
		p.w.Begin(track, rec.Time, "interrupt", name, perfetto.Num(arg, rec.Field(0)))
		p.intr[rec.CPU] = append(open, soft)
		return
	}
	if n := len(open); n > 0 && open[n-1] == soft {
		p.w.End(track, rec.Time)
		p.intr[rec.CPU] = open[:n-1]
		return
	}
	p.closeIntr(rec.CPU, rec.Time)
}

// closeIntr ends the interrupts open on cpu at t.
func (p *pfTimeline) closeIntr(cpu int, t uint64) {
	for range p.intr[cpu] {
		p.w.End(pfCPUTrack(cpu), t)
	}
	p.intr[cpu] = p.intr[cpu][:0]
}

func (p *pfTimeline) newTrack(pid, tid uint32, calls bool) {
	name := p.tl.r.ProcessName(pid)
	if name == "" {
		name = p.comm(pid, pid)
	}
	p.w.Process(pid, name)
	p.w.Thread(pid, tid, p.comm(pid, tid))
	if calls {
		p.w.Track(pfCallsTrack(pid, tid), perfetto.ThreadTrack(pid, tid), "calls")
	}
}

func (p *pfTimeline) sample(t *scriptTick, sf int, leaf tlFunc) {
	p.w.Instant(perfetto.ThreadTrack(t.pid, t.tid), t.time, "sample", leaf.sym, sf,
		perfetto.Str("module", leaf.mod), perfetto.Num("cpu", uint64(t.cpu)))
}

func (p *pfTimeline) call(ev *itrace.FrameEvent) {
	track := pfCallsTrack(ev.PID, ev.TID)
	p.lastCall[ev.TID] = ev.Time
	if !ev.Begin {
		p.w.End(track, ev.Time, perfetto.Num("instructions", ev.Instructions))
		return
	}
	p.w.Begin(track, ev.Time, ev.Kind.String(), ev.Func.Name, perfetto.Str("module", ev.Func.Module))
}

// branch writes an ITrace system call, page fault or interrupt of a
// thread's user code as a slice on its calls track: the kernel's time,
// ending at the record's time (not before the track's last event).
func (p *pfTimeline) branch(b *itrace.Branch) {
	if !b.Kernel || b.DurationNs == 0 && b.Syscall < 0 && !b.Fault && b.Irq < 0 {
		return
	}
	var name, cat string
	var arg perfetto.Arg
	switch {
	case b.Syscall >= 0:
		name = p.sysNames[b.Syscall]
		if name == "" {
			name = fmt.Sprintf("syscall %d", b.Syscall)
			p.sysNames[b.Syscall] = name
		}
		cat, arg = "syscall", perfetto.Num("nr", uint64(b.Syscall))
	case b.Fault:
		name, cat, arg = "page fault", "fault", perfetto.Num("address", b.Addr)
	case b.Irq >= 0:
		name, cat, arg = "interrupt", "interrupt", perfetto.Num("irq", uint64(b.Irq))
	default:
		return
	}
	if !p.tl.kept(b.PID, b.TID) {
		return
	}
	p.tl.track(b.PID, b.TID, true)
	end := p.tl.now
	start := end - min(end, uint64(b.DurationNs))
	start = max(start, p.lastCall[b.TID])
	track := pfCallsTrack(b.PID, b.TID)
	p.w.Begin(track, start, cat, name, arg)
	p.w.End(track, end)
	p.lastCall[b.TID] = end
}

func (p *pfTimeline) finish() error {
	end := max(p.tl.now, p.tl.off)
	for cpu := range p.intr {
		p.closeIntr(cpu, end)
	}
	return p.w.Close()
}
