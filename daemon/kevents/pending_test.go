package kevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"perfinsp/analysis/unwind"
)

// seqSink records what reaches the facility, in order.
type seqSink struct {
	mu  sync.Mutex
	seq []string
}

func (s *seqSink) Trace(cpu int, major uint16, minor uint32, t uint64, f []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, fmt.Sprintf("%d:T%d", cpu, t))
}
func (s *seqSink) MTE(cpu int, minor uint32, t uint64, f []uint64, str string) {}
func (s *seqSink) Lost(cpu int, mte bool, n uint64)                            {}
func (s *seqSink) Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, fmt.Sprintf("%d:S%d%x/%v", cpu, t, pcs, truncated))
}
func (s *seqSink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, fmt.Sprintf("%d:W%d%x/%v", cpu, t, pcs, cfi))
}
func (s *seqSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.seq, " ")
}

// rawSample is a sample's user registers (pc at ip) and an empty stack copy.
func rawSample(ip uint64) []byte {
	b := make([]byte, 8+8*17+8)
	binary.LittleEndian.PutUint64(b, perfRegsABI64)
	binary.LittleEndian.PutUint64(b[8+8*8:], ip)     // RIP, the 9th register in mask order
	binary.LittleEndian.PutUint64(b[8+7*8:], 0x7000) // RSP
	return b
}

// A sample whose pc is in a file whose table is loading waits for it, and
// the records of its CPU that follow wait behind it (another CPU's do not);
// once the table is there they are written in order, the stack unwound
// in full and not marked cut. A wait's stack unwound from its registers
// (a switch sample's) waits the same way, and is written as one (after its
// DISPATCH, marked unwound by call-frame information).
func TestSampleWaitsForItsTable(t *testing.T) {
	u := newUserUnwinder()
	defer u.close()
	release := make(chan struct{})
	u.load = func(uint32, *userMap) (*unwind.Table, error) {
		<-release
		return nil, errors.New("no call-frame information")
	}
	u.procs[5] = &procMaps{maps: []userMap{{start: 0x1000, end: 0x2000, id: fileID{8, 1, 77}, path: "/lib/late.so"}}, read: time.Now()}
	sink := &seqSink{}
	p := newPendingSink(sink, u)
	p.Trace(0, 0x10, 1, 1, nil)
	p.userStack(0, 1, 5, 5, []uint64{0xffffffff81000000}, []uint64{0x1800}, rawSample(0x1800), 127, false, false)
	p.Trace(0, 0x10, 1, 2, nil)
	p.SwitchStack(0, 2, 5, 5, []uint64{0xffffffff81000100}, 1, false, false) // after its DISPATCH (T2)
	p.Stack(0, 2, 5, 5, []uint64{0x1900}, 0, false, false)
	p.Trace(0, 0x10, 1, 4, nil)
	p.userStack(0, 4, 5, 5, []uint64{0xffffffff81000200}, []uint64{0x1820}, rawSample(0x1820), 126, false, true)
	p.Trace(1, 0x10, 1, 3, nil)
	p.retry(false)
	if got, want := sink.String(), "0:T1 1:T3"; got != want {
		t.Fatalf("while the table loads: %q reached the facility, want %q", got, want)
	}
	if st := u.Stats(); st.Early != 0 || st.Waiting != 2 {
		t.Fatalf("stats while waiting (Early counts the stacks written): %+v", st)
	}
	// What a consumer ordering records across CPUs must wait for: CPU 0's
	// records from its first waiting sample on.
	if h, ok := p.heldSince(); !ok || h != 1 {
		t.Fatalf("held since %d (%v), want 1: CPU 0's first sample waits", h, ok)
	}
	// an exec while the sample waits: it keeps the mappings of its time
	old := u.procs[5]
	u.exec(5)
	if it := p.cpus[0].items[0]; it.maps != old {
		t.Fatalf("the waiting sample's mappings are %p, want those of its time %p", it.maps, old)
	}
	close(release)
	waitTable(u, fileID{8, 1, 77})
	p.retry(false)
	if got, want := sink.String(), "0:T1 1:T3 0:S1[ffffffff81000000 1800]/false 0:T2 0:W2[ffffffff81000100]/false 0:S2[1900]/false 0:T4 0:W4[ffffffff81000200 1820]/true"; got != want {
		t.Fatalf("after the load: %q, want %q", got, want)
	}
	if st := u.Stats(); st.Early != 2 || st.Waiting != 0 || st.Cut != 0 || p.bytes != 0 {
		t.Fatalf("stats after: %+v, %d bytes queued", st, p.bytes)
	}
	if h, ok := p.heldSince(); ok {
		t.Fatalf("held since %d after every record was written", h)
	}
}

// waitTable waits (up to 10 s) until u has loaded the table of id, or
// failed to.
func waitTable(u *userUnwinder, id fileID) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		u.mu.Lock()
		_, done := u.tables[id]
		u.mu.Unlock()
		if done {
			return
		}
	}
}

// A kernel thread's sample (no user registers) queued behind a user stack
// that waits for its table is written with it but is no user stack: the
// stacks that waited stay a share of the user stacks (a short run's
// summary said 152.8 % waited).
func TestKernelSampleBehindAWaitIsNotAUserStack(t *testing.T) {
	u := newUserUnwinder()
	defer u.close()
	release := make(chan struct{})
	u.load = func(uint32, *userMap) (*unwind.Table, error) {
		<-release
		return nil, errors.New("no call-frame information")
	}
	u.procs[5] = &procMaps{maps: []userMap{{start: 0x1000, end: 0x2000, id: fileID{8, 1, 79}, path: "/lib/late.so"}}, read: time.Now()}
	sink := &seqSink{}
	p := newPendingSink(sink, u)
	p.userStack(0, 1, 5, 5, nil, []uint64{0x1800}, rawSample(0x1800), 127, false, false)
	for i := uint64(2); i < 6; i++ { // a kernel thread's: no user registers
		p.userStack(0, i, 9, 9, []uint64{0xffffffff81000000}, nil, make([]byte, 8), 127, false, false)
	}
	close(release)
	waitTable(u, fileID{8, 1, 79})
	p.retry(false)
	st := u.Stats()
	if st.Waiting != 0 || st.Samples != 1 || st.Early != 1 {
		t.Fatalf("stats: %+v; want the one user stack, which waited, and the kernel samples written", st)
	}
	if s := st.String(); !strings.Contains(s, "100.0 % waited") {
		t.Errorf("summary: %s", s)
	}
}

// The wait is bounded: forced (tracing off after the wait's bound), a
// sample whose table is still loading is written as far as it unwinds,
// marked truncated, and counted; the queue's size bound does the same at
// once, behind what waits.
func TestSampleWaitIsBounded(t *testing.T) {
	u := newUserUnwinder()
	release := make(chan struct{})
	defer func() { close(release); u.close() }()
	u.load = func(uint32, *userMap) (*unwind.Table, error) {
		<-release
		return nil, errors.New("no call-frame information")
	}
	u.procs[5] = &procMaps{maps: []userMap{{start: 0x1000, end: 0x2000, id: fileID{8, 1, 78}, path: "/lib/slow.so"}}, read: time.Now()}
	sink := &seqSink{}
	p := newPendingSink(sink, u)
	p.userStack(0, 1, 5, 5, nil, []uint64{0x1800}, rawSample(0x1800), 127, false, false)
	p.bytes = maxPendingBytes // as if the queue were full
	p.userStack(0, 2, 5, 5, nil, []uint64{0x1810}, rawSample(0x1810), 127, false, false)
	if got := sink.String(); got != "" {
		t.Fatalf("written ahead of the waiting sample: %q", got)
	}
	p.bytes = len(rawSample(0)) // the first sample's copy, still queued
	p.retry(true)
	if got, want := sink.String(), "0:S1[1800]/true 0:S2[1810]/true"; got != want {
		t.Fatalf("forced: %q, want %q", got, want)
	}
	if st := u.Stats(); st.Cut != 2 || st.Waiting != 0 || st.Early != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
