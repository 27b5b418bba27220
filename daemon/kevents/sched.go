package kevents

// Scheduler records beyond DISPATCH: wake-ups (sched_wakeup,
// sched_wakeup_new → WAKEUP) and the stack of a thread switched out while
// not runnable (sched_switch sampled with its callchain → UNWIND_SWITCH),
// what off-CPU and wake-up latency reports read (analysis/offcpu).

import (
	"fmt"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

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
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchWakeup, t, append(r.fields[:0], uint64(s.tgidOf(tid)), uint64(tid), uint64(cpu), uint64(wakerPid), uint64(wakerTid), flags))
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

// switchPair joins a switch's two samples on one CPU: the sched_switch
// event that writes DISPATCH, and the one sampled with the callchain of
// the thread switched out. The kernel runs the two handlers back to back,
// in either order (its list of a tracepoint's perf events is ordered by
// when each was added), so the one that comes first waits for the other.
type switchPair struct {
	t         uint64 // the DISPATCH's time (0: none waiting for its stack)
	prev      uint32
	heldPrev  uint32 // a stack sample waiting for its DISPATCH (0: none)
	heldRaw   []byte
	heldChain []byte
}

// afterSwitch follows a DISPATCH written from raw at t: the stack sample
// of the same switch, if it came first, is written now (with the
// DISPATCH's time), else expected.
func (s *Session) afterSwitch(r *ring, t uint64, raw []byte) {
	if !s.switchStacks || s.tp.prevPid+4 > len(raw) {
		return
	}
	prev := le32(raw[s.tp.prevPid:])
	p := &r.sw
	if p.heldPrev != 0 && p.heldPrev == prev {
		p.heldPrev, p.t = 0, 0
		s.switchStack(r, t, p.heldRaw, p.heldChain)
		return
	}
	p.heldPrev = 0 // a stack sample of another switch: its DISPATCH was lost
	p.t, p.prev = t, prev
}

// switchStackSample takes the stack sample of a switch: written after its
// DISPATCH with that record's time, or held until it comes.
func (s *Session) switchStackSample(r *ring, raw, chain []byte) {
	if s.tp.prevPid+4 > len(raw) {
		return
	}
	prev := le32(raw[s.tp.prevPid:])
	p := &r.sw
	if p.t != 0 && p.prev == prev {
		t := p.t
		p.t = 0
		s.switchStack(r, t, raw, chain)
		return
	}
	p.t = 0
	p.heldPrev = prev
	p.heldRaw = append(p.heldRaw[:0], raw...)
	p.heldChain = append(p.heldChain[:0], chain...)
}

// switchStack writes the stack of the thread sched_switch switched out
// (the switch's prev, the thread the sample was taken in) when it left the
// CPU to wait: its wait's stack. A preempted thread's stack is no wait's,
// an exiting one's neither, and the idle task has none worth a record.
// The thread is named from the tracepoint (the sample's own ids are -1
// once an exiting thread is unhashed).
func (s *Session) switchStack(r *ring, t uint64, raw, chain []byte) {
	state := s.prevState(raw)
	if state&trace.StateMask == 0 || state&(trace.StateDead|trace.StateZombie) != 0 || s.tp.prevPid+4 > len(raw) {
		return
	}
	tid := le32(raw[s.tp.prevPid:])
	if tid == 0 {
		return
	}
	pcs, kernel, truncated := s.chainPCs(r, chain)
	if len(pcs) == 0 {
		return
	}
	s.sink.SwitchStack(r.cpu, t, s.tgidOf(tid), tid, pcs, kernel, truncated)
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

// switchIn reads perf's own switch record (PERF_RECORD_SWITCH_CPU_WIDE,
// written from the scheduler's perf hooks, not from the sched_switch
// tracepoint). Some kernels switch from the idle task to a woken thread
// without the tracepoint (seen on a 6.18 guest whose idle CPUs poll: the
// switch-outs to idle are reported, the switch-ins from it are not, nor
// are wake-ups from idle), which would leave the thread's wait without an
// end. A switch-in from the idle task that sched_switch did not report is
// written as the DISPATCH it would have written (the idle task's state is
// no wait's, so 0); one the tracepoint reported (the CPU's last
// sched_switch went to this thread) is not written twice.
func (s *Session) switchIn(r *ring, misc uint16, b []byte) {
	if misc&unix.PERF_RECORD_MISC_SWITCH_OUT != 0 || len(b) < 8 {
		return
	}
	prevPid, prevTid := le32(b), le32(b[4:])
	pid, tid, t, ok := sampleID(b[8:])
	if !ok || prevTid != 0 || tid == 0 || r.lastNext == int64(tid) {
		return
	}
	r.lastNext = int64(tid)
	s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchSwitch, t, append(r.fields[:0], uint64(prevPid), 0, uint64(pid), uint64(tid), 0))
}
