package tprof

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// cellsLike makes n cells shaped like a many-process trace's: a few
// hundred processes of one to three threads, a few dozen modules, many
// symbols, a few cells of one key.
func cellsLike(n int) []cell {
	rng := rand.New(rand.NewPCG(1, 2))
	cs := make([]cell, n)
	for i := range cs {
		pid := uint32(1000 + rng.IntN(400))
		cs[i] = cell{pid: pid, tid: pid + uint32(rng.IntN(3)), mod: int32(rng.IntN(40)), sym: int32(40 + rng.IntN(20000)), n: uint64(1 + rng.IntN(100))}
	}
	return cs
}

// The radix order of the cells is the order of their level keys (what a
// comparison sort gives), every cell once, equal keys in cell order.
func TestCellOrderSorted(t *testing.T) {
	rep := &Report{cells: cellsLike(50000)}
	for _, levels := range [][]int{{LPid, LMod, LSym, LTid}, {LPid, LTid, LMod, LSym}, {LMod, LSym}, {LSym}} {
		order := rep.cellOrder(levels)
		if len(order) != len(rep.cells) {
			t.Fatalf("%v: %d indexes for %d cells", levels, len(order), len(rep.cells))
		}
		seen := make([]bool, len(rep.cells))
		key := func(i int32) []uint32 {
			var k []uint32
			for _, l := range levels {
				k = append(k, levelKey(&rep.cells[i], l))
			}
			return k
		}
		for j, i := range order {
			if seen[i] {
				t.Fatalf("%v: cell %d twice", levels, i)
			}
			seen[i] = true
			if j == 0 {
				continue
			}
			c := slices.Compare(key(order[j-1]), key(i))
			if c > 0 || c == 0 && order[j-1] > i {
				t.Fatalf("%v: cells %d and %d out of order: %v then %v", levels, order[j-1], i, key(order[j-1]), key(i))
			}
		}
	}
}

func BenchmarkCellOrder(b *testing.B) {
	rep := &Report{cells: cellsLike(150000)}
	levels := []int{LPid, LTid, LMod, LSym}
	b.Run("radix", func(b *testing.B) {
		for range b.N {
			rep.cellOrder(levels)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for range b.N {
			keys := make([]sortKey, len(rep.cells))
			for i := range rep.cells {
				c := &rep.cells[i]
				keys[i] = sortKey{uint64(c.pid)<<32 | uint64(c.tid), uint64(c.mod)<<32 | uint64(c.sym), int32(i)}
			}
			slices.SortFunc(keys, func(a, b sortKey) int {
				if a.hi != b.hi {
					return cmp.Compare(a.hi, b.hi)
				}
				return cmp.Compare(a.lo, b.lo)
			})
		}
	})
}

// Rows of equal ticks come in name order at every level (the names'
// ranks stand for them), whatever the order of their numbers: process
// labels against pids, thread labels against tids, module and symbol
// names against their interned numbers.
func TestRowsOfEqualTicksByName(t *testing.T) {
	rep := &Report{
		names:    []string{"zlib", "m.so", "alpha.so", "sym_z", "sym_m", "sym_a"},
		ProcName: map[uint32]string{30: "aaa", 10: "zzz", 20: "mmm"},
		ThreadNm: map[[2]uint32]string{{30, 33}: "t-a", {30, 31}: "t-z", {30, 32}: "t-m"},
	}
	// zlib: sym_m 6 (pid 10), sym_a 6 (pid 20), sym_z 2; m.so: sym_m 2;
	// alpha.so: sym_a 2
	rep.cells = []cell{{pid: 10, tid: 10, mod: 0, sym: 4, n: 6}, {pid: 20, tid: 20, mod: 0, sym: 5, n: 6},
		{pid: 30, tid: 31, mod: 0, sym: 3, n: 2}, {pid: 30, tid: 32, mod: 1, sym: 4, n: 2}, {pid: 30, tid: 33, mod: 2, sym: 5, n: 2}}
	var got []string
	for _, r := range rep.Section(LPid, LTid) {
		got = append(got, r.Name)
		for _, th := range r.Sub {
			got = append(got, th.Name)
		}
	}
	want := []string{"aaa_30", "t-a_33", "t-m_32", "t-z_31", "mmm_20", "mmm_20", "zzz_10", "zzz_10"}
	if !slices.Equal(got, want) {
		t.Errorf("processes and threads of equal ticks: %q, want %q", got, want)
	}
	got = got[:0]
	for _, r := range rep.Section(LMod, LSym) {
		got = append(got, r.Name)
		for _, s := range r.Sub {
			got = append(got, s.Name)
		}
	}
	want = []string{"zlib", "sym_a", "sym_m", "sym_z", "alpha.so", "sym_a", "m.so", "sym_m"}
	if !slices.Equal(got, want) {
		t.Errorf("modules and symbols of equal ticks: %q, want %q", got, want)
	}
}

// TestSortGroups: rows by ticks down, equal ticks by name's rank, packed
// (insertion and comparison sort) and not (ticks past 32 bits).
func TestSortGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{0, 1, 2, 5, 16, 17, 200, 3000} {
		for _, big := range []bool{false, true} {
			gs := make([]rowGroup, n)
			for i := range gs {
				ticks := uint64(rng.IntN(6))
				if big && i%3 == 0 {
					ticks += 1 << 33
				}
				rank := uint32(rng.IntN(8))
				gs[i] = rowGroup{key: uint64(^uint32(ticks))<<32 | uint64(rank), n: ticks, lo: int32(i)}
			}
			sorts := map[string]func([]rowGroup) []rowGroup{"sortGroups": func(gs []rowGroup) []rowGroup {
				sortGroups(gs, !big)
				return gs
			}}
			if !big && n > 0 {
				sorts["radixGroups"] = func(gs []rowGroup) []rowGroup {
					var keys [2][]sortKey
					return radixGroups(gs, make([]rowGroup, len(gs)), &keys)
				}
			}
			for name, sort := range sorts {
				gs := sort(slices.Clone(gs))
				for i := 1; i < len(gs); i++ {
					a, b := gs[i-1], gs[i]
					if a.n < b.n || a.n == b.n && uint32(a.key) > uint32(b.key) {
						t.Fatalf("%s n=%d big=%v: row %d (%d ticks, rank %d) before (%d ticks, rank %d)", name, n, big, i, a.n, uint32(a.key), b.n, uint32(b.key))
					}
				}
			}
		}
	}
}
