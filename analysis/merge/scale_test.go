package merge

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"perfinsp/format/trace"
)

// synthetic is a thread's calls as a program makes them: nested calls of
// a few methods (by id, so that they go through Record as a trace's method
// events do) with a tick every tickEvery events, in time order. Events
// have even times (some equal: their order must hold), ticks odd ones: a
// tick and an event of one time would be merged in the order they came.
type synthetic struct {
	recs []*trace.Record
}

func newSynthetic(events, tickEvery int, seed uint64) *synthetic {
	r := rand.New(rand.NewPCG(seed, 1))
	s := &synthetic{}
	var stack []uint64
	tm := uint64(1000)
	ev := func(minor uint32, id uint64) {
		s.recs = append(s.recs, &trace.Record{Major: trace.MajorInterp, Minor: minor, Time: tm, Fixed: []uint64{1, 2, id & 0xffffffff, id >> 32}})
	}
	for i := 0; i < events; i++ {
		tm += uint64(r.IntN(3))
		if len(stack) > 0 && (len(stack) > 30 || r.IntN(2) == 0) {
			ev(MinorExit, stack[len(stack)-1])
			stack = stack[:len(stack)-1]
		} else {
			id := uint64(0x7f00_0000_0000) + uint64(r.IntN(40))*8
			ev(MinorEntry, id)
			stack = append(stack, id)
		}
		if i%tickEvery == 0 {
			s.recs = append(s.recs, &trace.Record{Major: trace.MajorTprof, Time: 2*tm + 1, Fixed: []uint64{1, 2, uint64(r.IntN(2)), 0}})
		}
	}
	return s
}

// tree is a thread's merged tree as text: every node's path and figures.
func tree(t *testing.T, m *Merger) string {
	t.Helper()
	if len(m.Threads) != 1 {
		t.Fatalf("%d threads, want 1", len(m.Threads))
	}
	var out []byte
	for _, r := range m.Threads[0].Rows() {
		out = fmt.Appendf(out, "%d %v %s calls %d base %d ticks %d\n", r.Lvl, r.Sampled, r.Name, r.Calls, r.Base, r.Ticks)
	}
	return string(out)
}

func merged(t *testing.T, recs []*trace.Record) *Merger {
	t.Helper()
	m := New()
	for id := uint64(0); id < 40; id++ {
		m.MethodName(1, 0x7f00_0000_0000+id*8, fmt.Sprintf("M%d", id))
	}
	tickName := func(pid uint32, pc uint64, kernel bool) string {
		if pc == 0 {
			return interpreter
		}
		return "native"
	}
	for _, r := range recs {
		if err := m.Record(r, tickName); err != nil {
			t.Fatal(err)
		}
	}
	m.Finish()
	return m
}

// A thread's records reach the merge as an agent's batches do: its method
// events late, each batch after ticks of later times, batches of more than
// one block of items; the tree is the one of the records in time order.
func TestLateBatchesAcrossBlocks(t *testing.T) {
	s := newSynthetic(2*blockItems+blockItems/2, 97, 7)
	want := tree(t, merged(t, s.recs))

	// Ticks first (they reach the trace as they happen), the events
	// behind them by batches of 300,000 records.
	var late []*trace.Record
	var ticks, events []*trace.Record
	for _, r := range s.recs {
		if r.Major == trace.MajorTprof {
			ticks = append(ticks, r)
		} else {
			events = append(events, r)
		}
	}
	const batch = 300_000
	ti := 0
	for i := 0; i < len(events); i += batch {
		end := min(i+batch, len(events))
		// the ticks up to 2 batches ahead of this batch's last event
		ahead := events[min(end+2*batch, len(events)-1)].Time
		for ti < len(ticks) && ticks[ti].Time <= ahead {
			late = append(late, ticks[ti])
			ti++
		}
		late = append(late, events[i:end]...)
	}
	late = append(late, ticks[ti:]...)
	m := merged(t, late)
	if got := tree(t, m); got != want {
		t.Errorf("the tree of late batches differs from the tree in time order")
	}
	if len(m.Problems) != 0 {
		t.Errorf("problems: %v", m.Problems)
	}
	if m.Events != uint64(len(events)) || m.Ticks != uint64(len(ticks)) {
		t.Errorf("merged %d events, %d ticks; want %d, %d", m.Events, m.Ticks, len(events), len(ticks))
	}
}

// Ticks and events of equal times keep the order they came in, across
// blocks too: a tick read before an entry of its time lands in the caller.
func TestEqualTimesKeepRecordOrder(t *testing.T) {
	m := New()
	m.Enter(1, 1, 1, "main")
	for i := 0; i < blockItems-1; i++ { // fill the first block (with main's entry)
		m.Tick(1, 1, 2, interpreter)
	}
	m.Tick(1, 1, 3, interpreter) // the second block's first item
	m.Enter(1, 1, 3, "work")     // after it, at the same time
	m.Exit(1, 1, 4, "work")      //
	m.Tick(1, 1, 3, interpreter) // late, equal to work's entry: after it (read later)
	m.Exit(1, 1, 5, "main")      //
	m.Finish()
	var rows []string
	for _, r := range m.Threads[0].Rows() {
		rows = append(rows, fmt.Sprintf("%s %d", r.Name, r.Ticks))
	}
	if w := fmt.Sprintf("[pt_pidtid 0 main %d work 1]", blockItems-1+1); fmt.Sprint(rows) != w {
		t.Errorf("rows %v, want %s", rows, w)
	}
}

// The events waiting for Finish are held in a few bytes each: a trace of a
// Java run holds tens of millions of them.
func TestEventsHeldCompactly(t *testing.T) {
	const n = 2_000_000
	m := New()
	m.MethodName(1, 8, "Worker.run")
	recs := [2]*trace.Record{
		{Major: trace.MajorJitted, Minor: MinorEntry, Fixed: []uint64{1, 2, 8, 0}},
		{Major: trace.MajorJitted, Minor: MinorExit, Fixed: []uint64{1, 2, 8, 0}},
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		r := recs[i&1]
		r.Time = uint64(i)
		if err := m.Record(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes of heap an event", per)
	if per > 24 {
		t.Errorf("%.1f bytes of heap an event waiting for Finish, want at most 24 (16 an item)", per)
	}
	m.Finish()
	if got := slices.Collect(func(yield func(string) bool) {
		for _, r := range m.Threads[0].Rows() {
			if !yield(fmt.Sprintf("%s %d", r.Name, r.Calls)) {
				return
			}
		}
	}); fmt.Sprint(got) != fmt.Sprintf("[pt_pidtid 1 Worker.run %d]", n/2) {
		t.Errorf("rows %v", got)
	}
}
