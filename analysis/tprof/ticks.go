package tprof

import (
	"cmp"
	"math/bits"
	"slices"
)

// Counting ticks: each thread, in each mapping state of its process, has
// a small open-addressing table of (address, ticks), user and kernel
// apart; a tick is one probe (a multiply, a shift, mostly one load in the
// cache). A table grows to tableMax slots; a full one is spilled (sorted,
// merged into the thread's counts, emptied). When its process's state
// ends (an MTE record changes the mappings: counted before the record is
// applied) or the trace ends, a thread's counts are given, each distinct
// address once. Blocks of addresses radix-sorted when full cost ~10 %
// more CPU on a 1 M-tick trace, one Go map lookup a tick 12-15 % more
// than those (docs/post.md).

// tableMin and tableMax bound a thread's table (slots; a power of two):
// most threads of a system-wide trace tick a few times, a hot one touches
// a few thousand addresses.
const (
	tableMin  = 16
	tableBits = 14
	tableMax  = 1 << tableBits
)

// ipTable is an open-addressing table of (address, ticks); a slot of
// no ticks is free.
type ipTable struct {
	slots []ipCount
	used  int
	shift uint // 64 - log2(len(slots))
}

// fibMul is 2^64 over the golden ratio: a key times it has well-mixed top
// bits (Fibonacci hashing).
const fibMul = 0x9e3779b97f4a7c15

// home is ip's first slot (Fibonacci hashing: the product's top bits).
func (tab *ipTable) home(ip uint64) uint64 { return (ip * fibMul) >> tab.shift }

// tickThread is the ticks of one thread in one mapping state of its
// process, user and kernel addresses apart (the kernel flag is the
// tick's, not the address's).
type tickThread struct {
	pid, tid uint32
	epoch    uint32       // the process's mapping state (a tickWorker's epoch)
	tabs     [2]ipTable   // [0] user, [1] kernel
	acc      [2][]ipCount // the counts spilled so far, by address
	done     bool         // flushed: its process's state changed
}

// threadSlab is how many threads a tickCounter allocates at once: one
// reader's threads together, not between another's (their fields are
// written as they tick: see tickWorker).
const threadSlab = 64

// tickCounter holds the threads' tables until they are counted.
type tickCounter struct {
	byThread map[[2]uint32]*tickThread // the live state of each thread
	byPid    map[uint32][]*tickThread
	last     []*tickThread              // the last thread seen per CPU
	free     [tableBits + 1][][]ipCount // tables to reuse (empty), by log2 of their size
	runs     []ipCount                  // scratch of a spill: a table's counts
	merged   []ipCount                  // and those merged with the thread's
	slab     []tickThread               // threads to give out (see threadSlab)
	// count receives each distinct address of a thread-state with its
	// ticks, once, when the state or the trace ends.
	count func(t *tickThread, kernel bool, ip, n uint64)
}

func newTickCounter(count func(t *tickThread, kernel bool, ip, n uint64)) *tickCounter {
	return &tickCounter{byThread: map[[2]uint32]*tickThread{}, byPid: map[uint32][]*tickThread{}, count: count}
}

// thread returns the live state of (pid, tid) in mapping state epoch, and
// whether (pid, tid) is new. A thread met in a later epoch than before has
// its ticks of the earlier one counted first.
func (tc *tickCounter) thread(cpu int, pid, tid, epoch uint32) (*tickThread, bool) {
	if cpu >= 0 && cpu < len(tc.last) {
		if t := tc.last[cpu]; t != nil && t.pid == pid && t.tid == tid && t.epoch == epoch && !t.done {
			return t, false
		}
	}
	k := [2]uint32{pid, tid}
	t, ok := tc.byThread[k]
	isNew := !ok
	if ok && t.epoch != epoch {
		tc.flush(t)
		t.done, t.epoch = false, epoch
	}
	if !ok {
		if len(tc.slab) == 0 {
			tc.slab = make([]tickThread, threadSlab)
		}
		t = &tc.slab[0]
		tc.slab = tc.slab[1:]
		*t = tickThread{pid: pid, tid: tid, epoch: epoch}
		tc.byThread[k] = t
		tc.byPid[pid] = append(tc.byPid[pid], t)
	}
	if cpu >= 0 && cpu < 1024 {
		if cpu >= len(tc.last) {
			// (at least 16: a line of the cache of its own, read at every
			// tick, see tickWorker)
			tc.last = append(tc.last, make([]*tickThread, max(cpu+1, 16)-len(tc.last))...)
		}
		tc.last[cpu] = t
	}
	return t, isNew
}

// add counts one tick's address.
func (tc *tickCounter) add(t *tickThread, kernel bool, ip uint64) {
	k := 0
	if kernel {
		k = 1
	}
	tab := &t.tabs[k]
	if tab.slots == nil {
		tab.slots, tab.shift = tc.table(tableMin), 64-4
	}
	mask := uint64(len(tab.slots) - 1)
	for i := tab.home(ip); ; i = (i + 1) & mask {
		s := &tab.slots[i]
		if s.ip == ip && s.n != 0 {
			s.n++
			return
		}
		if s.n == 0 {
			s.ip, s.n = ip, 1
			tab.used++
			if 2*tab.used > len(tab.slots) {
				tc.grow(t, k)
			}
			return
		}
	}
}

// grow doubles a half-full table, or spills it at tableMax.
func (tc *tickCounter) grow(t *tickThread, k int) {
	tab := &t.tabs[k]
	if len(tab.slots) >= tableMax {
		tc.spill(t, k)
		return
	}
	old := tab.slots
	slots := tc.table(2 * len(old))
	tab.slots, tab.shift = slots, tab.shift-1
	mask := uint64(len(slots) - 1)
	for j, c := range old {
		if c.n == 0 {
			continue
		}
		old[j] = ipCount{}
		i := tab.home(c.ip)
		for slots[i].n != 0 {
			i = (i + 1) & mask
		}
		slots[i] = c
	}
	tc.release(old)
}

// table returns an empty table of n slots (a power of two from tableMin
// to tableMax): one released before if there is one. Threads of a
// many-process trace come and go: their tables are reused, not fresh
// memory (zeroed twice, by the kernel and the runtime, and collected).
func (tc *tickCounter) table(n int) []ipCount {
	k := bits.TrailingZeros(uint(n))
	if f := tc.free[k]; len(f) > 0 {
		tc.free[k] = f[:len(f)-1]
		return f[len(f)-1]
	}
	return make([]ipCount, n)
}

// release keeps an emptied table (every slot zero) for table.
func (tc *tickCounter) release(t []ipCount) {
	k := bits.TrailingZeros(uint(len(t)))
	tc.free[k] = append(tc.free[k], t)
}

// spill merges a thread's table into its counts (sorted by address) and
// empties the table.
func (tc *tickCounter) spill(t *tickThread, k int) {
	tab := &t.tabs[k]
	if tab.used == 0 {
		return
	}
	runs := tc.runs[:0]
	for i := range tab.slots {
		if tab.slots[i].n != 0 {
			runs = append(runs, tab.slots[i])
			tab.slots[i] = ipCount{}
		}
	}
	tab.used = 0
	slices.SortFunc(runs, func(a, b ipCount) int { return cmp.Compare(a.ip, b.ip) })
	tc.runs = runs
	if len(t.acc[k]) == 0 {
		t.acc[k] = append(t.acc[k], runs...)
	} else {
		tc.merged = mergeCounts(tc.merged[:0], t.acc[k], runs)
		t.acc[k] = append(t.acc[k][:0], tc.merged...)
	}
}

// flushPid counts the ticks of pid's threads (before its state changes).
func (tc *tickCounter) flushPid(pid uint32) {
	ts, ok := tc.byPid[pid]
	if !ok {
		return
	}
	for _, t := range ts {
		tc.flush(t)
		delete(tc.byThread, [2]uint32{t.pid, t.tid})
	}
	delete(tc.byPid, pid)
}

// flushAll counts every thread's ticks (at the end of the trace).
func (tc *tickCounter) flushAll() {
	pids := make([]uint32, 0, len(tc.byPid))
	for pid := range tc.byPid {
		pids = append(pids, pid)
	}
	slices.Sort(pids) // a fixed order of naming
	for _, pid := range pids {
		tc.flushPid(pid)
	}
}

func (tc *tickCounter) flush(t *tickThread) {
	t.done = true
	for k := range t.tabs {
		tc.count1(t, k)
	}
}

// count1 gives the user (k 0) or kernel (k 1) counts of t, each distinct
// address once, and releases its table (for another thread).
// A table that never spilled is given as it lies, in no order (the
// report does not depend on the order; sorting it was 6 % of a
// many-process report's CPU).
func (tc *tickCounter) count1(t *tickThread, k int) {
	tab := &t.tabs[k]
	if len(t.acc[k]) == 0 {
		for i := range tab.slots { // (emptied for reuse)
			if c := tab.slots[i]; c.n != 0 {
				tc.count(t, k == 1, c.ip, c.n)
				tab.slots[i] = ipCount{}
			}
		}
	} else {
		tc.spill(t, k)
		for _, c := range t.acc[k] {
			tc.count(t, k == 1, c.ip, c.n)
		}
	}
	t.acc[k] = nil
	if tab.slots != nil {
		tc.release(tab.slots)
	}
	t.tabs[k] = ipTable{}
}

// ipCount is one distinct address with its ticks.
type ipCount struct{ ip, n uint64 }

// mergeCounts appends to dst the counts of a and b (each sorted by
// address), one count an address.
func mergeCounts(dst, a, b []ipCount) []ipCount {
	dst = slices.Grow(dst, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].ip < b[j].ip:
			dst = append(dst, a[i])
			i++
		case a[i].ip > b[j].ip:
			dst = append(dst, b[j])
			j++
		default:
			dst = append(dst, ipCount{a[i].ip, a[i].n + b[j].n})
			i++
			j++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}
