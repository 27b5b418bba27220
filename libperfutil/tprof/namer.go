package tprof

import "perfinsp/libperfutil/a2n"

// locBlockRef is Locs to name (a full block, or a piece of the last)
// and the number of the first.
type locBlockRef struct {
	first int
	b     []a2n.Loc
}

// lastPiece is the size of the pieces the last block of Locs is named
// in (by the namer and the goroutine that waits for it).
const lastPiece = 512

// blockNames is the names of a locBlockRef's Locs (indexes from the
// namer's intern).
type blockNames struct {
	first int
	ids   []int32
}

// locNamer names Locs. The Locs of a module that one symbol names are
// named once, found by the symbol's start, the last module's table at
// hand (Finish demangles and copies the name each time, and interning
// its result hashed two strings: three quarters of the naming of a
// many-process trace's 47 k Locs). One goroutine a locNamer.
type locNamer struct {
	r      *a2n.Resolver
	intern func(a2n.Result) int32
	bySym  map[string]map[uint64]int32
	path   string
	mod    *a2n.Module
	syms   map[uint64]int32
}

func newLocNamer(r *a2n.Resolver, intern func(a2n.Result) int32) *locNamer {
	return &locNamer{r: r, intern: intern, bySym: map[string]map[uint64]int32{}}
}

// block names the Locs of blk.
func (n *locNamer) block(blk locBlockRef) blockNames {
	ids := make([]int32, len(blk.b))
	for i := range blk.b {
		ids[i] = n.name(&blk.b[i])
	}
	return blockNames{blk.first, ids}
}

// name is l's name, interned.
func (n *locNamer) name(l *a2n.Loc) int32 {
	if p := l.Module(); p != "" {
		if n.mod == nil || p != n.path {
			n.path, n.mod = p, n.r.LocModule(*l)
			if n.syms = n.bySym[p]; n.syms == nil {
				n.syms = map[uint64]int32{}
				n.bySym[p] = n.syms
			}
		}
		if start, ok := n.mod.SymbolStart(l.FileOffset()); ok && n.mod.Err == nil {
			idx, known := n.syms[start]
			if !known {
				idx = n.intern(n.r.Finish(*l))
				n.syms[start] = idx
			}
			return idx
		}
	}
	return n.intern(n.r.Finish(*l))
}
