package a2n

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unsafe"

	"perfinsp/format/trace"
)

// Segment is one executable mapping of a process.
type Segment struct {
	Start, Size, Offset uint64
	Path                string
}

type jitSym struct {
	Addr, Size uint64
	Name       string
	Module     string // "" : "JIT"
}

// Process is a process as of the current point in the trace.
type Process struct {
	PID     uint32
	Name    string
	Threads map[uint32]string
	segs    []Segment // sorted by Start, non-overlapping
	jit     []jitSym  // time-stamped JIT loads in force, sorted by Addr
	permap  symtab    // /tmp/perf-PID.map and jitdump symbols (not time-stamped: perf-map)
	mapRead bool
	// the JProf agent's Java stacks (javastacks.go)
	java     *JavaStacks
	javaRead bool
	javaAddr map[string]uint64 // JavaTick's address of each method
	// forked: made by MTE_FORK and not exec'd since; forkName: the name an
	// MTE_PROCESS record gave it meanwhile. pitraced writes an exec's
	// MTE_PROCESS (the kernel's comm of the new program) with the fork
	// record when it reads the exec first (the fork is in another CPU's
	// ring), so at the fork's time: the exec takes that name, not its
	// path's (as, not x86_64-linux-gnu-as, the file /usr/bin/as links to).
	forked   bool
	forkName string
}

// Result is the name of one address.
type Result struct {
	Process string // process name
	Module  string // module path, "[kernel]" style names, "JIT" or "<unknown>"
	Symbol  string // symbol, or "module+0xoffset" / "<unknown>" when unresolved
	Offset  uint64 // offset from the symbol start (or module offset when unresolved)
	File    string // source file, when asked for and DWARF exists
	Line    int
	PLT     bool // the address is in a PLT section of Module (a stub, or the lazy-binding entry)
}

// Resolver names addresses as of the record being processed.
type Resolver struct {
	Cache  Cache
	procs  map[uint32]*Process
	kernel symtab
	kc     *ctab // the kernel's table from the table cache (then kernel is empty)
	kmods  []kmod
	kready chan struct{} // closed when kernel and kmods are loaded
	// PerfMapDir is where perf-PID.map and jit-PID.dump files are looked
	// up ("" : /tmp). Lines resolves source lines (slower).
	PerfMapDir string // "": DefaultPerfMapDir
	Lines      bool
	perfMaps   perfMapDir // which perf map files PerfMapDir holds
	// KernelRelease is the release of the kernel the trace was recorded
	// on (its header): [vdso] addresses are named from this kernel's vDSO
	// only when it matches (see vdso.go).
	KernelRelease string
	// Clock turns a record's time into wall time (ns since the epoch; nil:
	// not known). With it, Problems names a module whose file changed
	// after it was first mapped in the trace (changed.go).
	Clock func(t uint64) int64
}

type kmod struct {
	start, end uint64
	name       string
}

// New returns a resolver; kallsyms is the /proc/kallsyms text stored with
// the trace. The kernel symbol table is parsed in the background and waited
// for at the first kernel address.
func New(kallsyms []byte) *Resolver { return NewCached(kallsyms, "") }

// NewCached is New with a table cache directory (tablecache.go): the
// kernel's table and the modules' are taken from it when there, and
// stored in it when parsed ("" : no cache).
func NewCached(kallsyms []byte, dir string) *Resolver {
	r := &Resolver{procs: map[uint32]*Process{}, kready: make(chan struct{})}
	r.Cache.Dir = dir
	go func() {
		if kc, kmods, ok := kernelFromCache(dir, kallsyms); ok {
			r.kc, r.kmods = kc, kmods
		} else {
			r.loadKallsyms(kallsyms)
			kernelToCache(dir, kallsyms, r.kernel, r.kmods)
		}
		close(r.kready)
	}()
	return r
}

// kernelSym is the kernel symbol owning addr (a name from the table cache
// lies in the cache file read into memory, kept by r.kc).
func (r *Resolver) kernelSym(addr uint64) (s Sym, ok bool) {
	if r.kc == nil {
		return r.kernel.find(addr)
	}
	defer func() {
		if recover() != nil { // (decodeTable checked the table: never expected)
			s, ok = Sym{}, false
		}
	}()
	return r.kc.find(addr)
}

func (r *Resolver) loadKallsyms(raw []byte) {
	// Names are slices of one string over raw (no copy, no allocation per
	// symbol): raw must stay unchanged while the resolver is used, as the
	// trace file's mapping does.
	text := unsafe.String(unsafe.SliceData(raw), len(raw))
	syms := make(symtab, 0, bytes.Count(raw, []byte{'\n'})+1)
	bounds := map[string]*kmod{}
	for pos := 0; pos < len(text); {
		end := strings.IndexByte(text[pos:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += pos
		}
		line := text[pos:end]
		pos = end + 1
		addr, name, mod, inMod, ok := KsymLine(line)
		if !ok {
			continue
		}
		if inMod {
			name = name + " [" + mod + "]"
			k := bounds[mod]
			if k == nil {
				k = &kmod{start: addr, end: addr, name: mod}
				bounds[mod] = k
			}
			k.start = min(k.start, addr)
			k.end = max(k.end, addr)
		}
		syms = append(syms, Sym{Addr: addr, Name: name})
	}
	r.kernel = syms.sortDedup()
	for _, k := range bounds {
		r.kmods = append(r.kmods, *k)
	}
}

func (r *Resolver) proc(pid uint32) *Process {
	p := r.procs[pid]
	if p == nil {
		p = &Process{PID: pid, Threads: map[uint32]string{}}
		r.procs[pid] = p
	}
	return p
}

// Process returns what is known of pid (nil if nothing).
func (r *Resolver) Process(pid uint32) *Process { return r.procs[pid] }

// ProcessName returns the name of pid, or "pid_N".
func (r *Resolver) ProcessName(pid uint32) string {
	return r.processName(pid, r.procs[pid])
}

// processName is ProcessName of pid whose process (nil: none) is p.
func (r *Resolver) processName(pid uint32, p *Process) string {
	if p != nil && p.Name != "" {
		return p.Name
	}
	if pid == 0 {
		return "swapper"
	}
	return fmt.Sprintf("pid_%d", pid)
}

// ThreadName returns the name of tid in pid: its own if a record named
// it, else its process's (a new thread starts with its creator's comm, and
// exec renames the thread that calls it), or "" if pid is unknown.
func (r *Resolver) ThreadName(pid, tid uint32) string {
	if p := r.procs[pid]; p != nil {
		if n, ok := p.Threads[tid]; ok && n != "" {
			return n
		}
		return p.Name
	}
	return ""
}

func (p *Process) addSeg(s Segment) {
	// Remove whatever the new mapping overlaps, then insert in order.
	out := p.segs[:0]
	for _, o := range p.segs {
		if o.Start < s.Start+s.Size && s.Start < o.Start+o.Size {
			continue
		}
		out = append(out, o)
	}
	p.segs = out
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].Start > s.Start })
	p.segs = append(p.segs, Segment{})
	copy(p.segs[i+1:], p.segs[i:])
	p.segs[i] = s
}

func (p *Process) unmap(start, size uint64) {
	out := p.segs[:0]
	for _, o := range p.segs {
		if o.Start < start+size && start < o.Start+o.Size {
			continue
		}
		out = append(out, o)
	}
	p.segs = out
}

func (p *Process) seg(addr uint64) (Segment, bool) {
	if i := p.segIndex(addr); i >= 0 {
		return p.segs[i], true
	}
	return Segment{}, false
}

// segIndex is the index of the segment holding addr, or -1.
func (p *Process) segIndex(addr uint64) int {
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].Start > addr }) - 1
	if i >= 0 && addr < p.segs[i].Start+p.segs[i].Size {
		return i
	}
	return -1
}

// byModule reports whether Locate names the addresses of a segment of
// this path by the module's file (not anonymous memory or [stack] ...).
func byModule(path string) bool {
	return path != "" && !strings.HasPrefix(path, "//anon") && (!strings.HasPrefix(path, "[") || path == "[vdso]")
}

// Apply updates the process table with one record (MTE and JIT records;
// others are ignored). Records must be applied in time order.
func (r *Resolver) Apply(rec *trace.Record) {
	switch rec.Major {
	case trace.MajorMTE:
		r.applyMTE(rec)
	case trace.MajorJITLoad:
		p := r.proc(uint32(rec.Field(0)))
		switch rec.Minor {
		case trace.JITLoad:
			addr, size := rec.Field(2), rec.Field(3)
			p.jit = removeOverlap(p.jit, addr, size)
			i := sort.Search(len(p.jit), func(i int) bool { return p.jit[i].Addr > addr })
			p.jit = append(p.jit, jitSym{})
			copy(p.jit[i+1:], p.jit[i:])
			p.jit[i] = jitSym{Addr: addr, Size: size, Name: rec.Str}
		case trace.JITUnload:
			p.jit = removeOverlap(p.jit, rec.Field(1), rec.Field(2))
		}
	}
}

func removeOverlap(j []jitSym, addr, size uint64) []jitSym {
	out := j[:0]
	for _, o := range j {
		if o.Addr < addr+size && addr < o.Addr+o.Size {
			continue
		}
		out = append(out, o)
	}
	return out
}

func (r *Resolver) applyMTE(rec *trace.Record) {
	switch rec.Minor {
	case trace.MTEProcess:
		p := r.proc(uint32(rec.Field(0)))
		p.Name = rec.Str
		if p.forked {
			p.forkName = rec.Str
		}
	case trace.MTEThreadName:
		p := r.proc(uint32(rec.Field(0)))
		p.Threads[uint32(rec.Field(1))] = rec.Str
		if rec.Field(0) == rec.Field(1) && p.Name == "" {
			p.Name = rec.Str
		}
	case trace.MTEFork:
		ppid, pid, tid := uint32(rec.Field(0)), uint32(rec.Field(2)), uint32(rec.Field(3))
		if rec.Field(4)&trace.ForkThread != 0 || pid == ppid {
			// A thread: shares the process, and starts with the name of
			// the thread that created it.
			p := r.proc(pid)
			if n, ok := p.Threads[uint32(rec.Field(1))]; ok && n != "" {
				p.Threads[tid] = n
			}
			return
		}
		parent := r.proc(ppid)
		child := &Process{PID: pid, Name: parent.Name, Threads: map[uint32]string{}, forked: true}
		child.segs = append([]Segment(nil), parent.segs...)
		if n, ok := parent.Threads[uint32(rec.Field(1))]; ok {
			child.Threads[tid] = n
		}
		r.procs[pid] = child
	case trace.MTEExec:
		p := r.proc(uint32(rec.Field(0)))
		p.segs = nil
		p.jit = nil
		p.permap = nil
		p.mapRead = false
		p.java, p.javaRead, p.javaAddr = nil, false, nil
		clear(p.Threads) // exec leaves one thread, named after the new program
		if i := strings.LastIndexByte(rec.Str, '/'); i >= 0 {
			p.Name = rec.Str[i+1:]
		} else if rec.Str != "" {
			p.Name = rec.Str
		}
		if p.forkName != "" {
			p.Name = p.forkName
		}
		p.forked, p.forkName = false, ""
	case trace.MTESegment:
		p := r.proc(uint32(rec.Field(0)))
		p.addSeg(Segment{Start: rec.Field(1), Size: rec.Field(2), Offset: rec.Field(3), Path: rec.Str})
		if r.Clock != nil {
			r.Cache.mappedAt(rec.Str, r.Clock(rec.Time))
		}
	case trace.MTEUnmap:
		p := r.proc(uint32(rec.Field(0)))
		p.unmap(rec.Field(1), rec.Field(2))
	case trace.MTEFile:
		p := r.proc(uint32(rec.Field(0)))
		if s, ok := p.seg(rec.Field(1)); ok && s.Start == rec.Field(1) {
			r.Cache.mappedFileIs(s.Path, fileID{major: uint32(rec.Field(2)), minor: uint32(rec.Field(3)), ino: rec.Field(4)})
		}
	}
}

// Resolve names addr in pid as of the records applied so far.
func (r *Resolver) Resolve(pid uint32, addr uint64, kernel bool) Result {
	return r.Finish(r.Locate(pid, addr, kernel))
}

// Loc is where an address was when Locate was called: either its final
// name, or a module and file offset whose symbol needs the module's tables
// (Finish reads them). Locate is cheap; a caller can record Locs as it
// reads a trace, Prefetch their modules and Finish them at the end.
type Loc struct {
	res     Result
	path    string // the module to read; "" when res is final
	seg     Segment
	addr    uint64
	fileOff uint64
}

// Module is the module whose tables Finish needs ("" when none).
func (l *Loc) Module() string { return l.path }

// FileOffset is the address's offset in Module's file.
func (l *Loc) FileOffset() uint64 { return l.fileOff }

// Addr is the address Locate was given (a module's Loc; the first
// address met at this place of the module, in the process it was met in).
func (l *Loc) Addr() uint64 { return l.addr }

// Mapping is the mapping Addr was in (a module's Loc): where it started,
// its size and the offset in the file of its start.
func (l *Loc) Mapping() (start, size, offset uint64) {
	return l.seg.Start, l.seg.Size, l.seg.Offset
}

// Final is the name when it needs no module (Module() == ""): kernel,
// JIT, perf map, unknown and unnamed memory.
func (l *Loc) Final() Result { return l.res }

// LocModule is the module Finish names l in (the kernel's vDSO image for
// [vdso]), nil when l is in none: a caller naming many Locs by their
// symbol's start (Module.SymbolStart) finds it with this.
func (r *Resolver) LocModule(l Loc) *Module {
	switch l.path {
	case "":
		return nil
	case "[vdso]":
		return r.Cache.vdso(r.KernelRelease)
	}
	return r.Cache.Module(l.path)
}

// Finish names a Loc (the same Result Resolve gives at Locate's time).
func (r *Resolver) Finish(l Loc) Result {
	if l.path == "" {
		return l.res
	}
	res := l.res
	m := r.LocModule(l)
	if m.Err != nil && l.path == "[vdso]" {
		return r.unnamed(res, l.seg, l.addr)
	}
	res.Module = l.path
	if m.Err == nil {
		if va, ok := m.vaddr(l.fileOff); ok {
			res.PLT = m.InPLT(va)
		}
		if s, va, ok := m.Symbol(l.fileOff); ok {
			res.Symbol, res.Offset = s.Name, va-s.Addr
			if r.Lines {
				res.File, res.Line, _ = m.Line(va)
			}
			return res
		}
	}
	res.Symbol = fmt.Sprintf("%s+0x%x", baseName(l.path), l.fileOff)
	res.Offset = l.fileOff
	return res
}

// Locate finds where addr is in pid as of the records applied so far.
// While no record is applied, Locates of different processes may run on
// goroutines of their own (a process's perf map is read by the first).
func (r *Resolver) Locate(pid uint32, addr uint64, kernel bool) Loc {
	p := r.procs[pid]
	if kernel {
		l := r.LocateKernel(addr)
		l.res.Process = r.processName(pid, p)
		return l
	}
	res := Result{Process: r.processName(pid, p)}
	if p == nil {
		res.Module, res.Symbol, res.Offset = "<unknown>", "<unknown>", addr
		return Loc{res: res}
	}
	// Time-stamped JIT loads first: they know what was there at this moment.
	if i := sort.Search(len(p.jit), func(i int) bool { return p.jit[i].Addr > addr }) - 1; i >= 0 && addr < p.jit[i].Addr+p.jit[i].Size {
		res.Module, res.Symbol, res.Offset = "JIT", p.jit[i].Name, addr-p.jit[i].Addr
		if p.jit[i].Module != "" {
			res.Module, res.Offset = p.jit[i].Module, 0
		}
		return Loc{res: res}
	}
	if seg, ok := p.seg(addr); ok && byModule(seg.Path) {
		return Loc{res: res, path: seg.Path, seg: seg, addr: addr, fileOff: addr - seg.Start + seg.Offset}
	}
	// Anonymous executable memory: JIT code named by a perf map or jitdump.
	if !p.mapRead {
		p.mapRead = true
		p.permap = r.loadPerfMap(pid)
	}
	if s, ok := p.permap.find(addr); ok && s.Size > 0 {
		res.Module, res.Symbol, res.Offset = "JIT", s.Name, addr-s.Addr
		return Loc{res: res}
	}
	if seg, ok := p.seg(addr); ok {
		return Loc{res: r.unnamed(res, seg, addr)}
	}
	res.Module, res.Symbol, res.Offset = "<unknown>", "<unknown>", addr
	return Loc{res: res}
}

// Cursor locates many addresses of one process (in address order, most
// in the segment of the one before) as of the records applied so far: it
// must not be used once another record is applied.
type Cursor struct {
	p      *Process
	seg    int  // the segment of the last address, or -1
	module bool // and whether Locate names its addresses by their module
}

// Cursor returns a cursor over pid's mappings.
func (r *Resolver) Cursor(pid uint32) Cursor {
	return Cursor{p: r.procs[pid], seg: -1}
}

// Module is where addr is when Locate gives a module's Loc: the module
// (Loc.Module) and the offset in its file (Loc.FileOffset); ok false when
// Locate names addr otherwise (JIT code, anonymous memory, no mapping, an
// unknown process). It looks at most a segment up when addr is in the
// same segment as the address before (a sorted run of one process's
// addresses: most of a report's).
func (c *Cursor) Module(addr uint64) (path string, fileOff uint64, ok bool) {
	p := c.p
	if p == nil || len(p.jit) > 0 {
		return "", 0, false // (JIT loads come first in Locate: not worth a fast path)
	}
	if i := c.seg; i < 0 || addr < p.segs[i].Start || addr >= p.segs[i].Start+p.segs[i].Size {
		if c.seg = p.segIndex(addr); c.seg < 0 {
			return "", 0, false
		}
		c.module = byModule(p.segs[c.seg].Path)
	}
	if !c.module {
		return "", 0, false
	}
	s := &p.segs[c.seg]
	return s.Path, addr - s.Start + s.Offset, true
}

// LocateKernel is Locate of a kernel address without its process (the
// Loc's Final has no Process): it reads no process, so it may run beside
// Apply (on another goroutine).
func (r *Resolver) LocateKernel(addr uint64) Loc {
	var res Result
	<-r.kready
	s, ok := r.kernelSym(addr)
	if !ok || len(r.kernel) == 0 && r.kc == nil {
		res.Module = "[kernel]"
		res.Symbol = fmt.Sprintf("[kernel]+0x%x", addr)
		res.Offset = addr
		return Loc{res: res}
	}
	res.Module = "[kernel]"
	name := s.Name
	if i := strings.Index(name, " ["); i > 0 {
		res.Module = "[" + strings.Trim(name[i+2:], "]") + "]"
		name = name[:i]
	}
	res.Symbol = name
	res.Offset = addr - s.Addr
	return Loc{res: res}
}

// unnamed is anonymous or special memory with no names (JIT code without
// a perf map, a [vdso] of another kernel ...): one row per mapping name,
// not per address.
func (r *Resolver) unnamed(res Result, seg Segment, addr uint64) Result {
	name := seg.Path
	if name == "" {
		name = "[anon]"
	}
	res.Module = name
	res.Symbol = name + " (no symbols)"
	res.Offset = addr - seg.Start
	return res
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
