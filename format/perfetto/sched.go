package perfetto

import "google.golang.org/protobuf/encoding/protowire"

// The scheduler's events, as the kernel's ftrace reports them: each CPU's
// are kept in its FtraceEventBundle (ftrace/ftrace_event_bundle.proto)
// and written every bundleEvents events and at Close.

// TaskState is a thread's state as sched_switch's prev_state reports it
// (the kernel's TASK_REPORT bits): 0 runnable (preempted).
const (
	TaskRunnable = 0x00
	TaskSleeping = 0x01 // S
	TaskBlocked  = 0x02 // D
	TaskIdle     = 0x80 // I
)

// ftraceEvent appends to cpu's bundle an FtraceEvent
// (ftrace/ftrace_event.proto) at t of thread tid (the one running on the
// CPU), holding the event made in w.sub as field num.
func (w *Writer) ftraceEvent(cpu int, t uint64, tid uint32, num protowire.Number) {
	if cpu < 0 {
		cpu = 0
	}
	for len(w.cpus) <= cpu {
		w.cpus = append(w.cpus, cpuBundle{})
	}
	m := appendUint(w.msg[:0], fFtraceTimestamp, t)
	m = appendUint(m, fFtracePID, uint64(tid))
	m = appendMsg(m, num, w.sub)
	w.msg = m
	c := &w.cpus[cpu]
	c.buf = appendMsg(c.buf, fBundleEvent, m)
	if c.n++; c.n >= bundleEvents {
		w.flushCPU(cpu)
	}
}

// flushCPU writes cpu's bundle.
func (w *Writer) flushCPU(cpu int) {
	c := &w.cpus[cpu]
	if c.n == 0 {
		return
	}
	w.packet(0, false)
	m := protowire.AppendTag(w.pkt, fPktFtraceEvents, protowire.BytesType)
	bundle := protowire.SizeTag(fBundleCPU) + protowire.SizeVarint(uint64(cpu)) + len(c.buf)
	m = protowire.AppendVarint(m, uint64(bundle))
	m = appendUint(m, fBundleCPU, uint64(cpu))
	w.pkt = append(m, c.buf...)
	w.emit()
	c.buf, c.n = c.buf[:0], 0
}

// Switch writes that cpu switched at t from thread prev (its command
// prevComm), leaving in prevState (TaskRunnable...), to thread next (0:
// the idle task).
func (w *Writer) Switch(cpu int, t uint64, prev uint32, prevComm string, prevState uint64, next uint32, nextComm string) {
	m := appendStr(w.sub[:0], fSwitchPrevComm, prevComm)
	m = appendUint(m, fSwitchPrevPID, uint64(prev))
	m = appendUint(m, fSwitchPrevPrio, defaultPrio)
	m = appendUint(m, fSwitchPrevState, prevState)
	m = appendStr(m, fSwitchNextComm, nextComm)
	m = appendUint(m, fSwitchNextPID, uint64(next))
	m = appendUint(m, fSwitchNextPrio, defaultPrio)
	w.sub = m
	w.ftraceEvent(cpu, t, prev, fFtraceSchedSwitch)
}

// Waking writes that thread tid (its command comm) was woken at t on cpu
// by thread waker, to run on target; isNew: a new thread's first
// wake-up (sched_wakeup_new).
func (w *Writer) Waking(cpu int, t uint64, waker, tid uint32, comm string, target int, isNew bool) {
	m := appendStr(w.sub[:0], fWakeComm, comm)
	m = appendUint(m, fWakePID, uint64(tid))
	m = appendUint(m, fWakePrio, defaultPrio)
	m = appendUint(m, fWakeSuccess, 1)
	m = appendUint(m, fWakeTarget, uint64(target))
	w.sub = m
	num := protowire.Number(fFtraceSchedWaking)
	if isNew {
		num = fFtraceWakeupNew
	}
	w.ftraceEvent(cpu, t, waker, num)
}

// NewTask writes that thread parent made thread tid (its command comm)
// at t, a thread of parent's process when thread is set.
func (w *Writer) NewTask(cpu int, t uint64, parent, tid uint32, comm string, thread bool) {
	const cloneThread = 0x10000 // CLONE_THREAD
	var flags uint64
	if thread {
		flags = cloneThread
	}
	m := appendUint(w.sub[:0], fNewtaskPID, uint64(tid))
	m = appendStr(m, fNewtaskComm, comm)
	m = appendUint(m, fNewtaskFlags, flags)
	w.sub = m
	w.ftraceEvent(cpu, t, parent, fFtraceNewtask)
}

// Exit writes that thread tid of process pid (its command comm) exited
// at t.
func (w *Writer) Exit(cpu int, t uint64, pid, tid uint32, comm string) {
	m := appendStr(w.sub[:0], fExitComm, comm)
	m = appendUint(m, fExitPID, uint64(tid))
	m = appendUint(m, fExitTGID, uint64(pid))
	m = appendUint(m, fExitPrio, defaultPrio)
	w.sub = m
	w.ftraceEvent(cpu, t, tid, fFtraceProcessExit)
}

// Close writes the bundles pending and flushes the trace; the error is
// the first the writing met.
func (w *Writer) Close() error {
	for cpu := range w.cpus {
		w.flushCPU(cpu)
	}
	return w.w.Flush()
}
