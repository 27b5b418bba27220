package continuous

import (
	"fmt"
	"os"
	"reflect"
	"testing"

	"perfinsp/format/trace"
)

// summary is what an interval says: its stacks (thread, count, frames),
// counts, table sizes and thread names.
func summary(iv *interval) string {
	s := fmt.Sprintf("samples %d dropped %d locs %d/%d/%d stacks %d procs %d names %v\n",
		iv.samples, iv.dropped, len(iv.locs), len(iv.locIndex), len(iv.byPC), len(iv.stacks), len(iv.procs), iv.names)
	for _, sc := range iv.order {
		s += fmt.Sprintf("%d/%d x%d:", sc.pid, sc.tid, sc.count)
		for _, l := range sc.locs {
			s += fmt.Sprintf(" %s+%#x", iv.locs[l].key.module, iv.locs[l].key.addr)
		}
		s += "\n"
	}
	return s
}

// TestIntervalRecycled: an interval recycled after its request is built
// holds a later interval's samples in its tables, and says what a new
// interval given the same samples says.
func TestIntervalRecycled(t *testing.T) {
	const p1, p2 = 5000011, 5000012
	sample := func(a *aggregator, pid uint32, pcs ...uint64) {
		e := event{kind: evSample, pid: pid, tid: pid}
		a.handle(&e, pcs)
	}
	second := func(a *aggregator, mte func(uint32, string, ...uint64)) *interval {
		mte(trace.MTEProcess, "two", p2, 1)
		mte(trace.MTESegment, "/two/prog", p2, 0x1000, 0x1000, 0x2000, 5)
		sample(a, p2, 0x1100, 0x1200)
		sample(a, p2, 0x1100, 0x1200)
		sample(a, p2, 0x1300)
		return a.rotate(3)
	}
	a, mte := testAggregator()
	mte(trace.MTEProcess, "one", p1, 1)
	mte(trace.MTESegment, "/one/prog", p1, 0x1000, 0x1000, 0, 5)
	for i := uint64(0); i < 50; i++ {
		sample(a, p1, 0x1000+i*16, 0x1800+i)
	}
	first := a.rotate(1)
	if first.samples != 50 || len(first.order) != 50 {
		t.Fatalf("first interval: %d samples in %d stacks, want 50 in 50", first.samples, len(first.order))
	}
	a.recycle(first)
	// The interval after the next one is in the first one's tables.
	sample(a, p1, 0x1000)
	if iv := a.rotate(2); iv.samples != 1 || len(iv.order) != 1 {
		t.Fatalf("second interval: %d samples in %d stacks, want 1 in 1", iv.samples, len(iv.order))
	}
	got := second(a, mte)
	if got != first {
		t.Error("the third interval is not in the first one's tables")
	}
	fresh, freshMTE := testAggregator()
	want := second(fresh, freshMTE)
	if g, w := summary(got), summary(want); g != w {
		t.Errorf("recycled interval:\n%s\nwant (a new one):\n%s", g, w)
	}
	if got.startNS != 2 {
		t.Errorf("third interval starts at %d, want 2 (the second's end)", got.startNS)
	}
}

// TestProcessesReadWhenNeeded: the tables start empty and read a process
// from /proc at the first record that needs it: its fork of a child (the
// child starts with the mappings read), a sample, interrupt time; a
// process gone is tried once.
func TestProcessesReadWhenNeeded(t *testing.T) {
	self := uint32(os.Getpid())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pc := uint64(reflect.ValueOf(TestProcessesReadWhenNeeded).Pointer())
	a, mte := testAggregator()
	if a.res.Process(self) != nil {
		t.Fatal("this process is in the tables before any record")
	}
	const child = 5000021
	mte(trace.MTEFork, "", uint64(self), uint64(self), child, child, 0)
	if !a.known[self] || !a.known[child] {
		t.Fatalf("after the fork: parent known %v, child known %v; want both", a.known[self], a.known[child])
	}
	for _, pid := range []uint32{self, child} {
		l := a.res.Locate(pid, pc, false)
		if l.Module() != exe {
			t.Errorf("pid %d: this test's code located in %q, want %s", pid, l.Module(), exe)
		}
	}
	// A sample of a process gone (never there): tried once.
	const gone = 5000022
	e := event{kind: evSample, pid: gone, tid: gone}
	a.handle(&e, []uint64{0x1000})
	if !a.tried[gone] || a.known[gone] {
		t.Errorf("a process gone: tried %v, known %v; want tried, not known", a.tried[gone], a.known[gone])
	}
	// Interrupt time of a process not read yet: its name is.
	b, _ := testAggregator()
	ie := event{kind: evIntr, pid: self, tid: self, minor: trace.IntrSoft, nf: 2, fields: [5]uint64{3, 100}}
	b.handle(&ie, nil)
	if p := b.res.Process(self); p == nil || p.Name == "" {
		t.Errorf("interrupt time of this process: its name not read (%+v)", p)
	}
}
