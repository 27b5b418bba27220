package tprof

import (
	"math/rand"
	"testing"
)

// TestMakeCellsSums: the two halves' cells together are the entries
// summed by (thread, result), each once, whatever the order the entries
// come in: a thread in several runs, pid 0 tid 0 first, blocks of
// entries crossed by a run; entries holding Locs, several of one result
// (resOf), make one cell of them.
func TestMakeCellsSums(t *testing.T) {
	for _, locs := range []bool{false, true} {
		testMakeCells(t, locs)
	}
}

func testMakeCells(t *testing.T, locs bool) {
	rng := rand.New(rand.NewSource(1))
	const nres = 50
	resMod := make([]int32, nres)
	resSym := make([]int32, nres)
	for i := range resMod {
		resMod[i], resSym[i] = int32(i%7), int32(100+i)
	}
	type thr struct{ pid, tid uint32 }
	threads := []thr{{0, 0}, {1, 1}, {1, 2}, {7, 7}, {300, 301}, {300, 302}, {9, 9}}
	var all [][]entry
	nent := int32(0)
	want := map[[3]uint32]uint64{}
	for nent < 3*entryBlock+17 {
		th := threads[rng.Intn(len(threads))]
		if nent == 0 {
			th = threads[0]
		}
		for k := rng.Intn(40) + 1; k > 0; k-- { // a run
			if nent%entryBlock == 0 {
				all = append(all, make([]entry, 0, entryBlock))
			}
			e := entry{pid: th.pid, tid: th.tid, res: int32(rng.Intn(nres)), n: uint32(rng.Intn(5) + 1)}
			res := e.res
			if locs { // three Locs a result
				e.res += int32(nres * rng.Intn(3))
			}
			all[len(all)-1] = append(all[len(all)-1], e)
			nent++
			want[[3]uint32{e.pid, e.tid, uint32(res)}] += uint64(e.n)
		}
	}
	var resOf []int32
	if locs {
		for l := range 3 * nres {
			resOf = append(resOf, int32(l%nres))
		}
	}
	got := map[[3]uint32]uint64{}
	seenThr := map[thr]int{}
	for half := range uint64(2) {
		cells, ths := makeCells(all, nent, half, resOf, resMod, resSym)
		for _, c := range ths {
			seenThr[thr{c.pid, c.tid}]++
		}
		for _, c := range cells {
			res := uint32(c.sym - 100)
			if resMod[res] != c.mod {
				t.Fatalf("cell %+v: module %d, want %d", c, c.mod, resMod[res])
			}
			k := [3]uint32{c.pid, c.tid, res}
			if _, dup := got[k]; dup {
				t.Fatalf("two cells of thread %d/%d, result %d", c.pid, c.tid, res)
			}
			got[k] = c.n
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d cells, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("thread %d/%d result %d: %d ticks, want %d", k[0], k[1], k[2], got[k], n)
		}
	}
	for _, th := range threads {
		if seenThr[th] != 1 {
			t.Errorf("thread %v given %d times, want once", th, seenThr[th])
		}
	}
}
