package kevents

// Scheduler records beyond DISPATCH: wake-ups (sched_wakeup,
// sched_wakeup_new → WAKEUP) and the stack of a thread switched out while
// not runnable (UNWIND_SWITCH), what off-CPU and wake-up latency reports
// read (analysis/offcpu).
//
// The stacks come from a second sched_switch event beside the one that
// writes DISPATCH: it samples the callchain (with --unwind dwarf the user
// registers and a copy of the user stack too) and carries a tracepoint
// filter that lets only waits through (prev_state & waitStates), so a
// switch that is no wait (a preemption, a yield, the idle task) costs its
// DISPATCH record alone. One event sampling every switch would walk (and
// with --unwind dwarf copy) the stack of each preempted or yielding thread
// too, inside the switch, for a record the agent drops: a load that
// yields or is preempted often pays it in its own system time, while the
// agent reads about as much per wait either way. The two events write one
// record each into the CPU's ring, next to each other but in either order
// (the kernel runs a tracepoint's perf events in the order they were last
// scheduled in); waitPair puts the stack after its DISPATCH. The wait's
// sample carries no raw data: it is taken in the thread switched out (its
// TID is the switch's prev, its pid that thread's process), and the state
// it left in is its DISPATCH's. The kernel builds the raw data for the
// filter, but does not copy it into the ring a second time.
//
// Each event reads the clock as it runs, before its callchain and stack
// copy: a DISPATCH event that runs after the wait event reads it later by
// the time the stack took. The wait event is opened first: the kernel
// schedules a CPU's events in, newest last, each to the head of the
// tracepoint's list, so the DISPATCH event runs first. Where it does not
// (the order can change), DISPATCH takes the wait sample's time.

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// waitStates are the prev_state bits of a wait worth a stack: sleeping,
// blocked, stopped, traced, parked, idle (not running or preempted: 0 or
// the preempted bit above the low byte; not dead or a zombie).
const waitStates = trace.StateMask &^ (trace.StateDead | trace.StateZombie)

// waitFilter is the wait event's tracepoint filter (the kernel's event
// filter syntax: a numeric field & a mask is true when a bit is set).
var waitFilter = fmt.Sprintf("prev_state & %#x", waitStates)

// openWaitEvent opens on r's CPU the sched_switch event (tracepoint id)
// that samples the stacks of waits: the callchain, and with the
// unwinder the user registers and stackBytes of user stack.
func (s *Session) openWaitEvent(r *ring, id uint64, stackBytes int) error {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Sample: 1,
		Sample_type:      unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CALLCHAIN,
		Sample_max_stack: uint16(s.maxStack)}
	if s.uw != nil {
		// The sample's layout: ..., CALLCHAIN, REGS_USER, STACK_USER.
		attr.Sample_type |= unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER
		attr.Sample_regs_user = userRegsMask
		attr.Sample_stack_user = uint32(stackBytes)
	}
	fd, err := perfOpen(&attr, r.cpu, -1)
	if err != nil {
		return fmt.Errorf("open sched_switch for stacks on CPU %d: %w", r.cpu, permHint(err))
	}
	// Without the filter (a kernel that refuses it) every switch samples
	// its stack and only those that pair with a wait's DISPATCH are
	// kept: the same records, at the cost of one stack per switch.
	_ = setFilter(fd, waitFilter)
	return s.addFD(r, fd, kindSwitchWait)
}

// setFilter sets a tracepoint event's filter (PERF_EVENT_IOC_SET_FILTER).
func setFilter(fd int, filter string) error {
	b, err := unix.BytePtrFromString(filter)
	if err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_SET_FILTER, uintptr(unsafe.Pointer(b))); e != 0 {
		return fmt.Errorf("tracepoint filter %q: %w", filter, e)
	}
	return nil
}

// waitPair matches the two sched_switch samples of one switch on a CPU:
// the DISPATCH just written (whose wait's stack may still come) and a
// wait's sample read before its DISPATCH (held until it). A wait's sample
// goes with the DISPATCH next to it that switched the same thread out to
// wait, taken within maxPairGap of it; one without (its DISPATCH lost) is
// dropped.
type waitPair struct {
	t    uint64 // the last DISPATCH: its time,
	prev uint32 // the thread it switched out,
	open bool   // and whether that was a wait whose stack has not come yet

	held              bool // a wait's sample read before its DISPATCH:
	heldPid, heldPrev uint32
	heldT             uint64
	chain, regs       []byte // its data (copies, reused)
}

// maxPairGap bounds the time between the two samples of one switch (they
// are taken one after the other in the switch: microseconds apart, the
// time of a stack walk and copy).
const maxPairGap = 1e6 // ns

// heldFor tells whether the held wait's sample belongs to the DISPATCH of
// prev at t.
func (w *waitPair) heldFor(prev uint32, t uint64) bool {
	return w.held && w.heldPrev == prev && near(w.heldT, t)
}

// near tells whether two samples' times may be one switch's.
func near(a, b uint64) bool { return max(a, b)-min(a, b) < maxPairGap }

// isWait tells a switch-out to wait (one worth a stack) from its prev_state.
func isWait(state uint64) bool { return state&waitStates != 0 }

// switchTime is the time of a sched_switch's DISPATCH (its sample's t,
// its raw data): that of the wait's sample read before it, if any (the
// clock read before that sample's stack was taken), else t.
func (s *Session) switchTime(r *ring, t uint64, raw []byte) uint64 {
	w := &r.wait
	if s.tp.prevPid+4 <= len(raw) && w.heldFor(le32(raw[s.tp.prevPid:]), t) {
		return min(w.heldT, t)
	}
	return t
}

// switched is called after a sched_switch's DISPATCH record (time t, the
// tracepoint's raw data): a wait's sample held for it is written now,
// else the DISPATCH of a wait waits for its sample.
func (s *Session) switched(r *ring, t uint64, raw []byte) {
	w := &r.wait
	w.t, w.prev = t, le32(raw[s.tp.prevPid:])
	w.open = w.prev != 0 && isWait(s.prevState(raw))
	if w.open && w.heldFor(w.prev, t) {
		w.open = false
		s.switchStack(r, t, w.heldPid, w.prev, w.chain, w.regs)
	}
	w.held = false
}

// waitSample takes a sample of the wait event, taken in thread tid of pid
// as it was switched out: the stack of the thread its DISPATCH switches
// out to wait, written after that DISPATCH with its time.
func (s *Session) waitSample(r *ring, t uint64, pid, tid uint32, chain, regs []byte) {
	w := &r.wait
	if w.open && w.prev == tid && near(w.t, t) {
		w.open = false
		s.switchStack(r, w.t, pid, tid, chain, regs)
		return
	}
	w.held, w.heldPid, w.heldPrev, w.heldT = true, pid, tid, t
	w.chain = append(w.chain[:0], chain...)
	w.regs = append(w.regs[:0], regs...)
}

// loadWakeup finds the wake-up tracepoints and their pid and target_cpu
// fields (the same layout in both).
func (s *Session) loadWakeup(dir string, ids map[int]uint64) error {
	for _, e := range []struct {
		kind  int
		event string
	}{{kindWakeup, "sched/sched_wakeup"}, {kindWakeupNew, "sched/sched_wakeup_new"}} {
		id, f, err := formatOffsets(dir, e.event)
		if err != nil {
			return err
		}
		pid, ok1 := f["pid"]
		cpu, ok2 := f["target_cpu"]
		if !ok1 || !ok2 || pid[1] != 4 || cpu[1] != 4 {
			return fmt.Errorf("tracepoint %s has no 4-byte fields pid and target_cpu", e.event)
		}
		if e.kind == kindWakeupNew && (pid[0] != s.tp.wakePid || cpu[0] != s.tp.wakeCPU) {
			return fmt.Errorf("tracepoints sched_wakeup and sched_wakeup_new differ in layout")
		}
		s.tp.wakePid, s.tp.wakeCPU = pid[0], cpu[0]
		ids[e.kind] = id
	}
	return nil
}

// wakeup writes WAKEUP: the woken thread (the tracepoint's pid), its
// target CPU, and the waker (the thread the sample was taken in).
func (s *Session) wakeup(r *ring, kind int, t uint64, wakerPid, wakerTid uint32, raw []byte) {
	if s.tp.wakePid+4 > len(raw) || s.tp.wakeCPU+4 > len(raw) {
		return
	}
	tid, cpu := le32(raw[s.tp.wakePid:]), le32(raw[s.tp.wakeCPU:])
	var flags uint64
	if kind == kindWakeupNew {
		flags = trace.WakeupNew
	}
	if wakerTid == 0 {
		wakerPid = 0
	}
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchWakeup, t, append(r.fields[:0], uint64(s.tgidIn(r, tid)), uint64(tid), uint64(cpu), uint64(wakerPid), uint64(wakerTid), flags))
}

// prevState is sched_switch's prev_state (0 when the data is too short).
func (s *Session) prevState(raw []byte) uint64 {
	if s.tp.prevState+s.tp.prevStateSize > len(raw) {
		return 0
	}
	if s.tp.prevStateSize == 8 {
		return le64(raw[s.tp.prevState:])
	}
	return uint64(le32(raw[s.tp.prevState:]))
}

// splitCallchain cuts a sample's callchain (u64 nr, nr u64 entries) from
// the front of b; chain is nil when b is too short for it.
func splitCallchain(b []byte) (chain, rest []byte) {
	if len(b) < 8 {
		return nil, b
	}
	nr := le64(b)
	if nr > uint64(len(b)-8)/8 {
		return nil, b
	}
	n := 8 + 8*int(nr)
	return b[:n], b[n:]
}

// switchStack writes the stack of thread tid of pid, which its DISPATCH
// (just written, at t) switched out to wait: its wait's stack. Only a
// wait's DISPATCH pairs with a stack (waitPair): a preempted thread's
// stack is no wait's, an exiting one's neither, and the idle task has
// none worth a record. With --unwind dwarf, regs is the sample's user
// registers and stack copy (what follows its callchain): the user frames
// are unwound from them by call-frame information, through the queue of
// samples that wait for a table (pending.go), which keeps the stack right
// after its DISPATCH record.
func (s *Session) switchStack(r *ring, t uint64, pid, tid uint32, chain, regs []byte) {
	if tid == 0 {
		return
	}
	pcs, kernel, truncated := s.chainPCs(r, chain)
	if s.pend != nil && len(regs) > 0 {
		r.fp = append(r.fp[:0], pcs[kernel:]...)
		s.pend.userStack(r.cpu, t, pid, tid, pcs[:kernel], r.fp, regs, s.maxStack-kernel, truncated, true)
		return
	}
	if len(pcs) == 0 {
		return
	}
	s.sink.SwitchStack(r.cpu, t, pid, tid, pcs, kernel, truncated, false)
}

// chainPCs turns a callchain into PCs, kernel ones first (the context
// markers dropped), into r.pcs.
func (s *Session) chainPCs(r *ring, b []byte) (pcs []uint64, kernel int, truncated bool) {
	nr := int(le64(b))
	b = b[8:]
	if nr > len(b)/8 {
		nr = len(b) / 8
	}
	pcs = r.pcs[:0]
	user := false
	for i := 0; i < nr; i++ {
		v := le64(b[8*i:])
		if v >= perfContextMax {
			user = v == uint64(1<<64-512) // PERF_CONTEXT_USER (-512)
			continue
		}
		pcs = append(pcs, v)
		if !user {
			kernel++
		}
	}
	r.pcs = pcs
	return pcs, kernel, len(pcs) >= s.maxStack
}

// noTid is the thread id perf writes for a thread it cannot name.
const noTid = ^uint32(0)

// switchIn reads perf's own switch record (PERF_RECORD_SWITCH_CPU_WIDE,
// written from the scheduler's perf hooks, not from the sched_switch
// tracepoint), for the switch-ins sched_switch did not report. Some
// kernels switch from the idle task to a woken thread without the
// tracepoint (seen on a 6.18 guest whose idle CPUs poll: the switch-outs
// to idle are reported, the switch-ins from it are not, nor are wake-ups
// from idle), and some write no record at all in the context of a
// process they hide from perf (seen: a sandbox's init process; perf
// record shows switches to its threads, never from them): the switch
// from such a thread to the next is then in perf's switch-in record
// alone, written in the thread switched in. Either would leave that
// thread's wait without an end. A switch-in that sched_switch did not
// report (the CPU's last sched_switch went to another thread) is written
// as the DISPATCH the tracepoint would have written: from the idle task
// with the idle task's state (no wait: 0), from a thread with
// StateUnknown (its switch-out's state is in no record). One the
// tracepoint reported is not written twice: the tracepoint's record
// comes first in the CPU's ring (sched_switch runs before the switch,
// perf's switch-in record after it). A switch-in whose thread perf could
// not name (its id -1: seen for a thread of an exiting process) is not
// written: the tracepoint reported it or nothing can.
func (s *Session) switchIn(r *ring, b []byte) {
	if len(b) < 8 {
		return
	}
	prevPid, prevTid := le32(b), le32(b[4:])
	pid, tid, t, ok := sampleID(b[8:])
	if !ok || tid == 0 || tid == noTid || r.lastNext == int64(tid) {
		return
	}
	r.lastNext = int64(tid)
	r.unnamed.ok = false
	r.wait.open, r.wait.held = false, false // no wait's stack comes: the tracepoint's sample is not there
	var state uint64
	if prevTid != 0 {
		state = trace.StateUnknown
	} else {
		prevPid = 0
	}
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchSwitch, t, append(r.fields[:0], uint64(prevPid), uint64(prevTid), uint64(pid), uint64(tid), state))
}

// sleepsOutFilter is the DISPATCH event's tracepoint filter without
// stacks: every switch but a switch-out to sleep (prev_state S,
// TASK_INTERRUPTIBLE: timers, futexes, pipes, sockets, poll) and a
// switch-out of a thread still runnable that was not preempted (prev_state
// 0, R: it yielded, or gave the CPU on its way back to user space to a
// thread it woke), the two most common. perf's switch-out record of such
// a switch, which the agent asks for anyway (switchIn), writes its
// DISPATCH instead (switchOut): one record fewer a switch, written in
// the thread switched out (the tracepoint's sample is still built, for
// the filter, but is not written). The stacks' configuration keeps the
// tracepoint's record of every switch: a wait's stack pairs with it
// (waitPair).
const sleepsOutFilter = "prev_state > 1"

// switchOut reads perf's switch-out record (PERF_RECORD_SWITCH_CPU_WIDE
// with PERF_RECORD_MISC_SWITCH_OUT, written in the thread switched out,
// in the scheduler's perf hook that runs after the sched_switch
// tracepoint) where the tracepoint leaves out the switch-outs in S and R
// (sleepsOutFilter). A switch that sched_switch reported is next to its
// record in the CPU's ring, before it, and has made the thread switched
// in the CPU's last (lastNext); one that it did not report is written as
// the DISPATCH the tracepoint would have written, in R (prev_state 0)
// where the record says prev was still runnable
// (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: preempted or not, perf does not
// tell; a preemption the tracepoint reported), else in S. A switch whose
// tracepoint record was lost (a full ring: counted) would be written so
// too. A thread perf cannot name (-1) switched out is not written (the
// switch-in record of the next thread tells of that switch); one
// switched in (a thread of an exiting process, past its release) is
// named by the tracepoint's report of its own switch-out, next on the
// CPU (heldOut).
func (s *Session) switchOut(r *ring, misc uint16, b []byte) {
	if len(b) < 8 {
		return
	}
	nextPid, next := le32(b), le32(b[4:])
	pid, tid, t, ok := sampleID(b[8:])
	if !ok || tid == noTid || r.lastNext == int64(next) {
		return
	}
	r.unnamed.ok = false
	state := trace.StateSleeping
	if misc&unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0 {
		state = 0
	}
	if tid == 0 {
		pid, state = 0, 0 // the idle task does not sleep
	}
	if next == noTid {
		// A thread that exits, past the point where perf names it:
		// named by its last switch-out, which the tracepoint reports
		// (state X), or by none (unnamedIn). Unless the tracepoint
		// reported this switch: the CPU's last thread is then not
		// prev's any more.
		if r.lastNext != int64(tid) {
			return
		}
		r.lastNext = -1
		r.unnamed = heldOut{ok: true, pid: pid, tid: tid, t: t, state: state}
		return
	}
	r.lastNext = int64(next)
	if next == 0 {
		nextPid = 0
	}
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchSwitch, t, append(r.fields[:0], uint64(pid), uint64(tid), uint64(nextPid), uint64(next), state))
}

// heldOut is a switch-out (switchOut) to a thread perf could not name,
// written when the tracepoint's next report on the CPU names the thread
// then switched out (unnamedIn).
type heldOut struct {
	ok       bool
	pid, tid uint32
	t        uint64
	state    uint64
}

// unnamedIn writes the DISPATCH held for a switch to a thread perf could
// not name, now that the CPU's sched_switch at t switches prev out: prev
// is that thread, if the report comes within maxPairGap (a dying thread
// runs for microseconds); else (records lost) it is dropped.
func (s *Session) unnamedIn(r *ring, prev uint32, t uint64) {
	h := &r.unnamed
	if !h.ok {
		return
	}
	h.ok = false
	if prev == 0 || t < h.t || !near(h.t, t) {
		return
	}
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchSwitch, h.t, append(r.fields[:0], uint64(h.pid), uint64(h.tid), uint64(s.tgidIn(r, prev)), uint64(prev), h.state))
}
