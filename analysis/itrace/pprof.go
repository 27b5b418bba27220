package itrace

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"perfinsp/analysis/pprofloc"
)

// The ITrace as a pprof profile (post --itrace-pprof): one sample type,
// instructions, so that flat is a function's exclusive instructions and
// cum its inclusive ones. With a Placer, every frame has an address in
// its module's file, as objdump shows it, in a mapping of that file with
// its build id, and the source line there: a caller's frame is at its
// call instruction, the leaf's instructions at each instruction of the
// blocks it ran (its count spread as the blocks ran them), so that
// pprof's -list, -disasm and source views show the counts.

// Placer places a process's traced addresses in their modules' ELF files
// and reads those files, for a profile with addresses (PlaceStacks).
type Placer interface {
	// Place is the module and the file's virtual address of a traced
	// address of pid, as of the record being replayed (ok false: in no
	// module's file).
	Place(pid uint32, addr uint64) (mod string, va uint64, ok bool)
	// Spread gives at each instruction of a block of mod and its count:
	// the block's first instruction is at va, its last at offset last
	// (-1: not known), and it ran runs times for insns instructions. It
	// reports false (and gives nothing) where the code cannot be read or
	// decoded or does not fit the counts.
	Spread(mod string, va uint64, last int64, runs, insns uint64, at func(va, n uint64)) bool
	// Segment is the part of mod's file loaded with va in it: its
	// virtual addresses from start to limit, start at offset in the file,
	// and the file's build id (ok false: not known).
	Segment(mod string, va uint64) (start, limit, offset uint64, buildID string, ok bool)
	// Line is the source file and line of va in mod (ok false: not known).
	Line(mod string, va uint64) (file string, line int, ok bool)
}

// filePlace is a traced address in its module's file: mod is the index
// of the module in the stacks' modules plus one (0: not placed).
type filePlace struct {
	mod int32
	va  uint64
}

// leafBlock is a block run as a call path's leaf: the traced address of
// its first instruction and the offset of its last (-1: not known).
type leafBlock struct {
	addr uint64
	last int64
}

// leafRuns is how often a leaf block ran, its instructions in all and
// where its first instruction is in its module's file (placed the first
// time it ran: a path's function, named with its module, holds no other
// module's code at that address later).
type leafRuns struct {
	runs, insns uint64
	at          filePlace
}

// PlaceStacks gives the stacks (EnableStacks) addresses: WritePprof then
// writes them. Call it before the first Apply.
func (rep *Report) PlaceStacks(p Placer) { rep.placer = p }

// place places a traced address of pid.
func (rep *Report) place(pid uint32, addr uint64) filePlace {
	mod, va, ok := rep.placer.Place(pid, addr)
	if !ok {
		return filePlace{}
	}
	t := rep.stacks
	i, ok := t.modIdx[mod]
	if !ok {
		t.mods = append(t.mods, mod)
		i = int32(len(t.mods))
		t.modIdx[mod] = i
	}
	return filePlace{mod: i, va: va}
}

// addLeafBlock counts th's block (count instructions, its last at offset
// last) as a block of n's leaf.
func (rep *Report) addLeafBlock(th *threadState, n *stackNode, count uint32, last int64) {
	if n.blocks == nil {
		n.blocks = map[leafBlock]*leafRuns{}
	}
	k := leafBlock{th.start, last}
	r := n.blocks[k]
	if r == nil {
		r = &leafRuns{at: rep.place(th.pid, th.start)}
		n.blocks[k] = r
	}
	r.runs++
	r.insns += uint64(count)
}

// WritePprof writes a pprof profile whose one sample type is instructions
// (count): flat = exclusive, cum = inclusive instructions of the ITrace.
func (rep *Report) WritePprof(out io.Writer) error {
	if rep.stacks == nil {
		return fmt.Errorf("itrace: stacks were not collected (EnableStacks)")
	}
	it := pprofloc.ValueType{Type: "instructions", Unit: "count"}
	w := &pprofWriter{rep: rep, s: pprofloc.NewStream(out, []pprofloc.ValueType{it}, it, 1), segs: map[int32][]segment{}, at: map[filePlace]uint64{}}
	if rep.placer != nil {
		w.busiestFirst()
	}
	for _, p := range rep.pids() {
		r := rep.stacks.roots[p]
		sortKids(r.kids)
		for _, c := range r.kids {
			w.node(c)
		}
	}
	return w.s.Close()
}

// pprofWriter writes the call paths as samples.
type pprofWriter struct {
	rep     *Report
	s       *pprofloc.Stream
	callers []uint64 // the locations of the path's frames but the leaf, root first
	segs    map[int32][]segment
	at      map[filePlace]uint64 // a leaf's instructions by address
	places  []filePlace
	stack   []uint64
}

// segment is a mapping of a module: its addresses and mapping ID.
type segment struct {
	start, limit, id uint64
}

// busiestFirst makes the mapping of the module that ran the most
// instructions the first, which pprof takes for the main binary (its
// File: line): the segment of its lowest leaf address.
func (w *pprofWriter) busiestFirst() {
	t := w.rep.stacks
	insns := make([]uint64, len(t.mods)+1)
	low := make([]uint64, len(t.mods)+1)
	for _, n := range t.kids {
		for _, r := range n.blocks {
			insns[r.at.mod] += r.insns
			if r.at.mod > 0 && (low[r.at.mod] == 0 || r.at.va < low[r.at.mod]) {
				low[r.at.mod] = r.at.va
			}
		}
	}
	best := int32(0)
	for i := int32(1); i < int32(len(insns)); i++ { // (insns[0]: blocks in no file)
		if insns[i] > insns[best] || insns[i] == insns[best] && best > 0 && t.mods[i-1] < t.mods[best-1] {
			best = i
		}
	}
	if best > 0 {
		w.mapping(filePlace{best, low[best]}, t.mods[best-1])
	}
}

// node writes n's samples, then its callees'.
func (w *pprofWriter) node(n *stackNode) {
	if n.count > 0 {
		w.leaf(n)
	}
	sortKids(n.kids)
	depth := len(w.callers)
	for _, c := range n.kids {
		w.callers = append(w.callers[:depth], w.loc(n.fn, c.at))
		w.node(c)
	}
	w.callers = w.callers[:depth]
}

// leaf writes the samples of n's own instructions: one per instruction
// address of its blocks, the rest (blocks in no file) at its function.
func (w *pprofWriter) leaf(n *stackNode) {
	pid := pprofloc.Label{Key: "pid", Num: int64(n.pid)}
	rest := n.count
	if w.rep.placer != nil {
		clear(w.at)
		for b, r := range n.blocks {
			p := r.at
			if p.mod == 0 {
				continue // in no file: at the function
			}
			rest -= r.insns
			mod := w.rep.stacks.mods[p.mod-1]
			if !w.rep.placer.Spread(mod, p.va, b.last, r.runs, r.insns, func(va, k uint64) { w.at[filePlace{p.mod, va}] += k }) {
				w.at[p] += r.insns
			}
		}
		w.places = w.places[:0]
		for p := range w.at {
			w.places = append(w.places, p)
		}
		slices.SortFunc(w.places, func(a, b filePlace) int { return cmp.Or(cmp.Compare(a.mod, b.mod), cmp.Compare(a.va, b.va)) })
		for _, p := range w.places {
			w.sample(w.loc(n.fn, p), w.at[p], pid)
		}
	}
	if rest > 0 {
		w.sample(w.loc(n.fn, filePlace{}), rest, pid)
	}
}

func (w *pprofWriter) sample(leaf, count uint64, pid pprofloc.Label) {
	w.stack = append(append(w.stack[:0], w.callers...), leaf)
	w.s.Sample(w.stack, []int64{int64(count)}, pid)
}

// loc is the location of function fn at p (not placed: the function's
// one location with no address).
func (w *pprofWriter) loc(fn string, p filePlace) uint64 {
	rep := w.rep
	var file string
	var line int64
	if fs := rep.Funcs[fn]; fs != nil {
		file, line = fs.File, int64(fs.Line)
	}
	if p.mod == 0 {
		return w.s.Loc(fn, rep.display(fn), file, line)
	}
	mod := rep.stacks.mods[p.mod-1]
	m := w.mapping(p, mod)
	if m == 0 {
		return w.s.Loc(fn, rep.display(fn), file, line)
	}
	key := fn
	var at int64
	if f, n, ok := rep.placer.Line(mod, p.va); ok {
		if f != file {
			// code of another file (inlined): the function as pprof
			// sees it there, for the line to be read in that file
			key, file, line = fn+"\x00"+f, f, 0
		}
		at = int64(n)
	}
	return w.s.AddrLoc(m, p.va, w.s.Func(key, rep.display(fn), file, line), at)
}

// mapping is the ID of the mapping of p's address in mod (0: none known).
func (w *pprofWriter) mapping(p filePlace, mod string) uint64 {
	for _, s := range w.segs[p.mod] {
		if p.va >= s.start && p.va < s.limit {
			return s.id
		}
	}
	start, limit, off, id, ok := w.rep.placer.Segment(mod, p.va)
	if !ok || p.va < start || p.va >= limit {
		return 0
	}
	s := segment{start: start, limit: limit, id: w.s.Mapping(mod, id, start, limit, off)}
	w.segs[p.mod] = append(w.segs[p.mod], s)
	return s.id
}
