package kevents

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// roomSink is a memSink that says how much room it has.
type roomSink struct {
	memSink
	room int64
}

func (m *roomSink) Room(int) int64 { return m.room }

// heldBytes is what the session's rings hold undecoded.
func heldBytes(s *Session) (n int64, chunks int) {
	for _, r := range s.rings {
		r.mu.Lock()
		n += r.held.bytes
		chunks += len(r.held.chunks)
		r.mu.Unlock()
	}
	return n, chunks
}

// ticksOf counts the tprof ticks of thread tid the sink has.
func (m *memSink) ticksOf(tid int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.recs {
		if r.major == trace.MajorTprof && uint32(r.fields[1]) == uint32(tid) {
			n++
		}
	}
	return n
}

// With Hold, the samples wait undecoded in the session until Flush, then
// reach the sink all and in order; with no room in the sink they are
// decoded as read.
func TestHoldUntilAsked(t *testing.T) {
	needRoot(t)
	for _, room := range []int64{1 << 30, 0} {
		sink := &roomSink{room: room}
		s, err := Start(Options{RateHz: 1000, Poll: time.Minute, Hold: true}, sink)
		if err != nil {
			t.Fatal(err)
		}
		if !s.holding.Load() || s.roomer == nil {
			t.Fatalf("room %d: holding %v, roomer %v", room, s.holding.Load(), s.roomer)
		}
		runtime.LockOSThread()
		tid := unix.Gettid()
		spin(200 * time.Millisecond)
		runtime.UnlockOSThread()
		s.holdAll()
		n, chunks := heldBytes(s)
		got := sink.ticksOf(tid)
		if room > 0 && (n == 0 || chunks == 0 || got != 0) {
			t.Fatalf("room %d: %d bytes held in %d chunks, %d ticks of this thread delivered; want them held", room, n, chunks, got)
		}
		if room == 0 && (n != 0 || got == 0) {
			t.Fatalf("no room: %d bytes held, %d ticks of this thread delivered; want them decoded", n, got)
		}
		s.Flush()
		if n, chunks := heldBytes(s); n != 0 || chunks != 0 {
			t.Fatalf("room %d: %d bytes in %d chunks held after Flush", room, n, chunks)
		}
		got = sink.ticksOf(tid)
		if got < 50 {
			t.Fatalf("room %d: %d ticks of this thread after Flush, for 200 ms of its CPU at 1000 Hz", room, got)
		}
		// Unhold: what comes next is decoded as it is read.
		s.Unhold()
		runtime.LockOSThread()
		tid2 := unix.Gettid()
		before := sink.ticksOf(tid2)
		spin(100 * time.Millisecond)
		runtime.UnlockOSThread()
		s.holdAll()
		if n, _ := heldBytes(s); n != 0 || s.holding.Load() {
			t.Fatalf("room %d: %d bytes held after Unhold", room, n)
		}
		if after := sink.ticksOf(tid2); after < before+25 {
			t.Fatalf("room %d: %d ticks of this thread after Unhold and 100 ms more of its CPU, %d before", room, after, before)
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		sink.mu.Lock()
		last := uint64(0)
		for _, r := range sink.recs {
			if r.major == trace.MajorTprof && r.cpu == sink.recs[0].cpu {
				if r.t < last {
					t.Errorf("room %d: CPU %d's ticks out of order: %d after %d", room, r.cpu, r.t, last)
					break
				}
				last = r.t
			}
		}
		sink.mu.Unlock()
		t.Logf("room %d: %d ticks of this thread", room, got)
	}
}

// Without the options Hold needs (a poll; no real-time reader, no DWARF
// unwinding) the session decodes as it reads.
func TestHoldNeedsPoll(t *testing.T) {
	needRoot(t)
	s, err := Start(Options{RateHz: 100, Hold: true}, &roomSink{room: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.holding.Load() {
		t.Fatal("a session without a poll holds its records")
	}
}
