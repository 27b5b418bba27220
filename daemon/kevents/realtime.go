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
// A goroutine locked to a real-time thread still stalls when the runtime
// preempts it (it waits for an ordinary thread of the runtime to hand it
// a P): the copier (copier_cgo.go) keeps the kernel's rings drained
// through those stalls.
//
// The goroutine keeps its thread to the end: a goroutine that exits
// locked to its thread ends the thread, so the policy never reaches
// another goroutine. SCHED_RESET_ON_FORK keeps it from any thread the
// runtime would start from this one.

import (
	"fmt"
	"runtime"
	"time"

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
	if err := setRealtime(true); err != nil {
		return fmt.Errorf("the ring reader's real-time priority (SCHED_FIFO %d): %w (CAP_SYS_NICE and a real-time budget are needed; without them the reader waits its turn for a CPU and a switch-heavy load can fill its rings)", readerPriority, err)
	}
	return nil
}

// ReaderDemoted is the number of windows (rtWindow) the reader has read at
// the ordinary policy because it ran past maxRTShare of the one before.
func (s *Session) ReaderDemoted() int64 { return s.demoted.Load() }

// ReaderError tells why the session's reader runs without the real-time
// thread it asked for (nil: it has one, or the session records no
// scheduler or interrupt events).
func (s *Session) ReaderError() error { return s.readerErr }

// rtWindow and maxRTShare bound the real-time reader: over a window in
// which it ran more than maxRTShare of the time (the records of a
// switch storm that some client's program makes keep it busy), it reads
// at the ordinary policy for the next window, then asks for real time
// again. A client can so not make the root agent hold a CPU away from
// ordinary programs for long; the reader still drains the rings, at
// ordinary priority, while it is down.
const rtWindow = time.Second

var maxRTShare = 0.5 // a variable for the tests of the drain alone

// rtGuard is the reader thread's policy and its last window.
type rtGuard struct {
	rt              bool  // SCHED_FIFO now
	start, cpuStart int64 // the window's start: monotonic and thread CPU ns
	demoted         int   // windows read at the ordinary policy
	// (for tests: the clocks and the policy switch)
	now, cpu func() int64
	set      func(rt bool) error
}

func newRTGuard() *rtGuard {
	g := &rtGuard{rt: true, now: func() int64 { return int64(monoNow()) }, cpu: threadCPU, set: setRealtime}
	g.start, g.cpuStart = g.now(), g.cpu()
	return g
}

// check ends the window when it is over: down to the ordinary policy
// after a window with more than maxRTShare of it running, back up after
// a window down.
func (g *rtGuard) check() {
	now := g.now()
	if now-g.start < int64(rtWindow) {
		return
	}
	cpu := g.cpu()
	share := float64(cpu-g.cpuStart) / float64(now-g.start)
	switch {
	case g.rt && share > maxRTShare:
		if g.set(false) == nil {
			g.rt = false
			g.demoted++
		}
	case !g.rt:
		if g.set(true) == nil {
			g.rt = true
		}
	}
	g.start, g.cpuStart = now, cpu
}

func threadCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// setRealtime switches the calling (locked) thread between SCHED_FIFO at
// readerPriority and the ordinary policy.
func setRealtime(rt bool) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Flags: schedResetOnFork}
	if rt {
		attr.Policy, attr.Priority = unix.SCHED_FIFO, readerPriority
	}
	return unix.SchedSetAttr(0, &attr, 0)
}
