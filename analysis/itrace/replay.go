// Package itrace is the post-side analysis of ITrace records (major 0x20
// user branches, 0x21 kernel work; docs/trace-format.md): it replays each
// traced thread's blocks into PI's arc report (Figure 3), per-function
// instruction counts (calls, exclusive and inclusive instructions, callers,
// callees), call stacks weighted by instructions and the callgrind format.
package itrace

import (
	"sort"

	"perfinsp/format/trace"
)

// Func names one function: the unit of the per-function report and of
// the callgrind format.
type Func struct {
	Name   string // symbol, or module+0xoffset when unresolved
	Module string
	File   string // source file of the function's first block seen, when known
	Line   int
	// PLT marks a procedure linkage table stub. As callgrind does
	// (--skip-plt=yes), its instructions count to the function that ran
	// before it, and a call through it is a call to where it jumps.
	PLT bool
}

// Namer names user addresses of a process as of the record being replayed
// (post uses A2N; tests may use an ELF symbol table).
type Namer interface {
	// Func returns the function holding addr and addr's offset in it,
	// with the source line when known.
	Func(pid uint32, addr uint64) (fn Func, offset uint64, file string, line int)
}

// FuncStats are one function's counts over every traced thread.
type FuncStats struct {
	Func
	Calls     uint64            // calls into it: call instructions and jumps to its entry (sibling calls), as in callgrind; signal handler entries are not calls
	Exclusive uint64            // instructions executed in it
	Inclusive uint64            // instructions executed while it runs or is on the call stack (outermost activations; at least Exclusive)
	Lines     map[int]uint64    // exclusive instructions by source line (the line of each block's start)
	Callers   map[string]uint64 // calls by caller
	Callees   map[string]*Arc   // by callee
}

// Arc is one caller → callee edge.
type Arc struct {
	Callee    string
	Calls     uint64
	Inclusive uint64 // instructions of the callee's activations from this caller
	Line      int    // source line of the call site
}

// Branch is one block-ending record, replayed: what the arc report prints.
type Branch struct {
	CPU      int
	Kernel   bool   // a 0x21 record (system call, signal, interrupt, page fault)
	Type     uint32 // PI type: 0 INTRPT ... 6 UNDEFD
	Count    uint32 // instructions in the block
	PID, TID uint32
	From, To uint64
	Depth    int // call depth after the record
	Syscall  int // system call number, -1 if none
	Signal   int // signal number, 0 if none
	// Irq is an interrupt's APIC vector or trace.ITraceIRQDevice + its
	// IRQ, -1 if none; Fault marks a page fault at Addr (Error: its x86
	// error code). Neither is a branch: From is the last instruction
	// before it and To the one the thread resumed at.
	Irq        int
	Fault      bool
	Addr       uint64
	Error      uint32
	DurationNs uint32 // time in the kernel (system calls, interrupts, faults)
	Unresolved bool
}

type frame struct {
	fn       string
	callSite uint64 // address of the call instruction (a call entered by a jump: of the jump; 0: signal handler entry)
	entry    uint64 // thread's instruction total at entry
	caller   string
	signal   bool
	// interrupted is the function a signal frame interrupted: a
	// siglongjmp out of the handler may land in it (leaveHandlers)
	interrupted string
	plt         bool // a call into a PLT stub, not yet through it
	// tail marks a call entered by a jump (a sibling call, the dynamic
	// loader's jump to a function it just bound): it returns for the
	// frame below it, which returns with it (callgrind's call emulation)
	tail bool
	node *stackNode // the call path through this frame (EnableStacks)
}

type threadState struct {
	pid, tid uint32
	start    uint64
	started  bool
	total    uint64
	lastFn   string // function of the previous block
	stack    []frame
	active   map[string]int // activations on the stack per function (the base's included)
	// base is the function the thread runs in at depth 0 (the stacks'
	// root): an activation from baseEntry, the total when it became the base
	base      string
	baseEntry uint64
	signals   int // signal handler frames on stack
	// resumed is the function a jump into its middle has just resumed,
	// the frames above it left (leaveFrames), until the next branch
	resumed string
}

// Report is the replayed ITrace of a trace file.
type Report struct {
	Funcs        map[string]*FuncStats // by key (name + "\x00" + module)
	Instructions uint64
	Branches     uint64
	Syscalls     uint64
	Signals      uint64
	Interrupts   uint64 // interrupts and page faults taken in user code: not branches,
	Faults       uint64 // their blocks go on (module path only)
	// KernelNs sums the durations of system calls, interrupts and faults.
	KernelNs uint64
	Threads  int
	// Records and Bytes count the ITrace records and their size; First
	// and Last are the times of the first and last.
	Records, Bytes uint64
	First, Last    uint64
	// Unattributed counts instructions of records seen before their
	// thread's context (ITRACE_THREAD) in a buffer: wrap mode can
	// overwrite the context record.
	Unattributed uint64

	namer   Namer
	threads map[uint32]*threadState
	cur     map[int]*threadState // per CPU buffer: thread of the records that follow
	onArc   func(*Branch)
	stacks  *stackTree // instructions per call stack (EnableStacks)
	placer  Placer     // where the stacks' addresses are in files (PlaceStacks)
	onFrame func(*FrameEvent)
	ev      FrameEvent // the one onFrame sees
	now     uint64     // time of the record being replayed
}

// NewReport returns an empty report naming addresses with namer. onBranch,
// if not nil, sees every block-ending record (the arc report).
func NewReport(namer Namer, onBranch func(*Branch)) *Report {
	return &Report{Funcs: map[string]*FuncStats{}, namer: namer, threads: map[uint32]*threadState{},
		cur: map[int]*threadState{}, onArc: onBranch}
}

// Key is the map key of a function.
func Key(f Func) string { return f.Name + "\x00" + f.Module }

func (rep *Report) fn(pid uint32, addr uint64) (*FuncStats, string, int) {
	f, _, file, line := rep.namer.Func(pid, addr)
	k := Key(f)
	fs := rep.Funcs[k]
	if fs == nil {
		if f.File == "" {
			f.File, f.Line = file, line
		}
		fs = &FuncStats{Func: f, Lines: map[int]uint64{}, Callers: map[string]uint64{}, Callees: map[string]*Arc{}}
		rep.Funcs[k] = fs
	}
	return fs, k, line
}

func (rep *Report) thread(pid, tid uint32) *threadState {
	th := rep.threads[tid]
	if th == nil || th.pid != pid {
		if th != nil { // a thread id reused by another process
			rep.unwind(th, 0)
			rep.setBase(th, "")
		}
		th = &threadState{pid: pid, tid: tid, active: map[string]int{}}
		rep.threads[tid] = th
		rep.Threads++
	}
	return th
}

// Apply replays one record (others than ITrace's are ignored). Records
// must come in time order, with the MTE records applied to the namer
// before the records they describe.
func (rep *Report) Apply(r *trace.Record) {
	if r.Major != trace.MajorITraceU && r.Major != trace.MajorITraceK {
		return
	}
	rep.Records++
	rep.now = r.Time
	rep.Bytes += uint64(recordSize(r))
	if rep.First == 0 || r.Time < rep.First {
		rep.First = r.Time
	}
	if r.Time > rep.Last {
		rep.Last = r.Time
	}
	if r.Major == trace.MajorITraceU {
		switch r.Minor {
		case trace.ITraceThread:
			rep.cur[r.CPU] = rep.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			return
		case trace.ITraceStart:
			th := rep.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			rep.cur[r.CPU] = th
			rep.unwind(th, 0)
			rep.setBase(th, "")
			th.start, th.started = r.Field(2), true
			return
		case trace.ITraceEnd:
			th := rep.thread(uint32(r.Field(0)), uint32(r.Field(1)))
			rep.cur[r.CPU] = th
			if th.started {
				rep.block(th, uint32(r.Field(2)), th.start+r.Field(3), -1)
			}
			rep.unwind(th, 0)
			rep.setBase(th, "")
			th.started = false
			return
		}
		if r.Minor > trace.ITraceUndefd {
			return
		}
	}
	th := rep.cur[r.CPU]
	to, count, from := r.Field(0), uint32(r.Field(1)), r.Field(2)
	if th == nil || !th.started {
		rep.Unattributed += uint64(count)
		if th != nil {
			th.start, th.started = to, true
		}
		return
	}
	rep.block(th, count, from+th.start, int64(from))
	from += th.start
	b := Branch{CPU: r.CPU, Kernel: r.Major == trace.MajorITraceK, Type: r.Minor, Count: count, PID: th.pid, TID: th.tid,
		From: from, To: to, Syscall: -1, Irq: -1}
	if r.Major == trace.MajorITraceU {
		rep.Branches++
		switch r.Minor {
		case trace.ITraceCall:
			rep.call(th, from, to)
		case trace.ITraceReturn:
			rep.leaveHandlers(th, to)
			rep.ret(th, to)
		case trace.ITraceJump:
			resumed := th.resumed
			th.resumed = ""
			rep.leaveHandlers(th, to)
			rep.jump(th, from, to, resumed)
		}
		if r.Minor != trace.ITraceJump {
			th.resumed = ""
		}
	} else {
		switch r.Minor {
		case trace.ITraceSyscall:
			rep.Syscalls++
			b.Type, b.Syscall = trace.ITraceOther, int(r.Field(3))
			b.DurationNs = uint32(r.Field(4))
			rep.KernelNs += r.Field(4)
			switch b.Syscall {
			case 15: // rt_sigreturn: back from a signal handler
				for i := len(th.stack) - 1; i >= 0 && th.signals > 0; i-- {
					if th.stack[i].signal {
						rep.unwind(th, i)
						break
					}
				}
			case 59, 322: // execve, execveat: a new program
				if count > 0 && to != from+2 {
					rep.unwind(th, 0)
					rep.setBase(th, "")
				}
			}
		case trace.ITraceInterrupt:
			// not a branch: the block goes on at to (the interrupted
			// instruction), and so does the call stack
			rep.Interrupts++
			b.Type, b.Irq, b.DurationNs = trace.ITraceIntrpt, int(r.Field(3)), uint32(r.Field(4))
			rep.KernelNs += r.Field(4)
		case trace.ITraceFault:
			rep.Faults++
			b.Type, b.Fault, b.Addr = trace.ITraceIntrpt, true, r.Field(3)
			b.Error, b.DurationNs = uint32(r.Field(4)), uint32(r.Field(5))
			rep.KernelNs += r.Field(5)
		case trace.ITraceSignal:
			rep.Signals++
			b.Type, b.Signal = trace.ITraceIntrpt, int(r.Field(3))
			if r.Field(4)&trace.ITraceSignalHandler != 0 {
				rep.enter(th, to, 0, "", true)
			}
		}
	}
	th.start = to
	b.Depth = len(th.stack)
	if rep.onArc != nil {
		rep.onArc(&b)
	}
}

// block accounts count instructions of th's current block, the last at from
// (at offset last from its first; -1: not known).
func (rep *Report) block(th *threadState, count uint32, from uint64, last int64) {
	if count == 0 {
		return
	}
	fs, k, line := rep.fn(th.pid, th.start)
	if fs.PLT {
		if o := rep.Funcs[th.lastFn]; o != nil {
			fs, k, line = o, th.lastFn, 0
		}
	}
	th.lastFn = k
	if len(th.stack) == 0 && th.base != k {
		rep.setBase(th, k)
	}
	if th.active[k] == 0 {
		// run without a frame of its own (entered by a jump into its
		// middle, or the thread's base while another frame is open)
		fs.Inclusive += uint64(count)
	}
	rep.addStack(th, k, count, last)
	fs.Exclusive += uint64(count)
	fs.Lines[line] += uint64(count)
	th.total += uint64(count)
	rep.Instructions += uint64(count)
}

func (rep *Report) enter(th *threadState, to, site uint64, caller string, signal bool) {
	callee, k, _ := rep.fn(th.pid, to)
	if !signal {
		callee.Calls++
		callee.Callers[caller]++
	}
	f := frame{fn: k, callSite: site, entry: th.total, caller: caller, signal: signal, node: rep.pushNode(th, k, site)}
	if signal {
		f.interrupted = th.lastFn
		th.signals++
	}
	th.stack = append(th.stack, f)
	th.active[k]++
	if rep.onFrame != nil {
		kind := FrameCall
		if signal {
			kind = FrameSignal
		}
		rep.frameEvent(th, true, kind, callee.Func, 0)
	}
}

func (rep *Report) call(th *threadState, from, to uint64) {
	_, ck, line := rep.fn(th.pid, from)
	if fs, _, _ := rep.fn(th.pid, from); fs.PLT {
		ck = th.lastFn
	}
	if callee, _, _ := rep.fn(th.pid, to); callee.PLT {
		th.stack = append(th.stack, frame{callSite: from, entry: th.total, caller: ck, plt: true, node: rep.pushNode(th, "", from)})
		return
	}
	rep.arc(ck, to, th, line)
	rep.enter(th, to, from, ck, false)
}

func (rep *Report) arc(caller string, to uint64, th *threadState, line int) {
	_, k, _ := rep.fn(th.pid, to)
	if c := rep.Funcs[caller]; c != nil {
		a := c.Callees[k]
		if a == nil {
			a = &Arc{Callee: k, Line: line}
			c.Callees[k] = a
		}
		a.Calls++
	}
}

// jump replays a jump: one out of a PLT stub completes the call through it
// (the call callgrind counts); one to a function's first instruction, or
// into a PLT stub, is a call entered by a jump (a sibling call, or the
// dynamic loader's jump to the function it has just bound), as callgrind
// counts it: the callee's frame goes on top of the jumping function's,
// and both end at the return for the frame below. (A function jumping to
// its own start while frames above its own are open resumes it.)
func (rep *Report) jump(th *threadState, from, to uint64, resumed string) {
	n := len(th.stack)
	if n > 0 && th.stack[n-1].plt {
		rep.throughPLT(th, to)
		return
	}
	f, off, _, _ := rep.namer.Func(th.pid, to)
	if !f.PLT && off != 0 {
		rep.leaveFrames(th, Key(f))
		return
	}
	fs, ck, line := rep.fn(th.pid, from)
	if ck == Key(f) && n > 0 && th.active[ck] > 0 && (th.stack[n-1].fn != ck || resumed == ck) {
		// A function jumping back to its own start while frames
		// above its own are open, or right after a jump into its
		// middle left them (leaveFrames): Go's "CALL runtime.morestack;
		// JMP start" once the goroutine's stack has grown (the runtime
		// resumes it after the call, through gogo, never returning
		// from its frames). Not a call: the frames above it are left.
		rep.resume(th, ck)
		return
	}
	if fs.PLT {
		ck = th.lastFn
	}
	if f.PLT {
		th.stack = append(th.stack, frame{callSite: from, entry: th.total, caller: ck, plt: true, tail: true, node: rep.pushNode(th, "", from)})
		return
	}
	rep.arc(ck, to, th, line)
	rep.enter(th, to, from, ck, false)
	th.stack[len(th.stack)-1].tail = true
}

// leaveFrames pops the frames a jump into the middle of function k has
// left, where k runs below th's top frame: longjmp (glibc's __longjmp
// ends with a jump to where setjmp returned), a C++ exception's landing
// pad, a function's cold part jumping back into it. callgrind unwinds its
// call stack by the stack pointer there; without it the frames left stay
// open until a return matches a call below them, and everything run
// meanwhile counts to their inclusive totals and stacks (a -O2 main
// after longjmp out of a 21-deep recursion: all of its later work inside
// it). Frames above a signal handler's are leaveHandlers' business; a
// jump into a function on no frame (not the base either) leaves none.
func (rep *Report) leaveFrames(th *threadState, k string) {
	n := len(th.stack)
	if n == 0 || th.stack[n-1].fn == k || th.active[k] == 0 {
		return
	}
	for i := n - 1; i >= 0; i-- {
		if th.stack[i].signal {
			return
		}
		if th.stack[i].fn == k {
			rep.unwind(th, i+1)
			th.resumed = k
			return
		}
	}
	if th.base == k {
		rep.unwind(th, 0)
		th.resumed = k
	}
}

// resume pops th's frames above the topmost activation of k (none: all of
// them, k being the thread's base).
func (rep *Report) resume(th *threadState, k string) {
	for i := len(th.stack) - 1; i >= 0; i-- {
		if th.stack[i].fn == k {
			rep.unwind(th, i+1)
			return
		}
	}
	rep.unwind(th, 0)
}

// throughPLT completes the call through the PLT stub of th's top frame
// when the stub jumps out of the PLT.
func (rep *Report) throughPLT(th *threadState, to uint64) {
	n := len(th.stack)
	callee, k, _ := rep.fn(th.pid, to)
	if callee.PLT {
		return // the stub's lazy binding path, PLT0
	}
	f := &th.stack[n-1]
	f.plt = false
	f.fn = k
	rep.renameTop(th, k)
	f.entry = th.total // the stub's instructions are the caller's
	callee.Calls++
	callee.Callers[f.caller]++
	rep.arc(f.caller, to, th, 0)
	th.active[k]++
	if rep.onFrame != nil {
		rep.frameEvent(th, true, FrameCall, callee.Func, 0)
	}
}

// ret pops the frames down to the call whose return address is to (a call
// instruction is at most 15 bytes before it), with the calls entered by a
// jump above it; a return that matches no call (longjmp-like code, a trace
// started inside a function) pops nothing, but the calls entered by a jump
// at the bottom of the stack: they return to where the trace began.
func (rep *Report) ret(th *threadState, to uint64) {
	for i := len(th.stack) - 1; i >= 0; i-- {
		f := th.stack[i]
		if f.signal {
			return
		}
		if f.tail {
			if i == 0 {
				rep.unwind(th, 0)
			}
			continue
		}
		if f.callSite < to && to <= f.callSite+15 {
			rep.unwind(th, i)
			return
		}
	}
}

// leaveHandlers pops the signal handlers a branch to to has left without
// rt_sigreturn: siglongjmp out of a handler ends with a jump into a
// function that was running below the handler's frame (the one that
// called sigsetjmp), as callgrind unwinds its call stack by the stack
// pointer. A branch into a function of the handler's own frames (the
// handler, what it called) stays inside it.
func (rep *Report) leaveHandlers(th *threadState, to uint64) {
	if th.signals == 0 {
		return // (no scan of a deep stack for a handler on every return)
	}
	s := -1
	for i := len(th.stack) - 1; i >= 0; i-- {
		if th.stack[i].signal {
			s = i
			break
		}
	}
	if s < 0 {
		return
	}
	if th.stack[len(th.stack)-1].plt {
		return // a call through a PLT stub, completed by this jump
	}
	_, k, _ := rep.fn(th.pid, to)
	for i := s; i < len(th.stack); i++ {
		if th.stack[i].fn == k {
			return
		}
	}
	for i := s; i >= 0; i-- {
		f := th.stack[i]
		if f.signal {
			if f.interrupted == k && (i == 0 || th.stack[i-1].fn != k) {
				rep.unwind(th, i)
				return
			}
			continue
		}
		if f.fn == k {
			rep.unwind(th, i+1)
			return
		}
	}
}

// unwind pops th's frames down to depth, accounting inclusive counts.
func (rep *Report) unwind(th *threadState, depth int) {
	for len(th.stack) > depth {
		f := th.stack[len(th.stack)-1]
		th.stack = th.stack[:len(th.stack)-1]
		if f.signal {
			th.signals--
		}
		if f.plt {
			continue
		}
		incl := th.total - f.entry
		if rep.onFrame != nil {
			kind := FrameCall
			if f.signal {
				kind = FrameSignal
			}
			rep.frameEvent(th, false, kind, Func{}, incl)
		}
		th.active[f.fn]--
		fs := rep.Funcs[f.fn]
		if th.active[f.fn] == 0 && fs != nil {
			fs.Inclusive += incl
		}
		if !f.signal {
			if c := rep.Funcs[f.caller]; c != nil {
				if a := c.Callees[f.fn]; a != nil && !rep.onStack(th, f.fn) {
					a.Inclusive += incl
				}
			}
		}
	}
}

// setBase makes fn th's function at depth 0, closing the activation of
// the one before.
func (rep *Report) setBase(th *threadState, fn string) {
	if old := th.base; old != "" {
		if rep.onFrame != nil {
			rep.frameEvent(th, false, FrameBase, Func{}, th.total-th.baseEntry)
		}
		th.active[old]--
		if fs := rep.Funcs[old]; fs != nil && th.active[old] == 0 {
			fs.Inclusive += th.total - th.baseEntry
		}
	}
	th.base, th.baseEntry = fn, th.total
	if fn != "" {
		th.active[fn]++
		if fs := rep.Funcs[fn]; rep.onFrame != nil && fs != nil {
			rep.frameEvent(th, true, FrameBase, fs.Func, 0)
		}
	}
}

func (rep *Report) onStack(th *threadState, k string) bool { return th.active[k] > 0 }

// Finish closes every thread still open (a trace that ended mid-call).
func (rep *Report) Finish() {
	rep.now = rep.Last
	for _, th := range rep.threads {
		rep.unwind(th, 0)
		rep.setBase(th, "")
	}
}

// Sorted returns the functions by exclusive instructions, most first.
func (rep *Report) Sorted() []*FuncStats {
	out := make([]*FuncStats, 0, len(rep.Funcs))
	for _, f := range rep.Funcs {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Exclusive != out[j].Exclusive {
			return out[i].Exclusive > out[j].Exclusive
		}
		return Key(out[i].Func) < Key(out[j].Func)
	})
	return out
}

// recordSize is a record's size in the trace: the header and its fields.
func recordSize(r *trace.Record) int {
	n := trace.HeaderSize
	if s := trace.Lookup(r.Major, r.Minor); s != nil {
		for _, f := range s.Fields {
			n += f.Width
		}
	} else {
		n += 4 * len(r.Fixed)
	}
	return n
}
