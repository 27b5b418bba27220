package kevents

// The reader's thread. Dispatch, wake-up and interrupt records come at the
// rate the workload sets: a switch-heavy program writes 50-100 MB a second
// into one CPU's ring, which then holds tens of milliseconds. The kernel
// wakes the reader when a ring is a quarter full; a reader that then
// waits its turn for a CPU finds the ring full and the kernel dropping
// records. On a busy machine that wait is long for an agent: it runs in
// its own session, and (with autogroups, the default of desktop and many
// server kernels) a session's threads share one scheduling entity among
// those of every other session, placed behind them when it wakes after a
// sleep; perf record started in a session of its own loses the same
// records. So the reader of such a session asks for a thread of its own
// at the lowest real-time priority (SCHED_FIFO 1): it then runs as soon
// as the kernel wakes it, ahead of ordinary programs, and sleeps again
// once the rings are drained. Its work per wake-up is bounded by the
// rings' size, and the kernel's real-time throttling (by default 5 % of
// each second kept for ordinary tasks) bounds it too.
//
// The goroutine keeps its thread to the end: a goroutine that exits
// locked to its thread ends the thread, so the policy never reaches
// another goroutine. SCHED_RESET_ON_FORK keeps it from any thread the
// runtime would start from this one.

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// readerPriority is the reader's SCHED_FIFO priority: the lowest.
const readerPriority = 1

// schedResetOnFork is SCHED_FLAG_RESET_ON_FORK (sched_attr.sched_flags).
const schedResetOnFork = 0x01

// realtimeThread locks the calling goroutine to its thread for good and
// makes the thread real-time; the error says why it is not (the thread
// stays locked, at its old policy).
func realtimeThread() error {
	runtime.LockOSThread()
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Flags: schedResetOnFork, Priority: readerPriority}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("the ring reader's real-time priority (SCHED_FIFO %d): %w (CAP_SYS_NICE and a real-time budget are needed; without them the reader waits its turn for a CPU and a switch-heavy load can fill its rings)", readerPriority, err)
	}
	return nil
}

// ReaderError tells why the session's reader runs without the real-time
// thread it asked for (nil: it has one, or the session records no
// scheduler or interrupt events).
func (s *Session) ReaderError() error { return s.readerErr }
