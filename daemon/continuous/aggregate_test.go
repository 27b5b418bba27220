package continuous

import (
	"fmt"
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
