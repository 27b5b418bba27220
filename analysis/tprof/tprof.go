// Package tprof builds tprof reports from a trace: ticks per process,
// thread, module and symbol, resolved with A2N as of each tick's time. It
// writes PI's tprof.out form and the modern forms (pprof profile.proto,
// folded stacks for flame graphs).
package tprof

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// entryMax is the most ticks one count entry holds (tests lower it).
var entryMax uint64 = math.MaxUint32

// Key is one aggregation cell.
type Key struct {
	PID, TID uint32
	Module   string
	Symbol   string
}

// Report is the aggregated ticks of a trace.
type Report struct {
	File *nrm2.File
	// cells are the same counts with module and symbol interned, for
	// building sections without hashing strings.
	cells     []cell
	names     []string // interned module and symbol names
	Total     uint64
	ProcName  map[uint32]string
	ThreadNm  map[[2]uint32]string
	First     uint64 // time of the first and last tick
	Last      uint64
	Lost      uint64 // trace records lost
	MTELost   uint64
	Problems  []string // modules that could not be read
	RecordErr error    // a decode error that ended the trace early
	// Filter is the selection the report covers (nil: every tick);
	// Filtered counts the ticks it left out.
	Filter   *Filter
	Filtered uint64
	Selected string // what the filter selected, as given
	// Event and EventPeriod: event-based tprof (TPROF_EVENT_NAME record).
	Event           string
	EventPeriod     uint64
	StackTicks      uint64 // ticks with a call stack (none: the trace has no stacks)
	TruncatedStacks uint64 // of them, cut at the depth limit
	CFIStacks       uint64 // of them, with user frames unwound by call-frame information (--unwind dwarf)
	// stk are the call stacks of the ticks (UNWIND records, `swtrace
	// enable callstack`), aggregated, most ticks first, with frames as
	// indexes into res, the resolved names (Stacks gives them with names).
	stk []stackEntry
	res []a2n.Result
	// the PID and TID row names, each made once
	// HexIDs labels processes and threads name_hexid in tprof.out, as
	// PI's tprof did (post --hex-ids); set it before the report is written.
	HexIDs bool

	procLabels   map[uint32]string
	threadLabels map[[2]uint32]string
	threads      []cell // a cell of each thread of cells, its pid and tid (labelAll)
	// the ranks of the row names (labelAll)
	nameRank   []uint32
	procRank   map[uint32]uint32
	threadRank map[[2]uint32]uint32
	parallel   bool         // the CPUs' ticks were counted at once (parallel.go)
	addrs      *addrTicks   // BuildWithAddresses: the ticks by address
	orderKeys  [2][]sortKey // cellOrder's arrays
}

// Stacks returns the call stacks of the ticks (UNWIND records, `swtrace
// enable callstack`), aggregated per thread, most ticks first; none when
// the trace has none. The writers do not need it (it is built on each
// call: a million-tick trace holds millions of frames).
func (rep *Report) Stacks() []*Stack {
	nf := 0
	for i := range rep.stk {
		nf += len(rep.stk[i].frames)
	}
	frames := make([]Frame, 0, nf) // one backing array for every stack's frames
	structs := make([]Stack, len(rep.stk))
	out := make([]*Stack, len(rep.stk))
	for i := range rep.stk {
		e := &rep.stk[i]
		start := len(frames)
		for j, idx := range e.frames {
			res := &rep.res[idx]
			frames = append(frames, Frame{Module: res.Module, Symbol: res.Symbol, Kernel: j >= len(e.frames)-e.kernel})
		}
		structs[i] = Stack{PID: e.pid, TID: e.tid, N: e.n, Truncated: e.truncated, Frames: frames[start:len(frames):len(frames)]}
		out[i] = &structs[i]
	}
	return out
}

// stackEntry is one distinct stack of one thread: frames are indexes into
// Report.res, root first; the last kernel of them are kernel frames.
type stackEntry struct {
	pid, tid  uint32
	frames    []int32
	kernel    int
	truncated bool
	n         uint64
}

// Frame is one resolved frame of a call stack.
type Frame struct {
	Module, Symbol string
	Kernel         bool
}

// Stack is one distinct call stack of one thread, root first, and how many
// ticks had it.
type Stack struct {
	PID, TID  uint32
	Frames    []Frame // root first, the interrupted function last
	N         uint64
	Truncated bool // cut at the depth limit: the root frames are missing
}

// Filter selects the ticks a report covers: processes (and, with Children,
// the processes they create during the trace, by the MTE_FORK records),
// threads, or process names. Empty sets select everything.
type Filter struct {
	Pids     map[uint32]bool
	Children bool
	Tids     map[uint32]bool
	Comms    map[string]bool
}

// Describe says what the filter selects, for report headers.
func (f *Filter) Describe() string {
	var parts []string
	list := func(m map[uint32]bool) string {
		var ids []int
		for id := range m {
			ids = append(ids, int(id))
		}
		sort.Ints(ids)
		var ss []string
		for _, id := range ids {
			ss = append(ss, fmt.Sprint(id))
		}
		return strings.Join(ss, ",")
	}
	if len(f.Pids) > 0 {
		p := "pid " + list(f.Pids)
		if f.Children {
			p += " and the processes they created"
		}
		parts = append(parts, p)
	}
	if len(f.Tids) > 0 {
		parts = append(parts, "tid "+list(f.Tids))
	}
	if len(f.Comms) > 0 {
		var cs []string
		for c := range f.Comms {
			cs = append(cs, c)
		}
		sort.Strings(cs)
		parts = append(parts, "process name "+strings.Join(cs, ","))
	}
	return strings.Join(parts, "; ")
}

func (f *Filter) match(pid, tid uint32, comm func() string) bool {
	if len(f.Pids) > 0 && !f.Pids[pid] {
		return false
	}
	if len(f.Tids) > 0 && !f.Tids[tid] {
		return false
	}
	if len(f.Comms) > 0 && !f.Comms[comm()] {
		return false
	}
	return true
}

// Build reads every record of f in time order, keeping A2N's process table
// up to date, and counts tprof ticks. A decode error part-way through keeps
// what was read and is reported in RecordErr.
func Build(f *nrm2.File, r *a2n.Resolver, onRecord func(rec *trace.Record, res *a2n.Result)) *Report {
	return BuildFiltered(f, r, nil, onRecord)
}

// BuildFiltered is Build for the ticks filt selects (nil: all); the others
// are counted in Filtered (and still passed to onRecord, unresolved).
//
// The report is made by a builder (build.go) and its counter (replay.go).
// Without onRecord and filter, a trace of parallelMin bytes or more is
// read on every CPU at once (parallel.go), else by the one reader
// (serial.go), which also names each tick onRecord is given as it is read.
func BuildFiltered(f *nrm2.File, r *a2n.Resolver, filt *Filter, onRecord func(rec *trace.Record, res *a2n.Result)) *Report {
	return BuildWith(f, r, Options{Filter: filt, OnRecord: onRecord})
}

// BuildWithAddresses is BuildFiltered keeping what Profile needs to give
// each location its address, mapping and source line: every distinct
// address's place (its module and file offset) and its ticks per thread,
// and the call stacks' frames by address before they are named (a copy
// of the frames).
func BuildWithAddresses(f *nrm2.File, r *a2n.Resolver, filt *Filter) *Report {
	return BuildWith(f, r, Options{Filter: filt, Addresses: true})
}

// entry is ticks of one thread (in one state of its process) at one
// result, or at one Loc while naming is deferred (makeCells maps it to its
// result). BuildFiltered's counters; 16 bytes: a count over 2^32 - 1
// takes more than one.
type entry struct {
	pid, tid uint32
	res      int32
	n        uint32
}

// entryBlock is how many entries a block of them holds (blocks: no
// copying as they grow; without pointers: the collector has nothing to
// scan).
const entryBlock = 4096

// makeCells sums the entries (nent of them in blocks all) of the threads
// of half (0 or 1: a hash of the thread's pid and tid) by thread and
// result, and returns the cells and the threads (a cell each). An
// entry's res is a result, or with resOf a Loc whose result resOf gives
// (mapped here, on two goroutines, rather than in a pass of its own over
// the entries).
func makeCells(all [][]entry, nent int32, half uint64, resOf, resMod, resSym []int32) (cells, threads []cell) {
	// pass 1: the runs of each thread, chained in the order met
	type run struct{ lo, hi, next int32 }
	var runs []run
	var first, last []int32 // of each thread: its first and last run
	thrNum := map[uint64]int32{}
	lastThr, cur := uint64(0), int32(-1) // cur: the run being extended (-1: the other half's)
	for i := int32(0); i < nent; i++ {
		e := &all[i/entryBlock][i%entryBlock]
		t := uint64(e.pid)<<32 | uint64(e.tid)
		if i > 0 && t == lastThr {
			if cur >= 0 {
				runs[cur].hi = i + 1
			}
			continue
		}
		lastThr, cur = t, -1
		if (t*fibMul)>>63 != half {
			continue
		}
		n, ok := thrNum[t]
		if !ok {
			n = int32(len(threads))
			thrNum[t] = n
			threads = append(threads, cell{pid: e.pid, tid: e.tid})
			first, last = append(first, -1), append(last, -1)
		}
		cur = int32(len(runs))
		runs = append(runs, run{lo: i, hi: i + 1, next: -1})
		if last[n] < 0 {
			first[n] = cur
		} else {
			runs[last[n]].next = cur
		}
		last[n] = cur
	}
	// pass 2: thread by thread, a result's cell in a table stamped with
	// the thread (its number + 1)
	stamp := make([]int32, len(resMod))
	at := make([]int32, len(resMod))
	cells = make([]cell, 0, nent/4)
	for n, th := range threads {
		mark := int32(n + 1)
		for r := first[n]; r >= 0; r = runs[r].next {
			for i := runs[r].lo; i < runs[r].hi; i++ {
				e := &all[i/entryBlock][i%entryBlock]
				res := e.res
				if resOf != nil {
					res = resOf[res]
				}
				ci := at[res]
				if stamp[res] != mark {
					stamp[res], ci = mark, int32(len(cells))
					at[res] = ci
					cells = append(cells, cell{pid: th.pid, tid: th.tid, mod: resMod[res], sym: resSym[res]})
				}
				cells[ci].n += uint64(e.n)
			}
		}
	}
	return cells, threads
}

// TickCounts returns the ticks per process, thread, module and symbol
// (built on each call: the report's sections do not need it).
func (rep *Report) TickCounts() map[Key]uint64 {
	m := make(map[Key]uint64, len(rep.cells))
	for _, c := range rep.cells {
		m[Key{c.pid, c.tid, rep.names[c.mod], rep.names[c.sym]}] = c.n
	}
	return m
}

// ModuleTicks are a module's ticks in the report: all of them, and those
// its tables could not name (rows "module+0xoff", with or without "(function
// at ...)": a module without symbols for the address).
type ModuleTicks struct {
	Module         string
	Ticks, Unnamed uint64
}

// UnnamedTicks returns the ticks of each module with ticks no symbol
// names, most such ticks first (kernel, JIT and anonymous rows left out),
// and the ticks the report covers.
func (rep *Report) UnnamedTicks() (mods []ModuleTicks, total uint64) {
	type acc struct{ all, unnamed uint64 }
	per := map[int32]*acc{}
	unnamed := map[int32]bool{} // by symbol name index
	for _, c := range rep.cells {
		a := per[c.mod]
		if a == nil {
			a = &acc{}
			per[c.mod] = a
		}
		a.all += c.n
		total += c.n
		u, ok := unnamed[c.sym]
		if !ok {
			mod := rep.names[c.mod]
			u = strings.HasPrefix(mod, "/") && strings.HasPrefix(rep.names[c.sym], path.Base(mod)+"+0x")
			unnamed[c.sym] = u
		}
		if u {
			a.unnamed += c.n
		}
	}
	for mod, a := range per {
		if a.unnamed > 0 {
			mods = append(mods, ModuleTicks{rep.names[mod], a.all, a.unnamed})
		}
	}
	sort.Slice(mods, func(i, j int) bool {
		if mods[i].Unnamed != mods[j].Unnamed {
			return mods[i].Unnamed > mods[j].Unnamed
		}
		return mods[i].Module < mods[j].Module
	})
	return mods, total
}

// Row is one line of a report section.
type Row struct {
	Label string // PID, TID, MOD, SYM
	Ticks uint64
	Name  string
	Sub   []*Row
}

type cell struct {
	pid, tid uint32
	mod, sym int32
	n        uint64
}

// ProcLabel is tprof.out's process name form: name_pid, the pid in
// decimal (as every other report and the Selected header print it), or in
// hex as PI printed it when HexIDs is set.
func (rep *Report) ProcLabel(pid uint32) string {
	if rep.HexIDs {
		return fmt.Sprintf("%s_%x", rep.ProcName[pid], pid)
	}
	return fmt.Sprintf("%s_%d", rep.ProcName[pid], pid)
}

// ProcTitle is a process as the modern forms (pprof, folded stacks, flame
// graphs) name it: "name (pid N)".
func (rep *Report) ProcTitle(pid uint32) string {
	n := rep.ProcName[pid]
	if n == "" {
		n = "?"
	}
	return fmt.Sprintf("%s (pid %d)", n, pid)
}

// ThreadTitle is a thread as the modern forms name it: "name (tid N)".
func (rep *Report) ThreadTitle(pid, tid uint32) string {
	return fmt.Sprintf("%s (tid %d)", rep.threadName(pid, tid, "?"), tid)
}

// threadName is a thread's name, else its process's (a new thread starts
// with its creator's comm), else unknown.
func (rep *Report) threadName(pid, tid uint32, unknown string) string {
	if n := rep.ThreadNm[[2]uint32{pid, tid}]; n != "" {
		return n
	}
	if n := rep.ProcName[pid]; n != "" {
		return n
	}
	return unknown
}

// ThreadLabel is tprof.out's thread name form: name_tid (in decimal, or in
// hex with HexIDs). A thread no record named carries its process's name,
// as a new thread starts with its creator's comm.
func (rep *Report) ThreadLabel(pid, tid uint32) string {
	if rep.HexIDs {
		return fmt.Sprintf("%s_%x", rep.threadName(pid, tid, "tid"), tid)
	}
	return fmt.Sprintf("%s_%d", rep.threadName(pid, tid, "tid"), tid)
}

// Levels of a section.
const (
	LPid = iota
	LTid
	LMod
	LSym
)

// Section aggregates ticks along the given levels, e.g. {LPid, LMod}: the
// cells sorted by the levels' keys, each run of equal keys one row (no
// table per row), each level's rows by ticks, then name.
func (rep *Report) Section(levels ...int) []*Row {
	stack := []*[]*Row{new([]*Row)}
	rep.labelAll()
	rep.eachRow(levels, rep.cellOrder(levels), func(depth int, label string, ticks uint64, name string) {
		r := &Row{Label: label, Ticks: ticks, Name: name}
		stack = stack[:depth+1]
		*stack[depth] = append(*stack[depth], r)
		stack = append(stack, &r.Sub)
	})
	return *stack[0]
}

// levelKey is a cell's key at one level (process, thread, module or
// symbol number).
func levelKey(c *cell, l int) uint32 {
	switch l {
	case LPid:
		return c.pid
	case LTid:
		return c.tid
	case LMod:
		return uint32(c.mod)
	}
	return uint32(c.sym)
}

// cellOrder is the cells' indexes sorted by the keys of levels, in order.
func (rep *Report) cellOrder(levels []int) []int32 {
	return rep.cellOrderWith(levels, &rep.orderKeys)
}

// cellOrderWith is cellOrder with the key arrays of scratch (kept for the
// next order: fresh memory is dear; one scratch a goroutine).
func (rep *Report) cellOrderWith(levels []int, scratch *[2][]sortKey) []int32 {
	// Each cell's level keys packed in two words (up to four levels), so
	// that the sort compares two integers.
	if len(scratch[0]) != len(rep.cells) {
		*scratch = [2][]sortKey{make([]sortKey, len(rep.cells)), make([]sortKey, len(rep.cells))}
	}
	keys := scratch[0]
	var shifts [4]uint
	for d := range levels[:min(len(levels), 4)] {
		shifts[d] = uint(32 * (1 - d%2))
	}
	for i := range rep.cells {
		c := &rep.cells[i]
		var k [2]uint64
		for d, l := range levels[:min(len(levels), 4)] {
			k[d/2] |= uint64(levelKey(c, l)) << shifts[d]
		}
		keys[i] = sortKey{k[0], k[1], int32(i)}
	}
	if len(levels) <= 4 {
		// The keys are the whole order: a radix sort (a comparison
		// sort of a many-process trace's cells was a tenth of post).
		keys = radixSortKeys(keys, scratch[1])
		order := make([]int32, len(keys))
		for i, k := range keys {
			order[i] = k.i
		}
		return order
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		ca, cb := &rep.cells[a.i], &rep.cells[b.i]
		for _, l := range levels[4:] {
			if c := cmp.Compare(levelKey(ca, l), levelKey(cb, l)); c != 0 {
				return c
			}
		}
		return 0
	})
	order := make([]int32, len(keys))
	for i, k := range keys {
		order[i] = k.i
	}
	return order
}

// sortKey is a cell's level keys in two words and the cell's index.
type sortKey struct {
	hi, lo uint64
	i      int32
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

// radixSortKeys sorts a by (hi, lo), keeping the order of equal keys
// (using tmp, of a's length), and returns the sorted slice (a or tmp):
// least significant byte first, skipping the bytes in which all keys agree.
func radixSortKeys(a, tmp []sortKey) []sortKey {
	if len(a) < 2 {
		return a
	}
	var counts [16][256]int
	for i := range a {
		lo, hi := a[i].lo, a[i].hi
		counts[0][byte(lo)]++
		counts[1][byte(lo>>8)]++
		counts[2][byte(lo>>16)]++
		counts[3][byte(lo>>24)]++
		counts[4][byte(lo>>32)]++
		counts[5][byte(lo>>40)]++
		counts[6][byte(lo>>48)]++
		counts[7][byte(lo>>56)]++
		counts[8][byte(hi)]++
		counts[9][byte(hi>>8)]++
		counts[10][byte(hi>>16)]++
		counts[11][byte(hi>>24)]++
		counts[12][byte(hi>>32)]++
		counts[13][byte(hi>>40)]++
		counts[14][byte(hi>>48)]++
		counts[15][byte(hi>>56)]++
	}
	src, dst := a, tmp
	for d := 0; d < 16; d++ {
		shift := uint(8 * (d % 8))
		first := src[0].lo
		if d >= 8 {
			first = src[0].hi
		}
		pos, skip := radixPass(&counts[d], len(src), byte(first>>shift))
		if skip {
			continue
		}
		if d < 8 {
			for i := range src {
				b := byte(src[i].lo >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		} else {
			for i := range src {
				b := byte(src[i].hi >> shift)
				dst[pos[b]] = src[i]
				pos[b]++
			}
		}
		src, dst = dst, src
	}
	return src
}

// eachRow calls row for every row of the section of levels, parents
// before their children, each level's rows by ticks, then name. order is
// the cells sorted so that the cells of one row are together at every
// level (cellOrder of levels, or of levels followed by more).
func (rep *Report) eachRow(levels []int, order []int32, row func(depth int, label string, ticks uint64, name string)) {
	scratch := make([][]rowGroup, len(levels))
	tmps := make([][]rowGroup, len(levels)) // radixGroups' output, a level's own
	var keys [2][]sortKey                   // and its keys' (one call at a time)
	var walk func(lo, hi int32, d int)
	walk = func(lo, hi int32, d int) {
		l := levels[d]
		gs := scratch[d][:0]
		packed := true
		for i := lo; i < hi; {
			c := &rep.cells[order[i]]
			k := levelKey(c, l)
			j := i
			var n uint64
			for j < hi && levelKey(&rep.cells[order[j]], l) == k {
				n += rep.cells[order[j]].n
				j++
			}
			gs = append(gs, rowGroup{key: uint64(^uint32(n))<<32 | uint64(rep.levelRank(c, l)), lo: i, hi: j, n: n})
			packed = packed && n <= math.MaxUint32
			i = j
		}
		if packed && len(gs) >= radixGroupsMin {
			if cap(tmps[d]) < len(gs) {
				tmps[d] = make([]rowGroup, len(gs))
			}
			gs, tmps[d] = radixGroups(gs, tmps[d][:len(gs)], &keys), gs
		} else {
			sortGroups(gs, packed)
		}
		label := levelLabels[l]
		for _, g := range gs {
			row(d, label, g.n, rep.levelName(&rep.cells[order[g.lo]], l))
			if d+1 < len(levels) {
				walk(g.lo, g.hi, d+1)
			}
		}
		scratch[d] = gs[:0]
	}
	if len(levels) > 0 {
		walk(0, int32(len(order)), 0)
	}
}

// rowGroup is the cells order[lo:hi] of one row and its ticks; key is
// its order in one word: ticks down (when they fit in 32 bits), then its
// name's rank (labelAll: compares as the name) in the low 32 bits.
type rowGroup struct {
	key    uint64
	n      uint64
	lo, hi int32
}

// sortGroups puts rows in order: most ticks first, equal ticks by name.
// With packed keys (every group's ticks in 32 bits) a comparison is one
// of integers, and a few rows (most groups of a many-process report) are
// sorted by insertion; many rows go to radixGroups.
func sortGroups(gs []rowGroup, packed bool) {
	if !packed {
		slices.SortFunc(gs, func(a, b rowGroup) int {
			if a.n != b.n {
				return cmp.Compare(b.n, a.n)
			}
			return cmp.Compare(uint32(a.key), uint32(b.key))
		})
		return
	}
	if len(gs) > 16 {
		slices.SortFunc(gs, func(a, b rowGroup) int { return cmp.Compare(a.key, b.key) })
		return
	}
	for i := 1; i < len(gs); i++ {
		g := gs[i]
		j := i
		for ; j > 0 && gs[j-1].key > g.key; j-- {
			gs[j] = gs[j-1]
		}
		gs[j] = g
	}
}

// radixGroupsMin is the number of rows from which radixGroups sorts them
// (the symbols of a module over all processes, of the kernel in one
// process: thousands of rows, whose comparison sorts were a fifth of
// writing a many-process report).
const radixGroupsMin = 128

// radixGroups sorts packed groups by key (as sortGroups) into tmp (of
// gs's length) and returns it: radixSortKeys of their keys (in the low
// word, their places as indexes), keys the scratch of those.
func radixGroups(gs, tmp []rowGroup, keys *[2][]sortKey) []rowGroup {
	if cap(keys[0]) < len(gs) {
		*keys = [2][]sortKey{make([]sortKey, len(gs)), make([]sortKey, len(gs))}
	}
	k := keys[0][:len(gs)]
	for i := range gs {
		k[i] = sortKey{lo: gs[i].key, i: int32(i)}
	}
	for j, sk := range radixSortKeys(k, keys[1][:len(gs)]) {
		tmp[j] = gs[sk.i]
	}
	return tmp
}

// labelAll fills levelName's tables of process and thread labels for
// every cell and levelRank's ranks of every row name (after that both
// only read them). A rank orders rows as their names would: equal names,
// equal ranks (comparing strings was a tenth of a many-process report).
func (rep *Report) labelAll() {
	if rep.nameRank != nil {
		return
	}
	rep.labelThreads()
	rep.rankNames()
}

// labelThreads is labelAll's labels of processes and threads and their
// ranks.
func (rep *Report) labelThreads() {
	cells := rep.threads // a cell of each thread (ten times fewer than the cells)
	if cells == nil {
		cells = rep.cells
	}
	for i := range cells {
		rep.levelName(&cells[i], LPid)
		rep.levelName(&cells[i], LTid)
	}
	rep.procRank = rankLabels(rep.procLabels)
	rep.threadRank = rankLabels(rep.threadLabels)
}

// rankNames is labelAll's ranks of the module and symbol names (made
// beside labelThreads by WritePI: they share nothing).
func (rep *Report) rankNames() {
	if rep.nameRank == nil {
		rep.nameRank = rankStrings(len(rep.names), func(i int) string { return rep.names[i] })
	}
}

// rankLabels is the rank of each label of labels among them (rankStrings).
func rankLabels[K comparable](labels map[K]string) map[K]uint32 {
	keys := make([]K, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	ranks := rankStrings(len(keys), func(i int) string { return labels[keys[i]] })
	out := make(map[K]uint32, len(keys))
	for i, k := range keys {
		out[k] = ranks[i]
	}
	return out
}

// rankStrings returns the rank of each of n strings in their sorted
// order, equal strings one rank.
func rankStrings(n int, str func(i int) string) []uint32 {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return strings.Compare(str(int(a)), str(int(b))) })
	rank := make([]uint32, n)
	r := uint32(0)
	for i, j := range idx {
		if i > 0 && str(int(j)) != str(int(idx[i-1])) {
			r++
		}
		rank[j] = r
	}
	return rank
}

// levelRank is the rank of a cell's row name at level l (labelAll).
func (rep *Report) levelRank(c *cell, l int) uint32 {
	switch l {
	case LPid:
		return rep.procRank[c.pid]
	case LTid:
		return rep.threadRank[[2]uint32{c.pid, c.tid}]
	case LMod:
		return rep.nameRank[c.mod]
	}
	return rep.nameRank[c.sym]
}

var levelLabels = [...]string{LPid: "PID", LTid: "TID", LMod: "MOD", LSym: "SYM"}

// levelName is the name of a cell's row at level l.
func (rep *Report) levelName(c *cell, l int) string {
	switch l {
	case LPid:
		if rep.procLabels == nil {
			rep.procLabels = map[uint32]string{}
		}
		n, ok := rep.procLabels[c.pid]
		if !ok {
			n = rep.ProcLabel(c.pid)
			rep.procLabels[c.pid] = n
		}
		return n
	case LTid:
		if rep.threadLabels == nil {
			rep.threadLabels = map[[2]uint32]string{}
		}
		k := [2]uint32{c.pid, c.tid}
		n, ok := rep.threadLabels[k]
		if !ok {
			n = rep.ThreadLabel(c.pid, c.tid)
			rep.threadLabels[k] = n
		}
		return n
	case LMod:
		return rep.names[c.mod]
	}
	return rep.names[c.sym]
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
