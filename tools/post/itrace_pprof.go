package main

import (
	"strings"

	"perfinsp/analysis/a2n"
)

// filePlacer places ITrace's addresses in their modules' ELF files for
// --itrace-pprof (itrace.Placer): a module's file virtual addresses (what
// objdump shows), in mappings of its load segments with its build id, so
// that pprof disassembles the file and reads its DWARF lines.
type filePlacer struct {
	r      *a2n.Resolver
	cache  map[[2]uint64]filePlace // by pid and address, until the mappings change
	mods   map[string]*placedModule
	chains map[span]chainRead
}

type filePlace struct {
	mod string
	va  uint64
	ok  bool
}

// placedModule is a module met: nil m when its file cannot be read.
type placedModule struct {
	m    *a2n.Module
	segs []loadSegment
}

type loadSegment struct {
	vaddr, off, size uint64
}

type chainRead struct {
	ch chain
	ok bool
}

func newFilePlacer(r *a2n.Resolver) *filePlacer {
	return &filePlacer{r: r, cache: map[[2]uint64]filePlace{}, mods: map[string]*placedModule{}, chains: map[span]chainRead{}}
}

// forget drops the places known: the mappings change from here on.
func (p *filePlacer) forget() {
	if len(p.cache) > 0 {
		p.cache = map[[2]uint64]filePlace{}
	}
}

// Place is where a traced address of pid is in its module's file.
func (p *filePlacer) Place(pid uint32, addr uint64) (string, uint64, bool) {
	k := [2]uint64{uint64(pid), addr}
	if v, ok := p.cache[k]; ok {
		return v.mod, v.va, v.ok
	}
	v := p.place(pid, addr)
	p.cache[k] = v
	return v.mod, v.va, v.ok
}

func (p *filePlacer) place(pid uint32, addr uint64) filePlace {
	l := p.r.Locate(pid, addr, false)
	path := l.Module()
	// no file pprof could open: unnamed memory, [vdso] and the like
	if path == "" || strings.HasPrefix(path, "[") {
		return filePlace{}
	}
	pm := p.mods[path]
	if pm == nil {
		pm = &placedModule{}
		if m := p.r.LocModule(l); m != nil && m.Err == nil {
			pm.m = m
		}
		p.mods[path] = pm
	}
	if pm.m == nil {
		return filePlace{}
	}
	va, ok := pm.m.VAddr(l.FileOffset())
	if !ok {
		return filePlace{}
	}
	if !pm.segment(va) {
		if vaddr, off, size, ok := pm.m.LoadSegment(l.FileOffset()); ok {
			pm.segs = append(pm.segs, loadSegment{vaddr, off, size})
		}
	}
	return filePlace{mod: path, va: va, ok: true}
}

// module is the module at path, read if no Place met it (the callgrind
// file's blocks are placed by Blocks, not by Place).
func (p *filePlacer) module(path string) *placedModule {
	pm := p.mods[path]
	if pm == nil {
		pm = &placedModule{}
		if !strings.HasPrefix(path, "[") {
			if m := p.r.Cache.Module(path); m != nil && m.Err == nil {
				pm.m = m
			}
		}
		p.mods[path] = pm
	}
	return pm
}

func (pm *placedModule) segment(va uint64) bool {
	_, ok := pm.find(va)
	return ok
}

func (pm *placedModule) find(va uint64) (loadSegment, bool) {
	for _, s := range pm.segs {
		if va >= s.vaddr && va < s.vaddr+s.size {
			return s, true
		}
	}
	return loadSegment{}, false
}

// Spread gives at each instruction of a block and its count (as
// --annotate counts them).
func (p *filePlacer) Spread(mod string, va uint64, last int64, runs, insns uint64, at func(va, n uint64)) bool {
	pm := p.module(mod)
	if pm.m == nil {
		return false
	}
	k, c := span{mod: mod, start: va, last: last}, &spanCount{runs: runs, insns: insns}
	if last < 0 { // as far as the count goes: not kept
		ch, ok := readChain(pm.m, k, c)
		return ok && ch.spread(c, at)
	}
	r, seen := p.chains[k]
	if !seen {
		r.ch, r.ok = readChain(pm.m, k, c)
		p.chains[k] = r
	}
	return r.ok && r.ch.spread(c, at)
}

// Segment is the load segment of mod holding va and mod's build id.
func (p *filePlacer) Segment(mod string, va uint64) (start, limit, offset uint64, buildID string, ok bool) {
	pm := p.mods[mod]
	if pm == nil || pm.m == nil {
		return 0, 0, 0, "", false
	}
	s, ok := pm.find(va)
	if !ok {
		return 0, 0, 0, "", false
	}
	return s.vaddr, s.vaddr + s.size, s.off, pm.m.BuildID(), true
}

// Line is va's source line in mod (DWARF).
func (p *filePlacer) Line(mod string, va uint64) (string, int, bool) {
	pm := p.module(mod)
	if pm.m == nil {
		return "", 0, false
	}
	return pm.m.Line(va)
}
