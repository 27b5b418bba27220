package kevents

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// SwitchStack keeps the stack in recs, in order with the records of its
// CPU: fields pid, tid, kernel frames, all frames.
func (m *memSink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated bool) {
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
	wakes, waits, stacks, userStacks := 0, 0, 0, 0
	last := map[int]rec{} // each CPU's record before this one
	for _, r := range sink.recs {
		switch {
		case r.major == trace.MajorDispatch && r.minor == trace.DispatchWakeup:
			if r.fields[1] == uint64(reader) && r.fields[0] == pid && r.fields[4] == uint64(writer) && r.fields[3] == pid {
				wakes++
			}
		case r.major == trace.MajorDispatch && r.minor == trace.DispatchSwitch:
			st := r.fields[4]
			if r.fields[1] == uint64(reader) && st&trace.StateMask != 0 && st&(trace.StateDead|trace.StateZombie) == 0 {
				waits++
			}
		case r.major == trace.MajorUnwind && r.minor == trace.UnwindSwitch:
			d, ok := last[r.cpu]
			if !ok || d.major != trace.MajorDispatch || d.minor != trace.DispatchSwitch || d.fields[1] != r.fields[1] || d.fields[4]&trace.StateMask == 0 {
				t.Fatalf("switch stack of %d on CPU %d not after a DISPATCH switching it out to wait: %+v", r.fields[1], r.cpu, d)
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
		t.Fatalf("reader %d, writer %d: %d wake-ups by the writer, %d switch-outs to wait, %d switch stacks (%d with user frames) for %d reads", reader, writer, wakes, waits, stacks, userStacks, n)
	}
	t.Logf("%d reads: %d wake-ups by the writer, %d switch-outs to wait, %d switch stacks (%d with user frames)", n, wakes, waits, stacks, userStacks)
}
