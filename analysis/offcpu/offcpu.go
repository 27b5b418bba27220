// Package offcpu turns the scheduler and interrupt records of a trace
// (DISPATCH, WAKEUP, UNWIND_SWITCH, the interrupt entry/exit pairs, and
// the tprof ticks with their UNWIND stacks) into where each thread's time
// went: running, waiting on a run queue, sleeping, blocked; the wake-up
// latencies; the off-CPU profile (the stacks threads waited in, weighted
// by the time they waited); the wall-clock profile (on-CPU and off-CPU
// time of the same threads in one profile); and the time each CPU and
// each thread spent in interrupts.
//
// Records are fed in time order (Analyzer.Record), the trace's MTE
// records applied to the namer before each record that needs names.
package offcpu

import (
	"strings"

	"perfinsp/format/trace"
)

// State is where a thread is.
type State int

// A thread's states. Every nanosecond of a thread's life in the trace is
// in exactly one.
const (
	Running  State = iota // on a CPU
	RunQueue              // runnable, not running: woken and not yet dispatched, or preempted
	Sleeping              // S: interruptible sleep (timers, futexes, poll, pipes, sockets)
	Blocked               // D: uninterruptible (disk I/O, page faults, some locks)
	Other                 // stopped, traced, parked, idle kernel thread
	Unknown               // not in the trace: before the thread's first record, or a wait whose end was not recorded
	NStates
)

var stateNames = [NStates]string{"running", "runqueue", "sleeping", "blocked", "other", "unknown"}

func (s State) String() string { return stateNames[s] }

// waitState is the state a thread switched out with prev_state enters.
func waitState(st uint64) State {
	switch {
	case st&trace.StateUnknown != 0:
		return Unknown // a switch known from the next thread's switch-in alone
	case st&trace.StateMask == 0:
		return RunQueue
	case st&trace.StateSleeping != 0, st&trace.StateIdle != 0:
		return Sleeping
	case st&trace.StateBlocked != 0:
		if st&trace.StateRawNoLoad != 0 {
			return Sleeping
		}
		return Blocked
	}
	return Other
}

// Namer names a PC of a process as of the records applied so far.
type Namer func(pid uint32, pc uint64, kernel bool) string

// Thread is one thread's account.
type Thread struct {
	PID, TID uint32
	Name     string // filled by the caller (Analyzer.Threads)
	// Start and End bound the thread's life in the trace: from the
	// trace's start or the thread's creation to its end or the exit.
	Start, End uint64
	Time       [NStates]uint64 // ns in each state; they add up to End-Start
	// Voluntary switches: the thread left the CPU to wait; involuntary:
	// it was preempted, still runnable.
	Voluntary, Involuntary uint64
	// IRQ and SoftIRQ: ns of hard and soft interrupts on the thread's
	// CPU while it ran (part of its running time).
	IRQ, SoftIRQ uint64
	// Latency: from wake-up (or preemption) to running again.
	Wake, Preempt Latencies
	worst         []Latency // the thread's longest wake-ups

	state    State
	since    uint64 // when the thread entered state
	wait     State  // the wait the thread is in or was woken from
	waitFrom uint64 // when that wait began
	woken    uint64 // the wake-up ending the wait (0: none yet)
	stack    int32  // the stack of the current wait (0: none)
	// unreported: its last switch-out is known from the next thread's
	// switch-in alone (StateUnknown): its switch-in may be in no record
	// either, so its time to its next switch-out is Unknown.
	unreported bool
	cpu        int    // the CPU it runs on (state Running)
	ranAt      uint64 // its last tick
	dead       bool
	seen       bool
	// ticks: the thread's tprof ticks by stack, for the wall-clock profile.
	ticks     map[int32]uint64
	lastTick  int32
	tickTotal uint64
}

// Latency is one wake-to-run or preempted-to-run wait.
type Latency struct {
	TID  uint32
	At   uint64 // when the thread ran again
	Ns   uint64
	CPU  int
	From uint64 // the wake-up or the preemption
	th   *Thread
}

// Latencies are the waits of one kind of a thread (or of all).
type Latencies struct {
	Ns []uint64
}

// Interrupts are interrupt times: ns, count.
type Interrupts struct {
	IRQ, SoftIRQ           uint64
	IRQCount, SoftIRQCount uint64
}

type cpuState struct {
	tid   uint32 // the thread running (its first DISPATCH tells)
	known bool
	intr  []intrFrame
}

type intrFrame struct {
	soft  bool
	start uint64
	inner uint64 // ns of interrupts nested in this one
}

// profKey is one cell of a profile: a thread (not its id: an id is
// used again by a thread made after another ended), a state, a stack.
type profKey struct {
	th    *Thread
	state State
	stack int32
}

// Analyzer reads the records.
type Analyzer struct {
	namer   Namer
	threads map[uint32]*Thread
	order   []*Thread
	cpus    map[int]*cpuState
	start   uint64
	end     uint64
	started bool
	// stacks: interned, root first; 0 is the empty stack.
	stacks  [][]string
	stackID map[string]int32
	off     map[profKey]uint64
	// KeepSpans keeps every thread's time line (Spans).
	KeepSpans bool
	// StatesOnly names no tick and no stack (a time line's: the threads'
	// states, times and interrupts only): ticks count and mark a thread
	// running, UNWIND records are not read.
	StatesOnly bool
	spans      []Span
	intrSpans  map[int][]intrSpan
	// Begin: the time from which every CPU's records are in the trace
	// (a wrap-mode trace overwrote the older ones of some CPUs; 0: from
	// the start). The scheduling, tick and interrupt records before it
	// are not read: the threads' time before it is unknown.
	Begin uint64
	// full: when a buffer filled (BUFFER_FULL: tracing stopped, each
	// CPU when it saw it): the records after it are not read.
	full uint64
	// WorstN: the worst wake-up latencies kept (default 20).
	WorstN int
	// CPUIntr: per CPU interrupt time.
	CPUIntr map[int]*Interrupts
	// Counts of what was read.
	Dispatches, Wakeups, SwitchStacks, Ticks uint64
	// SwitchStacksCFI: of the switch stacks, those whose user part was
	// unwound by call-frame information (UNWIND_SWITCH's flag).
	SwitchStacksCFI uint64
	// LostSwitchIns counts threads switched out while waiting, or
	// first seen switched out on a CPU that ran another thread: the
	// switch-in before was not in the trace.
	LostSwitchIns uint64
	// LostSwitchOuts counts threads running on a CPU whose next switch
	// was another thread's: their switch-out was not in the trace.
	LostSwitchOuts uint64
	frames         []string
}

// New returns an analyzer naming stacks with namer (nil: PCs in hex).
func New(namer Namer) *Analyzer {
	return &Analyzer{namer: namer, threads: map[uint32]*Thread{}, cpus: map[int]*cpuState{},
		stacks: [][]string{nil}, stackID: map[string]int32{"": 0}, off: map[profKey]uint64{},
		WorstN: 20, CPUIntr: map[int]*Interrupts{}}
}

// thread returns tid's account, made at t (pid 0: not known yet).
func (a *Analyzer) thread(pid, tid uint32, t uint64) *Thread {
	th := a.threads[tid]
	if th == nil || th.dead {
		from := a.start
		if th != nil {
			from = t // a thread id used again
		}
		th = &Thread{PID: pid, TID: tid, Start: from, state: Unknown, since: from, wait: Unknown, waitFrom: from, ticks: map[int32]uint64{}}
		a.threads[tid] = th
		a.order = append(a.order, th)
	}
	if th.PID == 0 && pid != 0 {
		th.PID = pid
	}
	return th
}

// enter ends th's current state at t and starts s.
func (a *Analyzer) enter(th *Thread, s State, t uint64) {
	if t > th.since {
		th.Time[th.state] += t - th.since
		if a.KeepSpans {
			a.spans = append(a.spans, Span{th, th.state, th.since, t})
		}
	}
	if t > th.since || s != th.state {
		th.since = max(t, th.since)
	}
	th.state = s
}

func (a *Analyzer) cpu(c int) *cpuState {
	cs := a.cpus[c]
	if cs == nil {
		cs = &cpuState{}
		a.cpus[c] = cs
	}
	return cs
}

// Record reads one record (in time order across CPUs).
func (a *Analyzer) Record(rec *trace.Record) {
	t := rec.Time
	if a.full != 0 && t > a.full {
		return // the trace of some CPU stopped at full
	}
	if !a.started {
		a.started = true
		a.start = t
	}
	if t > a.end {
		a.end = t
	}
	if t < a.Begin && rec.Major != trace.MajorSys && rec.Major != trace.MajorMTE {
		return // some CPU's records of that time were overwritten
	}
	switch rec.Major {
	case trace.MajorSys:
		if rec.Minor == trace.SysTraceOn && t < a.start {
			a.start = t
		}
		if rec.Minor == trace.SysBufFull {
			a.full = t
		}
	case trace.MajorDispatch:
		switch rec.Minor {
		case trace.DispatchSwitch:
			a.dispatch(rec, t)
		case trace.DispatchWakeup:
			a.wakeup(rec, t)
		}
	case trace.MajorUnwind:
		if a.StatesOnly {
			break
		}
		if rec.Minor == trace.UnwindSwitch {
			a.switchStack(rec)
		} else if rec.Minor == trace.UnwindTick {
			a.tickStack(rec)
		}
	case trace.MajorTprof:
		a.tick(rec, t)
	case trace.MajorInterrupt:
		a.interrupt(rec, t)
	case trace.MajorMTE:
		if rec.Minor == trace.MTEFork {
			pid, tid := uint32(rec.Field(2)), uint32(rec.Field(3))
			if old := a.threads[tid]; old != nil && !old.dead {
				a.finish(old, t) // a reused tid whose end was not seen
			}
			delete(a.threads, tid)
			th := a.thread(pid, tid, t)
			th.Start, th.since = t, t
			if t < a.Begin {
				// Created where the records of some CPU are
				// missing: what it did up to its first record
				// after Begin is not known.
				th.state, th.wait, th.waitFrom = Unknown, Unknown, t
				break
			}
			// Created runnable: its first run is its first wake-to-run wait.
			th.state = RunQueue
			th.wait, th.waitFrom, th.woken = RunQueue, t, 0
		}
	}
}

func (a *Analyzer) dispatch(rec *trace.Record, t uint64) {
	a.Dispatches++
	prevPid, prev, nextPid, next, st := uint32(rec.Field(0)), uint32(rec.Field(1)), uint32(rec.Field(2)), uint32(rec.Field(3)), rec.Field(4)
	cs := a.cpu(rec.CPU)
	if cs.known && cs.tid != 0 && cs.tid != prev {
		if th := a.threads[cs.tid]; th != nil && th.state == Running && th.cpu == rec.CPU {
			a.lostSwitchOut(th)
		}
	}
	if prev != 0 {
		th := a.thread(prevPid, prev, t)
		switch {
		case th.state == Unknown && (th.unreported || st&trace.StateUnknown != 0):
			// A switch known from the next thread's switch-in alone
			// (a thread the kernel hides from perf, or a lost
			// record): when it began to run is not known, the time
			// before stays Unknown.
			a.unknownTo(th, t)
		case th.state == Unknown && !cs.known:
			// Its first record, on a CPU with no switch before: it
			// ran since the trace started (or since Begin).
			a.unknownTo(th, max(th.since, a.Begin))
			a.enter(th, Running, max(th.since, a.Begin))
			th.cpu = rec.CPU
		case th.state == Unknown:
			// Its first record, on a CPU that switched to another
			// thread before: its switch-in is not in the trace (a
			// lost record). When it began to run is not known: its
			// time up to here is Unknown.
			a.LostSwitchIns++
			a.unknownTo(th, t)
		case th.state != Running:
			// Switched out while waiting: the switch-in that ended
			// its wait is not in the trace (a kernel that does not
			// report some, or a lost record). When it stopped waiting
			// and began to run is not known: the time is Unknown, and
			// the wait is in the profiles as unknown from its wake-up
			// (or its start).
			a.LostSwitchIns++
			if th.woken != 0 && th.wait != RunQueue && th.woken > th.waitFrom {
				a.off[profKey{th, th.wait, th.stack}] += th.woken - th.waitFrom
			}
			if t > th.since {
				a.off[profKey{th, Unknown, 0}] += t - th.since
			}
			th.state = Unknown
		}
		a.enter(th, waitState(st), t)
		th.wait, th.waitFrom, th.woken, th.stack = th.state, t, 0, 0
		th.unreported = th.state == Unknown
		switch th.state {
		case RunQueue:
			th.Involuntary++
		case Unknown:
		default:
			th.Voluntary++
		}
		if st&(trace.StateDead|trace.StateZombie) != 0 {
			a.finish(th, t)
		}
	}
	cs.tid, cs.known = next, true
	if next == 0 {
		return
	}
	th := a.thread(nextPid, next, t)
	if th.state == Running {
		th.cpu = rec.CPU
		return // a switch record lost or doubled: keep it running
	}
	if th.state == RunQueue && th.woken != 0 {
		l := Latency{TID: next, At: t, CPU: rec.CPU, From: th.woken, Ns: t - th.woken, th: th}
		th.Wake.Ns = append(th.Wake.Ns, l.Ns)
		th.worst = keepWorst(th.worst, l, a.WorstN)
	} else if th.state == RunQueue && th.seen {
		th.Preempt.Ns = append(th.Preempt.Ns, t-th.since)
	}
	a.closeWait(th, t)
	a.enter(th, Running, t)
	th.cpu = rec.CPU
	th.seen = true
}

// unknownTo puts the time of th, Unknown with no wake-up since its wait
// began, up to t in the profiles' unknown cell (ending that wait).
func (a *Analyzer) unknownTo(th *Thread, t uint64) {
	if t > th.waitFrom {
		a.off[profKey{th, Unknown, 0}] += t - th.waitFrom
		th.waitFrom = t
	}
}

// lostSwitchOut ends the running of th, whose CPU switched from another
// thread: its switch-out is not in the trace (a lost record, or a
// thread the kernel hides from perf). When it stopped running is not
// known: it ran up to its last tick (or its switch-in), its time from
// there to its next record is Unknown, as after an unreported switch-out.
func (a *Analyzer) lostSwitchOut(th *Thread) {
	a.LostSwitchOuts++
	end := max(th.since, th.ranAt)
	a.enter(th, Unknown, end)
	th.wait, th.waitFrom, th.woken, th.stack = Unknown, end, 0, 0
	th.unreported = true
}

// closeWait adds the off-CPU wait th ends at t to the profile: the time
// in its wait state up to the wake-up, then on the run queue.
func (a *Analyzer) closeWait(th *Thread, t uint64) {
	if th.state == Running {
		return
	}
	if th.woken != 0 && th.wait != RunQueue {
		if th.woken > th.waitFrom {
			a.off[profKey{th, th.wait, th.stack}] += th.woken - th.waitFrom
		}
		if t > th.woken {
			a.off[profKey{th, RunQueue, th.stack}] += t - th.woken
		}
		return
	}
	if t > th.waitFrom {
		a.off[profKey{th, th.state, th.stack}] += t - th.waitFrom
	}
}

func (a *Analyzer) wakeup(rec *trace.Record, t uint64) {
	a.Wakeups++
	pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
	th := a.thread(pid, tid, t)
	switch {
	case th.state == RunQueue && rec.Field(5)&trace.WakeupNew != 0 && th.woken == 0:
		th.woken, th.seen = t, true // a new thread: its wait to run starts
		return
	case th.state == Running, th.state == RunQueue:
		return // woken before it left the CPU, or already woken
	}
	th.wait = th.state
	a.enter(th, RunQueue, t)
	th.woken = t
	th.seen = true
}

// switchStack gives the wait the thread just began its stack.
func (a *Analyzer) switchStack(rec *trace.Record) {
	a.SwitchStacks++
	if rec.Field(2)&trace.UnwindCFI != 0 {
		a.SwitchStacksCFI++
	}
	th := a.threads[uint32(rec.Field(1))]
	if th == nil || th.state == Running || th.waitFrom != rec.Time {
		return
	}
	th.stack = a.stackOf(th.PID, rec)
}

// stackOf names an UNWIND record's PCs and interns them, root first:
// user frames, then kernel frames (marked _[k]).
func (a *Analyzer) stackOf(pid uint32, rec *trace.Record) int32 {
	b := []byte(rec.Str)
	n := len(b) / 8
	kernel := int(rec.Field(2) >> trace.UnwindKernShift)
	if kernel > n {
		kernel = n
	}
	fr := a.frames[:0]
	for i := n - 1; i >= 0; i-- {
		pc := le64(b[8*i:])
		k := i < kernel
		// Every PC but the first of each part is a return address:
		// the call is the byte before it.
		if i != 0 && i != kernel && pc > 0 {
			pc--
		}
		name := ""
		if a.namer != nil {
			name = a.namer(pid, pc, k)
		}
		if name == "" {
			name = "0x" + hex(pc)
		}
		if k {
			name += "_[k]"
		}
		fr = append(fr, name)
	}
	a.frames = fr
	return a.intern(fr)
}

func (a *Analyzer) intern(fr []string) int32 {
	key := strings.Join(fr, ";")
	if id, ok := a.stackID[key]; ok {
		return id
	}
	id := int32(len(a.stacks))
	a.stacks = append(a.stacks, append([]string(nil), fr...))
	a.stackID[key] = id
	return id
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func hex(v uint64) string {
	const digits = "0123456789abcdef"
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&15]
		v >>= 4
		if v == 0 {
			return string(buf[i:])
		}
	}
}

// tick counts a tprof tick under its PC's name, until its UNWIND record
// (if any) gives its stack.
func (a *Analyzer) tick(rec *trace.Record, t uint64) {
	pid, tid := uint32(rec.Field(0)), uint32(rec.Field(1))
	if tid == 0 {
		return
	}
	a.Ticks++
	th := a.thread(pid, tid, t)
	if cs := a.cpu(rec.CPU); th.state == Unknown && !cs.known {
		// On this CPU since the trace began (or since Begin): no
		// switch yet.
		a.unknownTo(th, max(th.since, a.Begin))
		a.enter(th, Running, max(th.since, a.Begin))
		th.cpu = rec.CPU
		cs.tid, cs.known = tid, true
	}
	if th.state == Running {
		th.ranAt = t
	}
	if a.StatesOnly {
		return
	}
	name := ""
	kernel := rec.Field(3)&trace.TprofKernel != 0
	if a.namer != nil {
		name = a.namer(pid, rec.Field(2), kernel)
	}
	if name == "" {
		name = "0x" + hex(rec.Field(2))
	}
	if kernel {
		name += "_[k]"
	}
	a.frames = append(a.frames[:0], name)
	id := a.intern(a.frames)
	th.ticks[id]++
	th.tickTotal++
	th.lastTick = id
}

// tickStack moves the thread's last tick to its full stack.
func (a *Analyzer) tickStack(rec *trace.Record) {
	th := a.threads[uint32(rec.Field(1))]
	if th == nil || th.tickTotal == 0 || th.ticks[th.lastTick] == 0 {
		return
	}
	id := a.stackOf(th.PID, rec)
	th.ticks[th.lastTick]--
	if th.ticks[th.lastTick] == 0 {
		delete(th.ticks, th.lastTick)
	}
	th.ticks[id]++
	th.lastTick = -1
}

// interrupt times hard and soft interrupts per CPU and per thread they
// interrupted, each nested one out of the one it interrupted.
func (a *Analyzer) interrupt(rec *trace.Record, t uint64) {
	kind := rec.Minor &^ trace.ExitBit
	if kind != trace.IntrHard && kind != trace.IntrSoft {
		return
	}
	soft := kind == trace.IntrSoft
	cs := a.cpu(rec.CPU)
	if rec.Minor&trace.ExitBit == 0 {
		cs.intr = append(cs.intr, intrFrame{soft: soft, start: t})
		return
	}
	n := len(cs.intr)
	if n == 0 || cs.intr[n-1].soft != soft {
		cs.intr = cs.intr[:0] // an exit without its entry (before the trace began): start afresh
		return
	}
	f := cs.intr[n-1]
	cs.intr = cs.intr[:n-1]
	d := t - f.start
	if a.KeepSpans {
		if a.intrSpans == nil {
			a.intrSpans = map[int][]intrSpan{}
		}
		a.intrSpans[rec.CPU] = append(a.intrSpans[rec.CPU], intrSpan{f.start, t, soft})
	}
	if n > 1 {
		cs.intr[n-2].inner += d
	}
	d -= min(d, f.inner)
	ci := a.CPUIntr[rec.CPU]
	if ci == nil {
		ci = &Interrupts{}
		a.CPUIntr[rec.CPU] = ci
	}
	var th *Thread
	if cs.known && cs.tid != 0 {
		th = a.threads[cs.tid]
	}
	if soft {
		ci.SoftIRQ += d
		ci.SoftIRQCount++
		if th != nil {
			th.SoftIRQ += d
		}
	} else {
		ci.IRQ += d
		ci.IRQCount++
		if th != nil {
			th.IRQ += d
		}
	}
}

// keepWorst keeps the n longest wake-up latencies of w and l, longest first.
func keepWorst(w []Latency, l Latency, n int) []Latency {
	if n <= 0 || len(w) == n && w[len(w)-1].Ns >= l.Ns {
		return w
	}
	i := len(w)
	for i > 0 && w[i-1].Ns < l.Ns {
		i--
	}
	w = append(w, Latency{})
	copy(w[i+1:], w[i:])
	w[i] = l
	if len(w) > n {
		w = w[:n]
	}
	return w
}

// finish ends th's life at t.
func (a *Analyzer) finish(th *Thread, t uint64) {
	a.closeWait(th, t)
	a.enter(th, th.state, t)
	th.End = t
	th.dead = true
}

// Finish ends the trace at end (0, or a trace a full buffer stopped: the
// last record's time read): every thread alive then is accounted up to it.
func (a *Analyzer) Finish(end uint64) {
	if end == 0 || end < a.end || a.full != 0 {
		end = a.end
	}
	for _, th := range a.order {
		if !th.dead {
			a.finish(th, end)
		}
	}
	a.end = end
}

// Threads returns every thread seen, in order of appearance.
func (a *Analyzer) Threads() []*Thread { return a.order }

// Worst returns the longest wake-up latencies of the threads (Select),
// longest first.
func (a *Analyzer) Worst() []Latency {
	var w []Latency
	for _, th := range a.order {
		for _, l := range th.worst {
			w = keepWorst(w, l, a.WorstN)
		}
	}
	return w
}

// Span is the trace's time span read.
func (a *Analyzer) Span() (start, end uint64) { return a.start, a.end }

// Lifetime is the thread's time in the trace.
func (th *Thread) Lifetime() uint64 { return th.End - th.Start }

// Select keeps the threads keep selects in the text and JSON reports.
func (a *Analyzer) Select(keep func(th *Thread) bool) {
	out := a.order[:0]
	for _, th := range a.order {
		if keep(th) {
			out = append(out, th)
		}
	}
	a.order = out
}

// Span is a stretch of a thread's time line in one state.
type Span struct {
	Thread     *Thread
	State      State
	Start, End uint64
}

// Spans returns the time lines kept (KeepSpans), in the order they ended.
func (a *Analyzer) Spans() []Span { return a.spans }
