package kevents

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// SwitchStack keeps the stack in recs, in order with the records of its
// CPU: fields pid, tid, kernel frames, all frames.
func (m *memSink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	m.mu.Lock()
	m.recs = append(m.recs, rec{cpu, trace.MajorUnwind, trace.UnwindSwitch, t, []uint64{uint64(pid), uint64(tid), uint64(kernel), uint64(len(pcs))}, ""})
	m.mu.Unlock()
}

// A thread blocked on a pipe read is woken by the thread that writes:
// WAKEUP names both, and each wait leaves the stack of the reader after
// the DISPATCH that switched it out.
func TestWakeupsAndSwitchStacks(t *testing.T) {
	needRoot(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil { // blocking: the reader's thread sleeps in read
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	sink := &memSink{}
	s, err := Start(Options{Dispatch: true, Wakeup: true, SwitchStacks: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	const n = 5
	readerTid := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		readerTid <- unix.Gettid()
		buf := make([]byte, 1)
		for i := 0; i < n; i++ {
			if _, err := unix.Read(p[0], buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	runtime.LockOSThread()
	writer := unix.Gettid()
	reader := <-readerTid
	for i := 0; i < n; i++ {
		time.Sleep(20 * time.Millisecond) // the reader is blocked again by now, or the byte waits for it
		if _, err := unix.Write(p[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.UnlockOSThread()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	pid := uint64(os.Getpid())
	wakes, byWriter, waits, stacks, userStacks := 0, 0, 0, 0, 0
	last := map[int]rec{} // each CPU's record before this one
	for _, r := range sink.recs {
		switch {
		case r.major == trace.MajorDispatch && r.minor == trace.DispatchWakeup:
			// The waker is the thread running when the kernel makes
			// the reader runnable: the writer, or, when the kernel
			// queued the wake-up to the reader's CPU (idle, or the
			// reader still switching out there), whatever runs there
			// when the interrupt runs the queue.
			if r.fields[1] == uint64(reader) && r.fields[0] == pid {
				wakes++
				if r.fields[4] == uint64(writer) && r.fields[3] == pid {
					byWriter++
				}
			}
		case r.major == trace.MajorDispatch && r.minor == trace.DispatchSwitch:
			st := r.fields[4]
			if r.fields[1] == uint64(reader) && st&trace.StateMask != 0 && st&(trace.StateDead|trace.StateZombie) == 0 {
				waits++
			}
		case r.major == trace.MajorUnwind && r.minor == trace.UnwindSwitch:
			d, ok := last[r.cpu]
			if !ok || d.major != trace.MajorDispatch || d.minor != trace.DispatchSwitch || d.fields[1] != r.fields[1] || d.fields[4]&trace.StateMask == 0 || d.t != r.t {
				t.Fatalf("switch stack of %d on CPU %d at %d not after a DISPATCH switching it out to wait at that time: %+v", r.fields[1], r.cpu, r.t, d)
			}
			if r.fields[1] == uint64(reader) {
				if r.fields[2] == 0 {
					t.Fatalf("the reader's switch stack has no kernel frames: %v", r.fields)
				}
				stacks++
				if r.fields[3] > r.fields[2] {
					userStacks++
				}
			}
		}
		last[r.cpu] = r
	}
	// Some reads may find their byte already written (a busy machine
	// delays the reader): then neither a wait nor a wake-up. A wake-up
	// may also come before the reader is off the CPU (no switch then).
	if wakes < 1 || waits < 1 || stacks != waits || userStacks != stacks {
		t.Fatalf("reader %d, writer %d: %d wake-ups (%d by the writer), %d switch-outs to wait, %d switch stacks (%d with user frames) for %d reads", reader, writer, wakes, byWriter, waits, stacks, userStacks, n)
	}
	t.Logf("%d reads: %d wake-ups (%d by the writer), %d switch-outs to wait, %d switch stacks (%d with user frames)", n, wakes, byWriter, waits, stacks, userStacks)
}

// perf's switch-in records: one that sched_switch did not report becomes
// a DISPATCH (from the idle task with the idle task's state, from a
// thread with StateUnknown); one it reported and a switch-out record do
// not.
func TestSwitchInNotReported(t *testing.T) {
	sink := &memSink{}
	s := &Session{sink: sink}
	r := &ring{cpu: 1, lastNext: -1}
	// next_prev_pid, next_prev_tid, then the trailer: pid, tid, time
	body := func(prevPid, prevTid, pid, tid uint32, tm uint64) []byte {
		b := make([]byte, 8+idTrailer)
		le := binary.LittleEndian
		le.PutUint32(b, prevPid)
		le.PutUint32(b[4:], prevTid)
		le.PutUint32(b[8:], pid)
		le.PutUint32(b[12:], tid)
		le.PutUint64(b[16:], tm)
		return b
	}
	in := func(prevTid, tid uint32, tm uint64) {
		prevPid := uint32(0)
		if prevTid != 0 {
			prevPid = 70
		}
		s.record(r, unix.PERF_RECORD_SWITCH_CPU_WIDE, 0, body(prevPid, prevTid, 50, tid, tm))
	}
	in(0, 51, 100)  // not reported by sched_switch: written
	in(0, 51, 101)  // already known to be on this CPU: not again
	r.lastNext = 52 // sched_switch reported the switch to 52
	in(0, 52, 200)  // not twice
	r.lastNext = 53 // sched_switch reported the switch from 77 to 53
	in(77, 53, 300) // not twice
	in(77, 54, 400) // a switch from a thread that sched_switch did not report: written, prev's state unknown
	in(77, 54, 401) // not again
	r.lastNext = 56
	in(56, noTid, 450) // a thread perf could not name: not written
	s.record(r, unix.PERF_RECORD_SWITCH_CPU_WIDE, unix.PERF_RECORD_MISC_SWITCH_OUT, body(0, 0, 50, 55, 500))
	var got []rec
	for _, x := range sink.recs {
		if x.major == trace.MajorDispatch && x.minor == trace.DispatchSwitch {
			got = append(got, x)
		}
	}
	want := []rec{
		{1, trace.MajorDispatch, trace.DispatchSwitch, 100, []uint64{0, 0, 50, 51, 0}, ""},
		{1, trace.MajorDispatch, trace.DispatchSwitch, 400, []uint64{70, 77, 50, 54, trace.StateUnknown}, ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DISPATCH records %+v, want %+v", got, want)
	}
}

// Without stacks the sched_switch event leaves out the switch-outs in S
// and R: perf's switch-out record of one the tracepoint did not report
// becomes its DISPATCH (state S, or R where the record says the thread
// was still runnable; the idle task's state 0); one the
// tracepoint reported (next to it, before it) is not written twice, nor is
// the switch-in that follows, nor a switch of a thread perf cannot name.
func TestSwitchOutOfASleep(t *testing.T) {
	sink := &memSink{}
	const idSwitch = 7
	s := &Session{sink: sink, sleepsOut: true, kinds: map[uint64]int{idSwitch: kindSwitch},
		tp: tpFields{prevPid: 0, prevState: 8, prevStateSize: 8, nextPid: 16}}
	for tid := uint32(10); tid < 22; tid++ {
		s.tgid.Store(tid, uint32(1000))
	}
	r := &ring{cpu: 1, lastNext: -1}
	le := binary.LittleEndian
	// the tracepoint's sample: id, time, raw (size, prev_pid, prev_state, next_pid)
	tp := func(prev uint32, state uint64, next uint32, tm uint64) {
		b := le.AppendUint64(nil, idSwitch)
		b = le.AppendUint64(b, tm)
		b = le.AppendUint32(b, 24)
		b = le.AppendUint32(b, prev)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, state)
		b = le.AppendUint32(b, next)
		b = append(b, 0, 0, 0, 0)
		s.record(r, unix.PERF_RECORD_SAMPLE, 0, b)
	}
	// perf's switch records: next_prev_pid/tid, then pid, tid, time of
	// the thread the record is written in
	sw := func(misc uint16, otherPid, other, pid, tid uint32, tm uint64) {
		b := le.AppendUint32(nil, otherPid)
		b = le.AppendUint32(b, other)
		b = le.AppendUint32(b, pid)
		b = le.AppendUint32(b, tid)
		b = le.AppendUint64(b, tm)
		s.record(r, unix.PERF_RECORD_SWITCH_CPU_WIDE, misc, b)
	}
	out := func(tid, next uint32, tm uint64, misc uint16) {
		pid, npid := uint32(1000), uint32(1000)
		if tid == 0 || tid == noTid {
			pid = tid
		}
		if next == 0 || next == noTid {
			npid = next
		}
		sw(unix.PERF_RECORD_MISC_SWITCH_OUT|misc, npid, next, pid, tid, tm)
		sw(0, pid, tid, npid, next, tm+1) // its switch-in
	}
	const sleeping, blocked, preempted = 1, 2, 0x100
	const runnable = unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
	tp(10, preempted, 11, 100) // reported by the tracepoint: once
	out(10, 11, 101, runnable)
	out(11, 12, 200, 0) // a sleep: from its switch-out record
	tp(12, blocked, 13, 300)
	out(12, 13, 301, 0)
	out(13, 0, 400, 0)         // to the idle task
	out(0, 14, 500, runnable)  // from it (the idle task's state is 0)
	out(14, 15, 600, runnable) // still runnable, not preempted: R
	tp(15, sleeping, 16, 700)  // a kernel that did not take the filter
	out(15, 16, 701, 0)
	out(16, noTid, 800, 0) // to a thread perf cannot name (exiting),
	tp(17, 0x10, 18, 805)  // named by its last switch-out
	tp(18, 0x80, 20, 810)  // reported by the tracepoint:
	out(18, noTid, 811, 0) // not twice
	tp(20, 0x10, 21, 815)
	out(noTid, 19, 900, 0)  // from one: its switch-in record writes it
	out(19, noTid, 1000, 0) // named by no report near enough: dropped
	tp(11, sleeping, 12, 1000+2e6)
	var got []string
	for _, x := range sink.recs {
		if x.major == trace.MajorDispatch && x.minor == trace.DispatchSwitch {
			got = append(got, fmt.Sprintf("%d/%d>%d/%d:%#x@%d", x.fields[0], x.fields[1], x.fields[2], x.fields[3], x.fields[4], x.t))
		}
	}
	want := "1000/10>1000/11:0x100@100 1000/11>1000/12:0x1@200 1000/12>1000/13:0x2@300 1000/13>0/0:0x1@400 0/0>1000/14:0x0@500 " +
		"1000/14>1000/15:0x0@600 1000/15>1000/16:0x1@700 1000/16>1000/17:0x1@800 1000/17>1000/18:0x10@805 " +
		"1000/18>1000/20:0x80@810 1000/20>1000/21:0x10@815 " +
		"4294967295/4294967295>1000/19:0x80000000@901 1000/11>1000/12:0x1@2001000"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("DISPATCH records\n%s\nwant\n%s", g, want)
	}
}

// Without stacks a sleep's DISPATCH comes from perf's switch-out record,
// and the other states still from the tracepoint: a thread in nanosleep
// switches out in S, a stopped process in T, each with its own state.
func TestSwitchStatesWithoutStacks(t *testing.T) {
	needRoot(t)
	sink := &memSink{}
	s, err := Start(Options{Dispatch: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if !s.sleepsOut {
		t.Fatal("a session with dispatch and no stacks does not take sleeps from switch-out records")
	}
	sleeper := sleepOnThread(5, 5*time.Millisecond)
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if err := child.Process.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped once its state in /proc says so (it switched out in T).
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child.Process.Pid))
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	sleeps, stops := 0, 0
	for _, r := range sink.recs {
		if r.major != trace.MajorDispatch || r.minor != trace.DispatchSwitch {
			continue
		}
		switch {
		case r.fields[1] == sleeper && r.fields[4] == trace.StateSleeping:
			sleeps++
		case r.fields[1] == uint64(child.Process.Pid) && r.fields[4] == trace.StateStopped:
			stops++
		}
	}
	if sleeps < 5 || stops != 1 {
		t.Fatalf("%d switch-outs of the sleeper in S (5 sleeps), %d of the stopped child in T (want 1)", sleeps, stops)
	}
}

// Every wait of a sleeping thread ends with a switch-in in the trace,
// also where its CPU idles while it sleeps (where some kernels report no
// sched_switch from the idle task).
func TestEveryWaitEndsWithASwitchIn(t *testing.T) {
	needRoot(t)
	sink := &memSink{}
	s, err := Start(Options{Dispatch: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	tid := sleepOnThread(10, 20*time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	// in time order across CPUs
	recs := append([]rec(nil), sink.recs...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].t < recs[j].t })
	waiting, waits, ends := false, 0, 0
	for _, r := range recs {
		if r.major != trace.MajorDispatch || r.minor != trace.DispatchSwitch {
			continue
		}
		if r.fields[3] == tid && waiting {
			waiting = false
			ends++
		}
		if r.fields[1] == tid {
			if waiting {
				var lost uint64
				for _, c := range s.Stats() {
					lost += c.Lost
				}
				t.Fatalf("thread %d switched out at %d while waiting: the switch-in ending its wait is not in the trace (%d records lost by the kernel)", tid, r.t, lost)
			}
			if r.fields[4]&trace.StateMask != 0 {
				waiting = true
				waits++
			}
		}
	}
	if waits < 10 || ends < waits-1 {
		t.Fatalf("thread %d: %d waits, %d ended by a switch-in (10 sleeps)", tid, waits, ends)
	}
	t.Logf("%d waits, %d ended by a switch-in", waits, ends)
}

// The two sched_switch samples of a switch (DISPATCH's and, for a wait,
// the stack's) come next to each other in the CPU's ring in either order:
// the stack is written after its DISPATCH, with its time, and a stack
// whose DISPATCH is not next to it (lost, or another thread's switch) is
// dropped. A switch that is no wait gets no stack even where the kernel
// did not filter its sample out. Where the wait's sample comes first, its
// time (read before its stack was taken) is the DISPATCH's.
func TestWaitStackAfterItsDispatch(t *testing.T) {
	sink := &memSink{}
	const idSwitch, idWait = 7, 8
	s := &Session{sink: sink, switchStacks: true, maxStack: 127, kinds: map[uint64]int{idSwitch: kindSwitch, idWait: kindSwitchWait},
		tp: tpFields{prevPid: 0, prevState: 8, prevStateSize: 8, nextPid: 16}}
	for tid := uint32(10); tid < 20; tid++ {
		s.tgid.Store(tid, uint32(1000))
	}
	r := &ring{cpu: 1, lastNext: -1}
	le := binary.LittleEndian
	// a sample: DISPATCH's: id, time, raw (size, prev_pid, prev_state,
	// next_pid); the wait's: id, pid/tid (the thread switched out), time,
	// callchain (the kernel marker and one pc, then the user marker and
	// one)
	sample := func(id uint64, prev uint32, state, tm uint64) []byte {
		b := le.AppendUint64(nil, id)
		if id == idWait {
			b = le.AppendUint32(b, 1000)
			b = le.AppendUint32(b, prev)
			b = le.AppendUint64(b, tm)
			b = le.AppendUint64(b, 4)
			for _, v := range []uint64{^uint64(127), 0xffffffff81000000 + uint64(prev), ^uint64(511), 0x401000 + uint64(prev)} {
				b = le.AppendUint64(b, v)
			}
			return b
		}
		b = le.AppendUint64(b, tm)
		b = le.AppendUint32(b, 24)
		b = le.AppendUint32(b, prev)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, state)
		b = le.AppendUint32(b, 99)
		return append(b, 0, 0, 0, 0)
	}
	d := func(prev uint32, state, tm uint64) {
		s.record(r, unix.PERF_RECORD_SAMPLE, 0, sample(idSwitch, prev, state, tm))
	}
	w := func(prev uint32, state, tm uint64) {
		s.record(r, unix.PERF_RECORD_SAMPLE, 0, sample(idWait, prev, state, tm))
	}
	const sleeping, preempted = 1, 0x100
	d(10, sleeping, 100) // DISPATCH first
	w(10, sleeping, 101)
	w(11, sleeping, 201) // the stack first
	d(11, sleeping, 200)
	d(12, preempted, 300) // no wait: unfiltered, its sample is dropped
	w(12, preempted, 301)
	d(13, sleeping, 400)
	w(13, sleeping, 401)
	w(14, sleeping, 501) // its DISPATCH lost
	d(15, sleeping, 500)
	w(15, sleeping, 502)
	d(16, sleeping, 600) // its stack lost: the next thread's is not its
	w(17, sleeping, 601)
	d(17, sleeping, 602) // the wait event ran first: the clock it read is the switch's
	w(18, sleeping, 700) // its DISPATCH lost, and a later one of the same thread's
	d(18, sleeping, 700+2e6)
	d(19, sleeping, 800e6) // the same thread, long after: no pair
	w(19, sleeping, 802e6)
	var got []string
	for _, x := range sink.recs {
		switch {
		case x.major == trace.MajorDispatch:
			got = append(got, fmt.Sprintf("D%d@%d", x.fields[1], x.t))
		case x.major == trace.MajorUnwind:
			got = append(got, fmt.Sprintf("U%d@%d/%d/%d", x.fields[1], x.t, x.fields[2], x.fields[3]))
		}
	}
	want := "D10@100 U10@100/1/2 D11@200 U11@200/1/2 D12@300 D13@400 U13@400/1/2 D15@500 U15@500/1/2 D16@600 D17@601 U17@601/1/2 D18@2000700 D19@800000000"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("records\n%s\nwant\n%s", g, want)
	}
}

// A ring's cache of thread → process follows the fork records: a thread id
// used again by another process is named by its new process from the fork
// on, on every ring.
func TestTgidCacheFollowsForks(t *testing.T) {
	s := &Session{sink: &memSink{}}
	r0, r1 := &ring{cpu: 0, lastNext: -1}, &ring{cpu: 1, lastNext: -1}
	le := binary.LittleEndian
	fork := func(r *ring, pid, tid uint32) {
		b := le.AppendUint32(nil, pid)
		b = le.AppendUint32(b, 1) // ppid
		b = le.AppendUint32(b, tid)
		b = le.AppendUint32(b, 1) // ptid
		b = le.AppendUint64(b, 100)
		b = append(b, make([]byte, idTrailer)...)
		s.record(r, unix.PERF_RECORD_FORK, 0, b)
	}
	fork(r0, 500, 501)
	if got := s.tgidIn(r1, 501); got != 500 {
		t.Fatalf("thread 501: process %d, want 500", got)
	}
	if got := s.tgidIn(r0, 501); got != 500 {
		t.Fatalf("thread 501 on CPU 0: process %d, want 500", got)
	}
	fork(r0, 700, 501) // the id used again, the fork read on the other ring
	for _, r := range []*ring{r0, r1} {
		if got := s.tgidIn(r, 501); got != 700 {
			t.Fatalf("thread 501 on CPU %d after its id was used again: process %d, want 700", r.cpu, got)
		}
	}
}

// A long-lived session forgets exited threads: after 10,000 threads came
// and went, the thread → process table holds those that exited within
// the last exitKept, not all of them; a thread id used again since keeps
// its new process.
func TestExitedThreadsForgotten(t *testing.T) {
	s := &Session{sink: &memSink{}}
	r := &ring{cpu: 0, lastNext: -1}
	le := binary.LittleEndian
	rec := func(typ uint32, pid, tid uint32, tm uint64) {
		b := le.AppendUint32(nil, pid)
		b = le.AppendUint32(b, 1) // ppid
		b = le.AppendUint32(b, tid)
		b = le.AppendUint32(b, 1) // ptid
		b = le.AppendUint64(b, tm)
		b = append(b, make([]byte, idTrailer)...)
		s.record(r, typ, 0, b)
	}
	const n = 10000
	tm := uint64(1e9)
	for i := uint32(0); i < n; i++ {
		tid := 100000 + i
		rec(unix.PERF_RECORD_FORK, 500, tid, tm)
		if i == 0 {
			rec(unix.PERF_RECORD_EXIT, 500, tid, tm+1)
			rec(unix.PERF_RECORD_FORK, 600, tid, tm+2) // its id used again
			continue
		}
		rec(unix.PERF_RECORD_EXIT, 500, tid, tm+1)
		tm += 1e6 // a thread a millisecond: 10 s in all
	}
	left := 0
	s.tgid.Range(func(any, any) bool { left++; return true })
	if max := int(exitKept/1e6) + 2; left > max {
		t.Fatalf("%d threads known after %d came and went, want at most the %d of the last %v", left, n, max, time.Duration(exitKept))
	}
	if got := s.tgidIn(r, 100000); got != 600 {
		t.Fatalf("the thread id used again: process %d, want 600", got)
	}
}

// sleepOnThread sleeps n times for d (nanosleep) on a thread of its own
// and returns that thread's id once it is done.
func sleepOnThread(n int, d time.Duration) uint64 {
	tidc := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		tidc <- unix.Gettid()
		ts := unix.NsecToTimespec(int64(d))
		for i := 0; i < n; i++ {
			_ = unix.Nanosleep(&ts, nil)
		}
		tidc <- 0
	}()
	tid := uint64(<-tidc)
	<-tidc
	return tid
}

// nullSink takes records and keeps nothing.
type nullSink struct{}

func (nullSink) Trace(int, uint16, uint32, uint64, []uint64)                  {}
func (nullSink) MTE(int, uint32, uint64, []uint64, string)                    {}
func (nullSink) Lost(int, bool, uint64)                                       {}
func (nullSink) Stack(int, uint64, uint32, uint32, []uint64, int, bool, bool) {}
func (nullSink) SwitchStack(int, uint64, uint32, uint32, []uint64, int, bool, bool) {
}

// A tick sample costs the reader no allocation (its thread's process noted
// through the ring's cache, not boxed into the table at every sample), and
// the table still names the thread's process.
func TestTickSampleWithoutAllocation(t *testing.T) {
	const idTick = 7
	s := &Session{sink: nullSink{}, kinds: map[uint64]int{idTick: kindTick}}
	r := &ring{cpu: 0, lastNext: -1}
	le := binary.LittleEndian
	sample := func(pid, tid uint32) []byte {
		b := le.AppendUint64(nil, idTick)
		b = le.AppendUint64(b, 0x401000) // ip
		b = le.AppendUint32(b, pid)
		b = le.AppendUint32(b, tid)
		return le.AppendUint64(b, 1000) // time
	}
	a, b := sample(70000, 70001), sample(80000, 80000)
	n := testing.AllocsPerRun(1000, func() {
		s.record(r, unix.PERF_RECORD_SAMPLE, 0, a)
		s.record(r, unix.PERF_RECORD_SAMPLE, 0, b)
	})
	if n != 0 {
		t.Errorf("%.1f allocations per two samples, want 0", n)
	}
	for tid, want := range map[uint32]uint32{70001: 70000, 80000: 80000} {
		if v, ok := s.tgid.Load(tid); !ok || v.(uint32) != want {
			t.Errorf("thread %d: table says %v, want %d", tid, v, want)
		}
	}
}
