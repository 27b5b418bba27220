package tprof

import "perfinsp/libperfutil/a2n"

// locSet numbers distinct Locs: a module's by its file offset (one-word
// keys: Go's fast map path, the last module's table kept at hand), the
// others (kernel, JIT, unknown memory: named already) by their name.
type locSet struct {
	byOff    []map[uint64]int32 // per module number
	modNum   map[string]int32
	lastMod  string
	lastOffs map[uint64]int32
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
	idx, ok := t[off]
	if !ok {
		idx = add(l)
		t[off] = idx
	}
	return idx
}

// indexModule is index of the Loc of module m's file offset off, which
// loc makes (called only when it is new: most located addresses were met
// before).
func (s *locSet) indexModule(m string, off uint64, loc func() a2n.Loc, add func(l a2n.Loc) int32) int32 {
	t := s.offsets(m)
	idx, ok := t[off]
	if !ok {
		idx = add(loc())
		t[off] = idx
	}
	return idx
}

// offsets is module m's table of Locs by file offset.
func (s *locSet) offsets(m string) map[uint64]int32 {
	if m != s.lastMod || s.lastOffs == nil {
		mn := s.module(m)
		for int(mn) >= len(s.byOff) {
			s.byOff = append(s.byOff, nil)
		}
		if s.byOff[mn] == nil {
			s.byOff[mn] = make(map[uint64]int32, 256)
		}
		s.lastMod, s.lastOffs = m, s.byOff[mn]
	}
	return s.lastOffs
}
