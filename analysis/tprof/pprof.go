package tprof

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/google/pprof/profile"

	"perfinsp/analysis/a2n"
)

// addrTicks is what BuildWithAddresses keeps for the profile: the Locs
// (each distinct place met: a module and file offset, or a final name),
// their names (indexes into Report.res), the counters (entries whose res
// is a Loc) and the call stacks by Loc.
type addrTicks struct {
	locs    [][]a2n.Loc
	names   []int32
	entries [][]entry
	nent    int32
	r       *a2n.Resolver
	stacks  []locStack
}

func (a *addrTicks) loc(i int32) *a2n.Loc { return &a.locs[i/locBlock][i%locBlock] }

// addrProfile makes the profile's mappings, functions and locations.
//
// A module's location has the address it was met at, in a mapping of the
// module as the process that met it first had it (start, limit, file
// offset: the real ones, as /proc/PID/maps gave them), with the module's
// build id, so that pprof finds the binary's instructions (-disasm) by
// address. Its line is the address's source line from the module's DWARF
// (or its debug file's); a function's file and start line are those of
// its first instruction, so -list shows the source, not the binary.
// Kernel, JIT and unnamed memory keep a location per name, in a mapping
// named for them (no addresses: no file pprof could read).
type addrProfile struct {
	rep      *Report
	a        *addrTicks
	p        *profile.Profile
	maps     map[mapKey]*profile.Mapping
	funcs    map[[2]string]*profile.Function
	byLoc    map[int32]*profile.Location
	byName   map[int32]*profile.Location // a final name's location, by its result
	modTicks map[string]uint64
	lines    map[*profile.Mapping]bool // mappings that have a source line
}

type mapKey struct {
	file          string
	start, offset uint64
}

func (rep *Report) profileByAddress() *profile.Profile {
	p, period := rep.newProfile()
	ap := &addrProfile{rep: rep, a: rep.addrs, p: p, maps: map[mapKey]*profile.Mapping{}, funcs: map[[2]string]*profile.Function{},
		byLoc: map[int32]*profile.Location{}, byName: map[int32]*profile.Location{}, modTicks: map[string]uint64{}, lines: map[*profile.Mapping]bool{}}
	labels := map[[2]uint32]sampleLabels{}
	labelsOf := func(pid, tid uint32, truncated bool) sampleLabels {
		k := [2]uint32{pid, tid}
		l, ok := labels[k]
		if !ok {
			l.lab = map[string][]string{"process": {rep.ProcTitle(pid)}, "thread": {rep.ThreadTitle(pid, tid)}}
			l.num = map[string][]int64{"pid": {int64(pid)}, "tid": {int64(tid)}}
			labels[k] = l
		}
		if truncated {
			lab := map[string][]string{"truncated": {"yes"}}
			for k, v := range l.lab {
				lab[k] = v
			}
			l.lab = lab
		}
		return l
	}
	if len(rep.stk) > 0 {
		// Stacks whose frames have the same locations (places of a
		// module that could not be read have one a name) are one sample.
		same := map[string]*profile.Sample{}
		var key []byte
		for _, st := range ap.a.stacks {
			ls := make([]*profile.Location, 0, len(st.frames))
			key = append(key[:0], byte(st.pid), byte(st.pid>>8), byte(st.pid>>16), byte(st.pid>>24), byte(st.tid), byte(st.tid>>8), byte(st.tid>>16), byte(st.tid>>24), boolByte(st.truncated))
			for j := len(st.frames) - 1; j >= 0; j-- {
				loc := ap.location(st.frames[j])
				ls = append(ls, loc)
				key = binary.AppendUvarint(key, loc.ID)
			}
			ap.modTicks[rep.res[ap.a.names[st.frames[len(st.frames)-1]]].Module] += st.n
			if s := same[string(key)]; s != nil {
				s.Value[0] += int64(st.n)
				s.Value[1] += int64(st.n) * period
				continue
			}
			l := labelsOf(st.pid, st.tid, st.truncated)
			s := &profile.Sample{Location: ls, Value: []int64{int64(st.n), int64(st.n) * period}, Label: l.lab, NumLabel: l.num}
			same[string(key)] = s
			p.Sample = append(p.Sample, s)
		}
		// most ticks first, as the report's stacks (the order met kept among equals)
		slices.SortStableFunc(p.Sample, func(x, y *profile.Sample) int { return cmp.Compare(y.Value[0], x.Value[0]) })
		sortMappings(p, ap.modTicks)
		return p
	}
	// Flat: one sample per thread and address, in the order of thread,
	// module, symbol and address.
	type key struct {
		pid, tid uint32
		loc      int32
	}
	sum := map[key]uint64{}
	a := ap.a
	for i := int32(0); i < a.nent; i++ {
		e := &a.entries[i/entryBlock][i%entryBlock]
		sum[key{e.pid, e.tid, e.res}] += uint64(e.n)
	}
	keys := make([]key, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y key) int {
		if c := cmp.Compare(x.pid, y.pid); c != 0 {
			return c
		}
		if c := cmp.Compare(x.tid, y.tid); c != 0 {
			return c
		}
		rx, ry := &rep.res[a.names[x.loc]], &rep.res[a.names[y.loc]]
		if c := cmp.Compare(rx.Module, ry.Module); c != 0 {
			return c
		}
		if c := cmp.Compare(rx.Symbol, ry.Symbol); c != 0 {
			return c
		}
		return cmp.Compare(ap.addrOf(x.loc), ap.addrOf(y.loc))
	})
	type sampleKey struct {
		pid, tid uint32
		loc      *profile.Location
	}
	same := map[sampleKey]*profile.Sample{}
	for _, k := range keys {
		n := sum[k]
		loc := ap.location(k.loc)
		ap.modTicks[rep.res[a.names[k.loc]].Module] += n
		if s := same[sampleKey{k.pid, k.tid, loc}]; s != nil { // places of one name (no file to read)
			s.Value[0] += int64(n)
			s.Value[1] += int64(n) * period
			continue
		}
		l := labelsOf(k.pid, k.tid, false)
		s := &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{int64(n), int64(n) * period}, Label: l.lab, NumLabel: l.num}
		same[sampleKey{k.pid, k.tid, loc}] = s
		p.Sample = append(p.Sample, s)
	}
	sortMappings(p, ap.modTicks)
	return p
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

type sampleLabels struct {
	lab map[string][]string
	num map[string][]int64
}

// addrOf is the address a Loc's location gets (0: none).
func (ap *addrProfile) addrOf(i int32) uint64 {
	l := ap.a.loc(i)
	if l.Module() == "" {
		return 0
	}
	return l.Addr()
}

// location is the profile location of Loc i, made on first use.
func (ap *addrProfile) location(i int32) *profile.Location {
	if loc := ap.byLoc[i]; loc != nil {
		return loc
	}
	resIdx := ap.a.names[i]
	res := &ap.rep.res[resIdx]
	l := ap.a.loc(i)
	var mod *a2n.Module
	if l.Module() != "" {
		mod = ap.a.r.LocModule(*l)
	}
	if mod == nil || mod.Err != nil {
		// no file to read: one location per name
		loc := ap.byName[resIdx]
		if loc == nil {
			m := ap.mapping(mapKey{file: res.Module}, nil)
			loc = &profile.Location{ID: uint64(len(ap.p.Location) + 1), Mapping: m, Line: []profile.Line{{Function: ap.function(res, nil, 0)}}}
			ap.p.Location = append(ap.p.Location, loc)
			ap.byName[resIdx] = loc
		}
		ap.byLoc[i] = loc
		return loc
	}
	start, _, off := l.Mapping()
	m := ap.mapping(mapKey{file: l.Module(), start: start, offset: off}, l)
	m.BuildID = mod.BuildID()
	fn := ap.function(res, mod, l.FileOffset())
	lines := []profile.Line{{Function: fn}}
	if va, ok := mod.VAddr(l.FileOffset()); ok {
		if file, n, ok := mod.Line(va); ok {
			lines = ap.inlinedLines(res.Module, fn, mod.InlineCalls(va), file, int64(n))
			m.HasFilenames, m.HasLineNumbers = true, true
		}
	}
	loc := &profile.Location{ID: uint64(len(ap.p.Location) + 1), Mapping: m, Address: l.Addr(), Line: lines}
	ap.p.Location = append(ap.p.Location, loc)
	ap.byLoc[i] = loc
	return loc
}

// inlinedLines are the lines of an address in fn whose source line is
// file:n, inside the calls inlined there (outermost first): the
// innermost function at file:n first, then each caller at the line of
// its call, fn last, as pprof lays out inlined frames.
func (ap *addrProfile) inlinedLines(module string, fn *profile.Function, calls []a2n.InlineCall, file string, n int64) []profile.Line {
	lines := make([]profile.Line, 0, len(calls)+1)
	for i := len(calls) - 1; i >= 0; i-- {
		lines = append(lines, profile.Line{Function: ap.inlinedFunction(module, calls[i].Function, file), Line: n})
		file, n = calls[i].File, int64(calls[i].Line)
	}
	if fn.Filename == "" {
		fn.Filename = file
	}
	return append(lines, profile.Line{Function: fn, Line: n})
}

// inlinedFunction is the profile function of a function of module that
// was inlined (its file: where one of its lines is), made on first use.
func (ap *addrProfile) inlinedFunction(module, name, file string) *profile.Function {
	k := [2]string{module, name}
	if fn := ap.funcs[k]; fn != nil {
		return fn
	}
	fn := &profile.Function{ID: uint64(len(ap.p.Function) + 1), Name: name, SystemName: name, Filename: file}
	ap.funcs[k] = fn
	ap.p.Function = append(ap.p.Function, fn)
	return fn
}

// mapping is the profile mapping of k (l: a Loc in it, for its range;
// nil: a mapping with no addresses), made on first use.
func (ap *addrProfile) mapping(k mapKey, l *a2n.Loc) *profile.Mapping {
	if m := ap.maps[k]; m != nil {
		return m
	}
	m := &profile.Mapping{ID: uint64(len(ap.p.Mapping) + 1), File: k.file, HasFunctions: true}
	if l != nil {
		start, size, off := l.Mapping()
		m.Start, m.Limit, m.Offset = start, start+size, off
	}
	ap.maps[k] = m
	ap.p.Mapping = append(ap.p.Mapping, m)
	return m
}

// function is the profile function of res's module and symbol, made on
// first use: its source file and start line those of the symbol's first
// instruction (mod's DWARF, when mod is not nil and has it; fileOff an
// offset in the symbol).
func (ap *addrProfile) function(res *a2n.Result, mod *a2n.Module, fileOff uint64) *profile.Function {
	k := [2]string{res.Module, res.Symbol}
	if fn := ap.funcs[k]; fn != nil {
		return fn
	}
	fn := &profile.Function{ID: uint64(len(ap.p.Function) + 1), Name: res.Symbol, SystemName: res.Symbol}
	if mod != nil {
		if start, ok := mod.SymbolStart(fileOff); ok {
			if file, n, ok := mod.Line(start); ok {
				fn.Filename, fn.StartLine = file, int64(n)
			}
		}
	}
	ap.funcs[k] = fn
	ap.p.Function = append(ap.p.Function, fn)
	return fn
}
