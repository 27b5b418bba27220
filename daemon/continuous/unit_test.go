package continuous

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"perfinsp/format/trace"
)

// sunk is an event taken from the sink with its stack.
type sunk struct {
	event
	pcs []uint64
}

func drainSink(s *sink) []sunk {
	var b batch
	s.take(&b)
	var out []sunk
	for i := range b.evs {
		out = append(out, sunk{b.evs[i], b.stack(&b.evs[i])})
	}
	return out
}

// TestSinkPairsTicksWithStacks: a tick and the stack that follows it on
// its CPU make one sample; a tick without a stack (another record of the
// CPU comes first, or the session ends) is a sample of its ip alone; a
// full queue drops and counts, never blocks.
func TestSinkPairsTicksWithStacks(t *testing.T) {
	s := newSink(8)
	s.Trace(0, trace.MajorTprof, trace.TprofTick, 100, []uint64{7, 8, 0x1000, 0})
	s.Trace(1, trace.MajorTprof, trace.TprofTick, 101, []uint64{9, 9, 0xffff800000001000, trace.TprofKernel})
	s.Stack(0, 100, 7, 8, []uint64{0x1000, 0x2000}, 0, false, false)
	s.MTE(1, trace.MTEExit, 102, []uint64{9, 9}, "")
	s.Trace(0, trace.MajorTprof, trace.TprofTick, 103, []uint64{7, 8, 0x3000, 0})
	s.flushAll()
	got := drainSink(s)
	if len(got) != 4 {
		t.Fatalf("%d events, want 4: %+v", len(got), got)
	}
	if e := got[0]; e.kind != evSample || e.t != 100 || len(e.pcs) != 2 || e.pcs[1] != 0x2000 {
		t.Errorf("first event %+v: want the tick of t=100 with its two-frame stack", e)
	}
	if e := got[1]; e.kind != evSample || e.t != 101 || len(e.pcs) != 1 || e.kernel != 1 {
		t.Errorf("second event %+v: want CPU 1's kernel tick alone, flushed by its next record", e)
	}
	if e := got[2]; e.kind != evMTE || e.minor != trace.MTEExit || e.nf != 2 {
		t.Errorf("third event %+v: want the exit record", e)
	}
	if e := got[3]; e.kind != evSample || e.t != 103 || e.pcs[0] != 0x3000 {
		t.Errorf("fourth event %+v: want the last tick, flushed at the end", e)
	}
	if s.samples.Load() != 3 {
		t.Errorf("%d samples counted, want 3", s.samples.Load())
	}
	for i := 0; i < 20; i++ {
		s.MTE(0, trace.MTEThreadName, uint64(200+i), []uint64{1, 1}, "x")
	}
	if d := s.dropped.Load(); d != 12 {
		t.Errorf("%d events dropped by a queue of 8 offered 20, want 12", d)
	}
}

// TestReorder: events are applied in time order once older than the
// cutoff; past the bound the oldest go at once.
func TestReorder(t *testing.T) {
	r := reorder{max: 4}
	// Each event's stack is its time stamp and the time plus one.
	add := func(ts ...uint64) {
		var b batch
		for _, t := range ts {
			e := event{t: t, kind: evSample, pcOff: uint32(len(b.pcs)), pcN: 2}
			b.pcs = append(b.pcs, t, t+1)
			b.evs = append(b.evs, e)
		}
		r.add(&b)
		b.reset()
	}
	add(30, 10, 20, 50, 40)
	var got []uint64
	apply := func(e *event, pcs []uint64) {
		got = append(got, e.t)
		if len(pcs) != 2 || pcs[0] != e.t || pcs[1] != e.t+1 {
			t.Errorf("event %d applied with the stack %v, want [%d %d]", e.t, pcs, e.t, e.t+1)
		}
	}
	r.release(25, apply)
	if len(got) != 2 || got[0] != 10 || got[1] != 20 || len(r.buf) != 3 {
		t.Fatalf("released %v, kept %d: want 10 20, three kept", got, len(r.buf))
	}
	add(60, 70, 80)
	got = nil
	r.release(0, apply) // nothing old enough, but 6 > 4: the two oldest go
	if len(got) != 2 || got[0] != 30 || got[1] != 40 {
		t.Errorf("past the bound released %v, want 30 40", got)
	}
	got = nil
	r.release(^uint64(0), apply)
	if len(got) != 4 || got[0] != 50 || got[3] != 80 || len(r.buf) != 0 {
		t.Errorf("at the end released %v, kept %d: want 50 60 70 80, none kept", got, len(r.buf))
	}
}

func TestReadConfigFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.conf")
	write := func(text string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("# comment\n\nendpoint = http://c:4318\n  rate=19 \nheader = A=b=c\n", 0o600)
	got, err := ReadConfigFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Setting{{"endpoint", "http://c:4318", 3}, {"rate", "19", 4}, {"header", "A=b=c", 5}}
	if len(got) != len(want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("setting %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	write("endpoint\n", 0o600)
	if _, err := ReadConfigFile(p); err == nil || !strings.Contains(err.Error(), ":1: want name = value") {
		t.Errorf("a line without = : %v", err)
	}
	write("endpoint = x\n", 0o620)
	if _, err := ReadConfigFile(p); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("a group-writable file: %v", err)
	}
	link := filepath.Join(dir, "link")
	write("endpoint = x\n", 0o600)
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfigFile(link); err == nil {
		t.Error("a symbolic link was followed")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		if _, err := ReadConfigFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a FIFO: %v", err)
		}
	}
}

func TestStartTime(t *testing.T) {
	// A comm with spaces and parentheses: field 22 counts from the last ')'.
	stat := []byte("123 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21")
	if got := startTime(stat); got != "424242" {
		t.Errorf("start time %q, want 424242", got)
	}
	if got := startTime([]byte("garbage")); got != "" {
		t.Errorf("start time of garbage %q", got)
	}
}

// TestSinkNotifiesAtAQuarter: the sink asks for its batch to be taken
// once it is a quarter full (of events or of frames), not sooner, and
// never blocks on a request not yet seen.
func TestSinkNotifiesAtAQuarter(t *testing.T) {
	s := newSink(16)
	for i := 0; i < 3; i++ {
		s.MTE(0, trace.MTEThreadName, uint64(i), []uint64{1, 1}, "x")
	}
	select {
	case <-s.notify:
		t.Fatal("notified at 3 events of 16")
	default:
	}
	for i := 3; i < 12; i++ {
		s.MTE(0, trace.MTEThreadName, uint64(i), []uint64{1, 1}, "x")
	}
	select {
	case <-s.notify:
	default:
		t.Fatal("not notified at a quarter of the events")
	}
	drainSink(s)
	s.Stack(0, 100, 7, 8, make([]uint64, 16*maxFramesPerEvent/4), 0, false, false)
	select {
	case <-s.notify:
	default:
		t.Fatal("not notified at a quarter of the frames")
	}
}

// TestReorderTies: events of one time stamp are applied in the order they
// came (a tick before its stack, a fork before the process record of the
// same instant), those kept across releases too.
func TestReorderTies(t *testing.T) {
	r := reorder{max: 1 << 10}
	var b batch
	put := func(ts uint64, pid uint32) { b.evs = append(b.evs, event{t: ts, pid: pid, kind: evMTE}) }
	for i := uint32(0); i < 50; i++ {
		put(100-uint64(i%3), i) // 100, 99, 98, 100, ...
	}
	r.add(&b)
	b.reset()
	var got []event
	apply := func(e *event, pcs []uint64) { got = append(got, *e) }
	r.release(98, apply)
	for i := uint32(50); i < 100; i++ {
		put(100-uint64(i%3), i)
	}
	r.add(&b)
	r.release(^uint64(0), apply)
	if len(got) != 100 {
		t.Fatalf("%d events applied, want 100", len(got))
	}
	for i := 1; i < len(got); i++ {
		p, e := got[i-1], got[i]
		if e.t < p.t || e.t == p.t && e.pid < p.pid {
			t.Fatalf("applied (t %d, pid %d) after (t %d, pid %d): want time order, ties in arrival order", e.t, e.pid, p.t, p.pid)
		}
	}
}
