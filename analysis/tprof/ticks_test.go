package tprof

import (
	"math/rand/v2"
	"testing"

	"perfinsp/format/trace"
)

// The counter's counts sum to the ticks given, per thread, kernel flag and
// address, whatever the interleaving of CPUs, the flushes of a pid (its
// state changing) and the partial counts of a thread with many ticks; an
// address of a thread is given once a state (the parts merged).
func TestTickCounterCounts(t *testing.T) {
	type key struct {
		pid, tid uint32
		kernel   bool
		ip       uint64
	}
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[key]uint64{}
	got := map[key]uint64{}
	given := map[key]bool{} // in the pid's current state
	tc := newTickCounter(func(th *tickThread, kernel bool, ip, n uint64) {
		pid, tid := th.pid, th.tid
		if n == 0 {
			t.Fatalf("a count of 0 for %d/%d %#x", pid, tid, ip)
		}
		k := key{pid, tid, kernel, ip}
		if given[k] {
			t.Fatalf("%+v given twice in one state: the parts of a thread were not merged", k)
		}
		given[k] = true
		got[k] += n
	})
	const ticks = 100_000 // a hot thread spills its table: more distinct addresses than tableMax/2
	for i := 0; i < ticks; i++ {
		var pid, tid uint32
		if rng.IntN(4) == 0 { // many short threads
			pid = 100 + uint32(rng.IntN(50))
			tid = pid + uint32(rng.IntN(3))
		} else { // one hot thread
			pid, tid = 7, 7
		}
		kernel := rng.IntN(5) == 0
		ip := 0x401000 + uint64(rng.IntN(3000))
		if pid == 7 {
			ip = 0x401000 + uint64(rng.IntN(3*tableMax))
		}
		if kernel {
			ip = 0xffffffff81000000 + uint64(rng.IntN(500))
		}
		th, _ := tc.thread(rng.IntN(3), pid, tid, 0)
		tc.add(th, kernel, ip)
		want[key{pid, tid, kernel, ip}]++
		if rng.IntN(40000) == 0 {
			tc.flushPid(pid)
			for k := range given {
				if k.pid == pid {
					delete(given, k)
				}
			}
		}
	}
	tc.flushAll()
	if len(got) != len(want) {
		t.Fatalf("%d distinct (thread, address) counted, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%+v: %d ticks counted, want %d", k, got[k], n)
		}
	}
}

// The tables a thread grew through, and its last one, are given back
// empty when its state ends, and another thread takes them (no fresh
// memory) with nothing of the first in them.
func TestTickCounterReusesEmptyTable(t *testing.T) {
	got := map[[2]uint64]uint64{} // (tid, ip)
	tc := newTickCounter(func(th *tickThread, _ bool, ip, n uint64) { got[[2]uint64{uint64(th.tid), ip}] += n })
	fill := func(pid uint32, base uint64) {
		th, _ := tc.thread(0, pid, pid, 0)
		for i := range uint64(tableMax/4 + 500) { // past a quarter: a full-size table, no spill
			tc.add(th, false, base+i)
		}
		if len(th.tabs[0].slots) != tableMax || len(th.acc[0]) != 0 {
			t.Fatalf("pid %d: a table of %d slots, %d spilled; want %d and none", pid, len(th.tabs[0].slots), len(th.acc[0]), tableMax)
		}
		tc.flushPid(pid)
	}
	kept := func() map[int][]ipCount {
		m := map[int][]ipCount{}
		for k, f := range tc.free {
			for _, tab := range f {
				if len(tab) != 1<<k {
					t.Fatalf("a table of %d slots kept as one of %d", len(tab), 1<<k)
				}
				if len(f) != 1 {
					t.Fatalf("%d tables of %d slots kept, want 1", len(f), len(tab))
				}
				for _, c := range tab {
					if c != (ipCount{}) {
						t.Fatalf("a table of %d slots given back with %+v in it", len(tab), c)
					}
				}
				m[len(tab)] = tab
			}
		}
		for n := tableMin; n <= tableMax; n *= 2 {
			if m[n] == nil {
				t.Fatalf("no table of %d slots given back", n)
			}
		}
		return m
	}
	fill(1, 0x1000)
	first := kept()
	fill(2, 0x100000)
	for n, tab := range kept() {
		if &tab[0] != &first[n][0] {
			t.Errorf("the table of %d slots is fresh memory, not the one given back", n)
		}
	}
	for k, n := range got {
		if n != 1 || k[0] == 2 && k[1] < 0x100000 {
			t.Fatalf("tid %d address %#x: %d ticks, want 1 (and no address of tid 1 under tid 2)", k[0], k[1], n)
		}
	}
	if len(got) != 2*(tableMax/4+500) {
		t.Fatalf("%d (thread, address) counted, want %d", len(got), 2*(tableMax/4+500))
	}
}

// A tick is named in the mappings of its time: ticks before an MTE record
// that remaps their address are counted (located) before it is applied,
// ticks after it in the new mapping; the same with naming at once.
func TestTicksNamedBeforeRemap(t *testing.T) {
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{7, 1}, "prog"))
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 2, []uint64{7, 0x400000, 0x1000, 0}, "/nonexistent/a"))
	tick := func(tm uint64) {
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{7, 7, 0x400100, 0}, ""))
	}
	tick(3)
	tick(4)
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 5, []uint64{7, 0x400000, 0x1000, 0}, "/nonexistent/b"))
	tick(6)
	for i, rep := range bothWays(t, oneCPUTrace(t, &m, &tr, 6)) {
		atOnce := i == 1
		per := map[string]uint64{}
		for k, n := range rep.TickCounts() {
			per[k.Module] += n
		}
		if rep.Total != 3 || per["/nonexistent/a"] != 2 || per["/nonexistent/b"] != 1 {
			t.Fatalf("naming at once %v: total %d, per module %v; want 3, /nonexistent/a 2, /nonexistent/b 1", atOnce, rep.Total, per)
		}
	}
}
