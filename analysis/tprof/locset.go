package tprof

import (
	"math/bits"

	"perfinsp/analysis/a2n"
)

// locSet numbers distinct Locs: a module's by its file offset (one-word
// keys: Go's fast map path, the last module's table kept at hand), the
// others (kernel, JIT, unknown memory: named already) by their name.
type locSet struct {
	byOff    []*offTable // per module number
	modNum   map[string]int32
	lastMod  string
	lastOffs *offTable
	byName   map[[2]string]int32
	newMod   func(m string) // called with each module met first (nil: none)
}

// module is m's number, given on first sight.
func (s *locSet) module(m string) int32 {
	mn, ok := s.modNum[m]
	if !ok {
		if s.modNum == nil {
			s.modNum = map[string]int32{}
		}
		mn = int32(len(s.modNum))
		s.modNum[m] = mn
		if s.newMod != nil {
			s.newMod(m)
		}
	}
	return mn
}

// index is l's number: that of the Loc met before at the same place, or
// a new one from add. (Locs are passed by value: a pointer to a caller's
// Loc given to add made every Loc a heap allocation.)
func (s *locSet) index(l a2n.Loc, add func(l a2n.Loc) int32) int32 {
	m := l.Module()
	if m == "" {
		res := l.Final()
		k := [2]string{res.Module, res.Symbol}
		idx, ok := s.byName[k]
		if !ok {
			if s.byName == nil {
				s.byName = map[[2]string]int32{}
			}
			idx = add(l)
			s.byName[k] = idx
		}
		return idx
	}
	off := l.FileOffset()
	t := s.offsets(m)
	p, ok := t.find(off)
	if !ok {
		p = t.put(p, off, add(l))
	}
	return t.vals[p]
}

// indexModule is index of the Loc of module m's file offset off, which
// loc makes (called only when it is new: most located addresses were met
// before).
func (s *locSet) indexModule(m string, off uint64, loc func() a2n.Loc, add func(l a2n.Loc) int32) int32 {
	t := s.offsets(m)
	p, ok := t.find(off)
	if !ok {
		p = t.put(p, off, add(loc()))
	}
	return t.vals[p]
}

// offsets is module m's table of Locs by file offset.
func (s *locSet) offsets(m string) *offTable {
	if m != s.lastMod || s.lastOffs == nil {
		mn := s.module(m)
		for int(mn) >= len(s.byOff) {
			s.byOff = append(s.byOff, nil)
		}
		if s.byOff[mn] == nil {
			s.byOff[mn] = newOffTable(256)
		}
		s.lastMod, s.lastOffs = m, s.byOff[mn]
	}
	return s.lastOffs
}

// offTable maps a module's file offsets to Loc numbers: open addressing,
// linear probing from a Fibonacci hash, at most half full (a lookup a
// count of the replay, on a many-process report's critical path: a Go
// map costs measurably more than this one's single probe, mostly).
type offTable struct {
	keys  []uint64 // offset + 1; 0: free
	vals  []int32
	used  int
	shift uint // 64 - log2(len(keys))
}

func newOffTable(n int) *offTable {
	t := &offTable{}
	t.alloc(max(16, 1<<bits.Len(uint(n-1))))
	return t
}

func (t *offTable) alloc(n int) {
	t.keys, t.vals, t.shift = make([]uint64, n), make([]int32, n), uint(64-bits.TrailingZeros(uint(n)))
}

// find returns off's slot and true, or the free slot it would go in and
// false.
func (t *offTable) find(off uint64) (int, bool) {
	k, mask := off+1, uint64(len(t.keys)-1)
	for i := (k * fibMul) >> t.shift; ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

// put stores (off, v) in free slot p (from find) and returns its slot
// (another when the table grew).
func (t *offTable) put(p int, off uint64, v int32) int {
	t.keys[p], t.vals[p] = off+1, v
	t.used++
	if 2*t.used <= len(t.keys) {
		return p
	}
	keys, vals := t.keys, t.vals
	t.alloc(2 * len(keys))
	for i, k := range keys {
		if k != 0 {
			q, _ := t.find(k - 1)
			t.keys[q], t.vals[q] = k, vals[i]
		}
	}
	p, _ = t.find(off)
	return p
}
