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

// switchStack writes the stack of the thread sched_switch switched out
// (the switch's prev, the thread the sample was taken in) when it left the
// CPU to wait: its wait's stack. A preempted thread's stack is no wait's,
// an exiting one's neither, and the idle task has none worth a record.
// The thread is named from the tracepoint (the sample's own ids are -1
// once an exiting thread is unhashed). With --unwind dwarf, regs is the
// sample's user registers and stack copy (what follows its raw data): the
// user frames are unwound from them by call-frame information, through
// the queue of samples that wait for a table (pending.go), which keeps
// the stack right after its DISPATCH record.
func (s *Session) switchStack(r *ring, t uint64, raw, chain, regs []byte) {
	state := s.prevState(raw)
	if state&trace.StateMask == 0 || state&(trace.StateDead|trace.StateZombie) != 0 || s.tp.prevPid+4 > len(raw) {
		return
	}
	tid := le32(raw[s.tp.prevPid:])
	if tid == 0 {
		return
	}
	pcs, kernel, truncated := s.chainPCs(r, chain)
	pid := s.tgidOf(tid)
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
