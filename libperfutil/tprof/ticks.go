package tprof

import "slices"

// Counting ticks without a hash lookup per tick: a flat report's ticks are
// appended, per thread and mapping state, to blocks of addresses; when a
// thread has filled partBlocks blocks, when its process's state ends (an
// MTE record changes the mappings: counted before the record is applied)
// or when the trace ends, its addresses are sorted (radix sort: sequential
// passes, no table larger than the cache to probe at random) and each run
// of one address is one count. The blocks are reused: a million ticks do
// not cost 8 MB of fresh memory (on this project's VMs a first touch of a
// page costs ~20 µs). Measured on a 1 M-tick trace: 12-15 % less CPU
// than one Go map lookup per tick (docs/post.md).

// tickBlock is the number of addresses per block (16 KB).
const tickBlock = 2048

// partBlocks: a thread's blocks are counted when it has filled this many.
const partBlocks = 8

// tickThread is the ticks of one thread in one mapping state of its
// process, user and kernel addresses apart (the kernel flag is the
// tick's, not the address's).
type tickThread struct {
	pid, tid uint32
	epoch    uint32        // the process's mapping state (countParallel; else 0)
	blocks   [2][][]uint64 // [0] user, [1] kernel
	acc      [2][]ipCount  // the counts of the blocks counted so far, by address
	done     bool          // flushed: its process's state changed
}

// tickCounter holds the threads' address blocks until they are counted.
type tickCounter struct {
	byThread map[[2]uint32]*tickThread // the live state of each thread
	byPid    map[uint32][]*tickThread
	last     []*tickThread // the last thread seen per CPU
	free     [][]uint64    // blocks to reuse
	sorted   []uint64      // scratch of flush: a thread's addresses
	tmp      []uint64      // and the radix sort's other half
	runs     []ipCount     // and their counts
	merged   []ipCount     // and those merged with the thread's
	// count receives each distinct address of a thread's counted part
	// with its ticks (an address can come again in a later part).
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
		tc.release(t)
		t.blocks, t.done, t.epoch = [2][][]uint64{}, false, epoch
	}
	if !ok {
		t = &tickThread{pid: pid, tid: tid, epoch: epoch}
		tc.byThread[k] = t
		tc.byPid[pid] = append(tc.byPid[pid], t)
	}
	if cpu >= 0 && cpu < 1024 {
		for cpu >= len(tc.last) {
			tc.last = append(tc.last, nil)
		}
		tc.last[cpu] = t
	}
	return t, isNew
}

// add appends one tick's address.
func (tc *tickCounter) add(t *tickThread, kernel bool, ip uint64) {
	k := 0
	if kernel {
		k = 1
	}
	bl := t.blocks[k]
	n := len(bl)
	if n > 0 && len(bl[n-1]) < cap(bl[n-1]) {
		bl[n-1] = append(bl[n-1], ip)
		return
	}
	switch {
	case n == 0:
		// A thread's first block is small: most threads of a
		// system-wide trace tick a few times.
		t.blocks[k] = append(bl, append(make([]uint64, 0, 32), ip))
		return
	case n == 1 && cap(bl[0]) < tickBlock:
		nb := make([]uint64, len(bl[0]), min(4*cap(bl[0]), tickBlock))
		copy(nb, bl[0])
		bl[0] = append(nb, ip)
		return
	}
	var b []uint64
	if nf := len(tc.free); nf > 0 {
		b = tc.free[nf-1][:0]
		tc.free = tc.free[:nf-1]
	} else {
		b = make([]uint64, 0, tickBlock)
	}
	t.blocks[k] = append(bl, append(b, ip))
	if len(t.blocks[k]) > partBlocks {
		// Count what the thread has so far: its blocks are reused,
		// the memory stays that of a few blocks per thread.
		tc.count1(t, k, false)
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

// release gives a counted thread's first blocks (its others are given back
// as it is counted) to the blocks to reuse, when they are full-size.
func (tc *tickCounter) release(t *tickThread) {
	for k := range t.blocks {
		if len(t.blocks[k]) > 0 && cap(t.blocks[k][0]) == tickBlock {
			tc.free = append(tc.free, t.blocks[k][0][:0])
		}
	}
}

func (tc *tickCounter) flush(t *tickThread) {
	t.done = true
	for k := range t.blocks {
		tc.count1(t, k, true)
	}
}

// count1 counts the user (k 0) or kernel (k 1) ticks t holds: into the
// thread's counts so far, given to count when final (a hot thread fills
// its blocks many times: given each time, a thread of 680 k ticks gave
// 96 k counts of a few thousand addresses to locate and add up).
func (tc *tickCounter) count1(t *tickThread, k int, final bool) {
	n := 0
	for _, b := range t.blocks[k] {
		n += len(b)
	}
	if n > 0 {
		if cap(tc.sorted) < n {
			tc.sorted = make([]uint64, 0, n+n/4)
			tc.tmp = make([]uint64, 0, n+n/4)
		}
		a := tc.sorted[:0]
		for i, b := range t.blocks[k] {
			a = append(a, b...)
			if i > 0 {
				tc.free = append(tc.free, b)
			}
		}
		// The first block stays the thread's, emptied.
		t.blocks[k][0] = t.blocks[k][0][:0]
		t.blocks[k] = t.blocks[k][:1]
		a = radixSort(a, tc.tmp[:n])
		runs := slices.Grow(tc.runs[:0], n)
		for i := 0; i < len(a); {
			j := i + 1
			for j < len(a) && a[j] == a[i] {
				j++
			}
			runs = append(runs, ipCount{a[i], uint64(j - i)})
			i = j
		}
		tc.runs = runs
		if len(t.acc[k]) == 0 {
			t.acc[k] = append(t.acc[k], runs...)
		} else {
			tc.merged = mergeCounts(tc.merged[:0], t.acc[k], runs)
			t.acc[k] = append(t.acc[k][:0], tc.merged...)
		}
	}
	if !final {
		return
	}
	for _, c := range t.acc[k] {
		tc.count(t, k == 1, c.ip, c.n)
	}
	t.acc[k] = nil
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

// radixPass returns where each byte value's keys start in a pass whose
// keys' byte values were counted in c, and whether the pass can be
// skipped: every one of the n keys has the byte of the first.
func radixPass(c *[256]int, n int, first byte) (pos [256]int, skip bool) {
	if c[first] == n {
		return pos, true
	}
	sum := 0
	for i := range c {
		pos[i] = sum
		sum += c[i]
	}
	return pos, false
}

// radixSort sorts a (using tmp, of a's length) and returns the sorted
// slice (a or tmp): least significant byte first, skipping the bytes in
// which all values agree (user addresses differ in 5 or 6 of 8).
func radixSort(a, tmp []uint64) []uint64 {
	if len(a) < 64 {
		for i := 1; i < len(a); i++ {
			for j := i; j > 0 && a[j] < a[j-1]; j-- {
				a[j], a[j-1] = a[j-1], a[j]
			}
		}
		return a
	}
	var counts [8][256]int
	for _, v := range a {
		counts[0][byte(v)]++
		counts[1][byte(v>>8)]++
		counts[2][byte(v>>16)]++
		counts[3][byte(v>>24)]++
		counts[4][byte(v>>32)]++
		counts[5][byte(v>>40)]++
		counts[6][byte(v>>48)]++
		counts[7][byte(v>>56)]++
	}
	src, dst := a, tmp
	for d := 0; d < 8; d++ {
		shift := uint(8 * d)
		pos, skip := radixPass(&counts[d], len(src), byte(src[0]>>shift))
		if skip {
			continue
		}
		for _, v := range src {
			b := byte(v >> shift)
			dst[pos[b]] = v
			pos[b]++
		}
		src, dst = dst, src
	}
	return src
}
