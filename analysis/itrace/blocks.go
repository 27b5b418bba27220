package itrace

import "perfinsp/format/trace"

// Blocks counts where the traced threads' instructions ran, by address:
// each straight-line block (from where a branch landed to the next
// block-ending record) with the instructions executed in it, summed over
// its executions, and the call sites of the calls. The callgrind writer
// puts them at instruction positions (positions: instr line), so that a
// viewer's machine-code view shows them. It follows the same records as
// the Report (Apply each one) and attributes a block as the Report does:
// to the function of its first instruction, a PLT stub's to the function
// that ran before it.
//
// Addresses are the ones the module's ELF file gives its instructions
// (what objdump shows: a viewer disassembles the file) when the namer
// knows them (a FileAddresser), else the traced ones.
type Blocks struct {
	namer   Namer
	fa      FileAddresser
	places  map[[2]uint64]place // by pid and traced address, until the mappings change
	threads map[uint32]*blockThread
	cur     map[int]*blockThread
	counts  map[string]map[blockPos]uint64 // by function key
	sites   map[[2]string]uint64           // a call instruction's address by caller and callee
	entries map[string]uint64              // a function's first instruction (where a block at offset 0 started)

	// OnBlock, if set, is given every block counted whose first
	// instruction is in a module's file: the module, the file's address
	// of the block's first instruction, the offset of its last from it
	// (-1 where the record does not say: a thread's end) and the
	// instructions the block ran (once through it; a rep string
	// instruction's iterations make more than its instructions).
	OnBlock func(module string, start uint64, last int64, count uint32)

	// Spreader, if set, spreads each block in a module's file over its
	// instructions for the callgrind file: each instruction's own count
	// at its own position, as callgrind's --dump-instr=yes gives them,
	// rather than the block's at its first. Set it before the first Apply.
	Spreader Spreader
	spans    map[string]map[spanPos]*spanRuns // by function key (with a Spreader)
}

// Spreader gives each instruction of a block of a module its count and
// source line (Placer's Spread and Line).
type Spreader interface {
	Spread(mod string, va uint64, last int64, runs, insns uint64, at func(va, n uint64)) bool
	Line(mod string, va uint64) (file string, line int, ok bool)
}

// spanPos is a block in a module's file: its first instruction, the
// offset of its last (-1: not known), and the first's source line.
type spanPos struct {
	mod  string
	addr uint64
	last int64
	file string
	line int
}

// spanRuns is how often a block ran and its instructions in all.
type spanRuns struct {
	runs, insns uint64
}

// FileAddresser is a Namer that knows where an address of a process is
// in its module's ELF file: the virtual address the file gives it (ok
// false: in no file).
type FileAddresser interface {
	FileAddr(pid uint32, addr uint64) (uint64, bool)
}

// place is a traced address named: its function's key, offset and line,
// and its address in its file.
type place struct {
	key  string
	plt  bool
	off  uint64
	file string // the source file of line ("": not known)
	line int
	addr uint64
	mod  string // the module of addr, when addr is its file's address
}

type blockThread struct {
	pid, tid uint32
	start    uint64
	started  bool
	lastFn   string
	// a call into a PLT stub: its caller and call instruction, until the
	// stub jumps to the callee
	pltCaller string
	pltSite   uint64
}

// blockPos is a block's first instruction and its source line.
type blockPos struct {
	addr uint64
	file string // the source file of line: an inlined function's may not be its function's
	line int
}

// NewBlocks returns an empty count naming addresses with namer.
func NewBlocks(namer Namer) *Blocks {
	fa, _ := namer.(FileAddresser)
	return &Blocks{namer: namer, fa: fa, places: map[[2]uint64]place{}, threads: map[uint32]*blockThread{}, cur: map[int]*blockThread{},
		counts: map[string]map[blockPos]uint64{}, sites: map[[2]string]uint64{}, entries: map[string]uint64{}}
}

func (bl *Blocks) thread(pid, tid uint32) *blockThread {
	th := bl.threads[tid]
	if th == nil || th.pid != pid {
		th = &blockThread{pid: pid, tid: tid}
		bl.threads[tid] = th
	}
	return th
}

// place names a traced address of pid as of now.
func (bl *Blocks) place(pid uint32, addr uint64) place {
	k := [2]uint64{uint64(pid), addr}
	if p, ok := bl.places[k]; ok {
		return p
	}
	fn, off, file, line := bl.namer.Func(pid, addr)
	p := place{key: Key(fn), plt: fn.PLT, off: off, file: file, line: line, addr: addr}
	if bl.fa != nil {
		if a, ok := bl.fa.FileAddr(pid, addr); ok {
			p.addr, p.mod = a, fn.Module
		}
	}
	bl.places[k] = p
	return p
}

// Apply takes one record, in the order the Report takes them: ITrace's
// are counted, one that changes mappings (MTE, JIT) forgets the names.
func (bl *Blocks) Apply(r *trace.Record) {
	if r.Major == trace.MajorMTE || r.Major == trace.MajorJITLoad {
		if len(bl.places) > 0 {
			bl.places = map[[2]uint64]place{}
		}
		return
	}
	if r.Major != trace.MajorITraceU && r.Major != trace.MajorITraceK {
		return
	}
	if r.Major == trace.MajorITraceU {
		switch r.Minor {
		case trace.ITraceThread:
			bl.cur[r.CPU] = bl.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			return
		case trace.ITraceStart:
			th := bl.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			bl.cur[r.CPU] = th
			th.start, th.started = r.Field(2), true
			return
		case trace.ITraceEnd:
			th := bl.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			bl.cur[r.CPU] = th
			if th.started {
				bl.block(th, uint32(r.Field(2)), -1)
			}
			th.started = false
			return
		}
		if r.Minor > trace.ITraceUndefd {
			return
		}
	}
	th := bl.cur[r.CPU]
	to, count, from := r.Field(0), uint32(r.Field(1)), r.Field(2)
	if th == nil || !th.started {
		if th != nil {
			th.start, th.started = to, true
		}
		return
	}
	bl.block(th, count, int64(from))
	from += th.start
	if r.Major == trace.MajorITraceU {
		bl.branch(th, r.Minor, from, to)
	}
	th.start = to
}

// branch notes the call site of a call (through a PLT stub: of the
// call into the stub, once the stub jumps to the callee).
func (bl *Blocks) branch(th *blockThread, minor uint32, from, to uint64) {
	switch minor {
	case trace.ITraceCall:
		p := bl.place(th.pid, from)
		caller := p.key
		if p.plt {
			caller = th.lastFn
		}
		callee := bl.place(th.pid, to)
		if callee.plt {
			th.pltCaller, th.pltSite = caller, p.addr
			return
		}
		bl.site(caller, callee.key, p.addr)
	case trace.ITraceJump:
		if th.pltCaller != "" && bl.place(th.pid, from).plt {
			if callee := bl.place(th.pid, to); !callee.plt {
				bl.site(th.pltCaller, callee.key, th.pltSite)
				th.pltCaller = ""
			}
		}
	}
}

func (bl *Blocks) site(caller, callee string, addr uint64) {
	k := [2]string{caller, callee}
	if _, ok := bl.sites[k]; !ok {
		bl.sites[k] = addr
	}
}

// block counts count instructions of th's block (at th.start, its last
// instruction at offset last; -1: not known).
func (bl *Blocks) block(th *blockThread, count uint32, last int64) {
	if count == 0 {
		return
	}
	p := bl.place(th.pid, th.start)
	if bl.OnBlock != nil && p.mod != "" {
		bl.OnBlock(p.mod, p.addr, last, count)
	}
	k, file, line := p.key, p.file, p.line
	if p.plt && th.lastFn != "" {
		k, file, line = th.lastFn, "", 0
	}
	th.lastFn = k
	if p.off == 0 && !p.plt {
		if _, ok := bl.entries[k]; !ok {
			bl.entries[k] = p.addr
		}
	}
	if bl.Spreader != nil && p.mod != "" {
		if bl.spans == nil {
			bl.spans = map[string]map[spanPos]*spanRuns{}
		}
		m := bl.spans[k]
		if m == nil {
			m = map[spanPos]*spanRuns{}
			bl.spans[k] = m
		}
		sp := spanPos{p.mod, p.addr, last, file, line}
		r := m[sp]
		if r == nil {
			r = &spanRuns{}
			m[sp] = r
		}
		r.runs++
		r.insns += uint64(count)
		return
	}
	m := bl.counts[k]
	if m == nil {
		m = map[blockPos]uint64{}
		bl.counts[k] = m
	}
	m[blockPos{p.addr, file, line}] += uint64(count)
}
