package itrace

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/internal/x86branch"
)

// Breakpoint stepping (docs/itrace.md, "Breakpoint stepping"): a thread
// runs natively up to the first instruction of its straight line that
// may move control, where a hardware execution breakpoint (debug register
// DR0) stops it before that instruction runs. The tracer counts the line,
// tells from the registers where the branch goes (x86branch.Next), writes
// the record a single step would have, moves the breakpoint to the end of
// the next line and continues. Direct jumps and calls are run through
// (their targets are known), and a conditional jump ending a run gets a
// breakpoint at the end of each way (DR0, DR1): fewer stops than taken
// branches instead of one per instruction. An instruction Next cannot
// evaluate (a system call, rep, an encoding x86asm does not know, popf,
// far and loop branches) is single-stepped with the breakpoint off, as
// the single-step path does.

// hwState: whether debug-register breakpoints stop a thread here.
type hwState uint8

const (
	hwUnknown hwState = iota
	hwWorks
	hwIgnored
)

// Offsets of struct user's u_debugreg (x86-64), for PTRACE_POKEUSER.
const (
	offDR0 = 848
	offDR1 = offDR0 + 8
	offDR7 = offDR0 + 7*8
	// dr7Exec0, dr7Exec1: DR0, DR1 enabled (L0, L1), execution (R/W 00),
	// length 1 (LEN 00).
	dr7Exec0 = 1
	dr7Exec1 = 4
	// trapHWBkpt is si_code TRAP_HWBKPT.
	trapHWBkpt = 4
)

func pokeUser(tid int, off, val uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_POKEUSR, uintptr(tid), off, val, 0, 0); e != 0 {
		return e
	}
	return nil
}

// arm puts th's breakpoints at a0 (DR0) and a1 (DR1) and enables them
// (DR7); a1 == a0 for one. The kernel switches each enabled debug
// register with the thread at every context switch, two per stop, where
// writing one can be dear (a hypervisor's exit): DR1 is enabled only
// once a conditional jump needed it, then kept (on a0 when one will do)
// rather than turned off and on; DR2 and DR3 stay off.
func (t *Tracer) arm(th *thread, a0, a1 uint64) error {
	dr7 := th.dr7 | dr7Exec0
	if a1 != a0 {
		dr7 |= dr7Exec1
	}
	if th.dr7 == 0 || th.dr0 != a0 {
		if err := pokeUser(th.tid, offDR0, uintptr(a0)); err != nil {
			return err
		}
		th.dr0 = a0
	}
	if dr7&dr7Exec1 != 0 && th.dr1 != a1 {
		if err := pokeUser(th.tid, offDR1, uintptr(a1)); err != nil {
			return err
		}
		th.dr1 = a1
	}
	if th.dr7 != dr7 {
		if err := pokeUser(th.tid, offDR7, uintptr(dr7)); err != nil {
			return err
		}
		th.dr7 = dr7
	}
	return nil
}

// disarm turns th's breakpoints off (before single steps, at detach: a
// breakpoint left set would give the untraced thread a SIGTRAP).
func (t *Tracer) disarm(th *thread) {
	if th.dr7 != 0 {
		if pokeUser(th.tid, offDR7, 0) == nil {
			th.dr7 = 0
		}
	}
}

// setHW records whether breakpoints work here, and says it once.
func (t *Tracer) setHW(s hwState, why string) {
	if t.hw != hwUnknown {
		return
	}
	t.hw = s
	if s == hwWorks {
		t.decided(&t.stats.Breakpoints, "work", "itrace: breakpoint stepping: hardware breakpoints stop the threads (%s): straight lines run natively between stops", why)
	} else {
		t.decided(&t.stats.Breakpoints, "ignored", "itrace: breakpoint stepping: hardware breakpoints do not work here (%s): single-stepping", why)
	}
}

// bpResume continues th under breakpoint stepping if it can: true when
// it did (or the thread is gone), false to single-step th.ip instead.
func (t *Tracer) bpResume(th *thread, sig int) (bool, error) {
	if t.hw == hwIgnored || sig != 0 || th.sysret || th.noExec || t.stop.Load() {
		return false, nil
	}
	if t.hw == hwUnknown {
		// The probe: a breakpoint on the instruction about to run and a
		// single step. A breakpoint that works stops the thread before
		// the instruction (TRAP_HWBKPT, nothing ran); one that does not
		// lets the step run it, and the stop is a single step's.
		if err := t.arm(th, th.ip, th.ip); err != nil {
			t.setHW(hwIgnored, fmt.Sprintf("setting a debug register: %v", err))
			return false, nil
		}
		th.hwProbe = true
		return false, nil
	}
	r := th.as.dec.Run(th.read, th.ip)
	if r.N == 0 && r.End.Rep && r.End.AddrSize == 64 {
		// A rep string instruction runs natively to its end: a
		// breakpoint after it; rcx (th.rcx after a single step, the
		// registers kept at a breakpoint) says how many iterations ran.
		rcx := th.rcx
		if th.before {
			rcx, th.before = th.regs.Rcx, false
		}
		if err := t.arm(th, r.End.Next(), r.End.Next()); err != nil {
			return false, nil
		}
		th.rep, th.repRCX = r.End, rcx
		t.stats.BreakpointRuns++
		if err := t.cont(th, unix.PTRACE_CONT, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return true, fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
		}
		return true, nil
	}
	planned := false
	if th.before {
		// Stopped by the breakpoint before r's end: run the branch from
		// here (the kernel set the resume flag, so the breakpoint does
		// not stop it again) and the lines after it.
		th.before = false
		if r.N == 0 {
			if !r.Branch {
				return false, nil
			}
			next, ok := x86branch.Next(r.End, ptraceRegs{tid: th.tid, r: &th.regs})
			if !ok {
				return false, nil
			}
			// (if no breakpoint can be set, the branch is single-stepped,
			// not yet counted)
			if done, err := t.plan(th, th.as.dec.Run(th.read, next)); err != nil {
				return done, nil
			}
			th.pre, th.preTo = r.End, next
			planned = true
		}
	} else if r.N == 0 {
		// th.ip is the line's end: a breakpoint on the next instruction
		// would stop before it at once (or, with the flags' resume bit
		// left set by a rep iteration, not at all): step it.
		return false, nil
	}
	if !planned {
		if done, err := t.plan(th, r); err != nil {
			return done, nil
		}
	}
	t.stats.BreakpointRuns++
	if err := t.cont(th, unix.PTRACE_CONT, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return true, fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
	}
	return true, nil
}

// maxChain bounds the lines one way of a breakpoint run goes through.
const maxChain = 16

// direct reports whether the branch in always goes to its target, known
// without the registers: a direct jmp or call.
func direct(in x86branch.BranchInsn) bool {
	return in.Target != 0 && !in.Cond && (in.Kind == x86branch.KindJump || in.Kind == x86branch.KindCall) && in.Len != 0
}

// way is the lines a thread runs through: via, each ending in a direct
// jump or call whose target starts the next, then last, at whose end
// a breakpoint stops it.
type way struct {
	via  []*x86branch.Run
	last *x86branch.Run
}

// lines appends to via the lines from r on through the direct jumps and
// calls that end them (their targets are known before they run, so the
// thread need not stop at them), up to a line whose end is already on
// the way (a loop: that end is reached first from its own line); it
// returns them and the last line.
func (t *Tracer) lines(th *thread, via []*x86branch.Run, r *x86branch.Run) ([]*x86branch.Run, *x86branch.Run) {
	for r.Branch && direct(r.End) && len(via) < maxChain {
		next := th.as.dec.Run(th.read, r.End.Target)
		if next.End.Addr == r.End.Addr || endOn(via, next.End.Addr) {
			break
		}
		via = append(via, r)
		r = next
	}
	return via, r
}

func endOn(lines []*x86branch.Run, addr uint64) bool {
	for _, v := range lines {
		if v.End.Addr == addr {
			return true
		}
	}
	return false
}

// plan lays out th's next run from the line r: the lines through direct
// jumps and calls (th.via, th.run) and, where the last ends in a
// conditional jump whose both ways can be told apart (split), those
// ways (th.fork); and arms the breakpoints at the ends. On an error
// (done: the thread is gone) the thread is to be single-stepped.
func (t *Tracer) plan(th *thread, r *x86branch.Run) (done bool, err error) {
	th.via, th.run = t.lines(th, th.via[:0], r)
	a0, a1 := th.run.End.Addr, th.run.End.Addr
	if th.fork = t.split(th); th.fork {
		a0, a1 = th.ways[0].last.End.Addr, th.ways[1].last.End.Addr
	}
	err = t.arm(th, a0, a1)
	if err != nil && th.fork && !errors.Is(err, unix.ESRCH) {
		// a way's end the kernel refuses (an address past user space
		// on a way not taken): stop before the jcc instead
		th.fork = false
		err = t.arm(th, th.run.End.Addr, th.run.End.Addr)
	}
	if err != nil {
		t.unplan(th)
		if errors.Is(err, unix.ESRCH) {
			return true, err
		}
		t.stats.BreakpointFails++
		t.disarm(th)
		return false, err
	}
	return false, nil
}

func (t *Tracer) unplan(th *thread) {
	th.via, th.run, th.fork, th.pre.Addr = th.via[:0], nil, false, 0
}

// flagRF is RFLAGS' resume flag: set by the kernel when it resumes a
// thread stopped by an instruction breakpoint, so that the instruction
// does not stop it again; cleared by the CPU once an instruction
// completed.
const flagRF = 1 << 16

// ran accounts the branch th stood before when its run started (th.pre:
// the line ends there, the run was planned from where it goes).
func (t *Tracer) ran(th *thread) {
	if th.pre.Addr != 0 {
		t.branch(th, th.pre, th.preTo)
		th.pre.Addr = 0
	}
}

// split: where th.run ends in a conditional jump, the thread need not
// stop before it: DR0 goes on the end of the way it takes when taken,
// DR1 on the end of its fall-through way, and the breakpoint that
// stops the thread tells which it took. Both ways are lined up
// (ways[0] taken, ways[1] not) and used if every line's end, the
// common ones' and the ways', is distinct: lines with distinct ends
// share no instruction (decoding from a shared one would give the same
// end), so neither way's end lies on a line run before it and a stop
// anywhere lies on one line only.
func (t *Tracer) split(th *thread) bool {
	in := th.run.End
	if !th.run.Branch || !in.Cond || in.Kind != x86branch.KindJump || in.Target == 0 || in.Target == in.Next() {
		return false
	}
	ends := append(th.ends[:0], in.Addr)
	for _, v := range th.via {
		ends = append(ends, v.End.Addr)
	}
	for i, to := range [2]uint64{in.Target, in.Next()} {
		w := &th.ways[i]
		w.via, w.last = t.lines(th, w.via[:0], th.as.dec.Run(th.read, to))
		for _, v := range w.via {
			ends = append(ends, v.End.Addr)
		}
		ends = append(ends, w.last.End.Addr)
	}
	th.ends = ends
	for i := range ends {
		for j := i + 1; j < len(ends); j++ {
			if ends[i] == ends[j] {
				return false
			}
		}
	}
	return true
}

// stopped accounts a stop at regs.Rip if it is the end of th's run.
func (t *Tracer) stopped(th *thread, regs *unix.PtraceRegs) bool {
	w, ok := th.atEnd(regs.Rip)
	if ok {
		t.bpStop(th, regs, w)
	}
	return ok
}

// atEnd reports whether ip is where th's run stops (a breakpoint): the
// end of th.run or, split, of a way (which one: w).
func (th *thread) atEnd(ip uint64) (w int, ok bool) {
	if !th.fork {
		return 0, ip == th.run.End.Addr
	}
	for i := range th.ways {
		if ip == th.ways[i].last.End.Addr {
			return i, true
		}
	}
	return 0, false
}

// through accounts the lines run through, each with the direct branch
// that ends it.
func (t *Tracer) through(th *thread, lines []*x86branch.Run) {
	for _, v := range lines {
		t.runLine(th, v.N, v.Last)
		t.branch(th, v.End, v.End.Target)
	}
}

// runLine accounts n instructions run straight, the last at last.
func (t *Tracer) runLine(th *thread, n uint32, last uint64) {
	if n > 0 {
		th.count += n
		th.lastOff = uint32(last - th.start)
		t.stats.Instructions += uint64(n)
	}
}

// forked accounts th.run's conditional jump going way w.
func (t *Tracer) forked(th *thread, w int) {
	in := th.run.End
	to := in.Target
	if w == 1 {
		to = in.Next()
	}
	t.branch(th, in, to)
}

// probed decides the probe from its stop (a SIGTRAP): true if the
// breakpoint stopped the thread before th.ip (nothing ran).
func (t *Tracer) probed(th *thread, regs *unix.PtraceRegs) bool {
	th.hwProbe = false
	code, err := getSiginfoCode(th.tid)
	if err == nil && code == trapHWBkpt && regs.Rip == th.ip {
		t.setHW(hwWorks, fmt.Sprintf("a breakpoint at %#x stopped thread %d", th.ip, th.tid))
		return true
	}
	t.disarm(th)
	t.setHW(hwIgnored, fmt.Sprintf("a breakpoint at %#x did not stop thread %d (si_code %d)", th.ip, th.tid, code))
	return false
}

// bpStop accounts a stop at the end of th's run (way w of a split one):
// the lines ran; the thread stands before the end (th.ip), whose
// registers are kept for bpResume.
func (t *Tracer) bpStop(th *thread, regs *unix.PtraceRegs, w int) {
	t.stats.BreakpointStops++
	t.ran(th)
	t.through(th, th.via)
	r := th.run
	t.runLine(th, r.N, r.Last)
	if th.fork {
		t.forked(th, w)
		t.through(th, th.ways[w].via)
		r = th.ways[w].last
		t.runLine(th, r.N, r.Last)
	}
	t.unplan(th)
	th.ip, th.rcx, th.sysret = r.End.Addr, regs.Rcx, false
	th.before, th.regs = true, *regs
}

// branch accounts the branch in that th stands before, going to next
// (x86branch.Next), as a single step of it would, and moves th.ip there.
func (t *Tracer) branch(th *thread, in x86branch.BranchInsn, next uint64) {
	th.count++
	th.lastOff = uint32(in.Addr - th.start)
	t.stats.Instructions++
	th.ip = next
	if in.Kind == x86branch.KindCall || in.Kind == x86branch.KindReturn || next != in.Next() {
		t.endBlock(th, trace.MajorITraceU, in.Kind.Minor(), next)
	}
}

// bpCut accounts a run stopped before its end by something else (a
// signal, the tracer's interrupt): the lines ran up to regs.Rip.
func (t *Tracer) bpCut(th *thread, regs *unix.PtraceRegs) {
	ip := regs.Rip
	defer func() { t.unplan(th); th.ip = ip }()
	if th.pre.Addr != 0 {
		if ip == th.pre.Addr && t.stayed(th, regs) {
			return
		}
		t.ran(th)
	}
	if i, n, last, ok := th.along(th.via, th.run, ip); ok {
		t.through(th, th.via[:i])
		t.runLine(th, n, last)
		return
	}
	if th.fork {
		for w := range th.ways {
			if i, n, last, ok := th.along(th.ways[w].via, th.ways[w].last, ip); ok {
				t.through(th, th.via)
				t.runLine(th, th.run.N, th.run.Last)
				t.forked(th, w)
				t.through(th, th.ways[w].via[:i])
				t.runLine(th, n, last)
				return
			}
		}
	}
	t.stats.BlocksLost++
}

// stayed reports whether a thread cut short at th.pre, the branch it
// stood before, ran nothing (a line or way of the run may end there: a
// loop can bring it back). With the resume flag still set it ran
// nothing (the CPU clears the flag once an instruction completed); a
// virtual machine may lose the flag, so registers all as they were at
// the stop say so too (a loop round that changes no register, flags
// included, comes back with the same registers: counted as not run
// only where the flag was lost).
func (t *Tracer) stayed(th *thread, regs *unix.PtraceRegs) bool {
	if regs.Eflags&flagRF != 0 {
		return true
	}
	a, b := *regs, th.regs
	a.Eflags &^= flagRF
	b.Eflags &^= flagRF
	return a == b
}

// along finds ip on the lines via then last: the line's index i (that of
// last is len(via)) and the n instructions of it run, the last at last.
func (th *thread) along(via []*x86branch.Run, r *x86branch.Run, ip uint64) (i int, n uint32, last uint64, ok bool) {
	for i = 0; i <= len(via); i++ {
		v := r
		if i < len(via) {
			v = via[i]
		}
		if n, last, ok = th.as.dec.Along(th.read, v, ip); ok {
			return i, n, last, true
		}
	}
	return 0, 0, 0, false
}

// repDone accounts the rep string instruction th.rep run natively from
// a stop before it (rcx th.repRCX) to a stop at ip with rcx: at its end
// (ip its fall-through) as single-stepping counts it, one per iteration
// and one for the check that ends it (callgrind's n + 1; 1 if rcx was
// 0); stopped inside (ip the instruction: a signal, the tracer's
// interrupt), the iterations done, the rest to be single-stepped. It
// reports whether ip was one of the two.
func (t *Tracer) repDone(th *thread, ip, rcx uint64) bool {
	in := th.rep
	th.rep.Addr = 0
	n := uint32(th.repRCX - rcx)
	switch ip {
	case in.Next():
		n++
	case in.Addr:
	default:
		t.stats.BlocksLost++
		th.ip = ip
		return false
	}
	if n > 0 {
		th.count += n
		th.lastOff = uint32(in.Addr - th.start)
		t.stats.Instructions += uint64(n)
	}
	th.ip, th.rcx = ip, rcx
	return true
}

// ptraceRegs reads a stopped thread for x86branch.Next.
type ptraceRegs struct {
	tid int
	r   *unix.PtraceRegs
}

func (p ptraceRegs) Flags() uint64 { return p.r.Eflags }

func (p ptraceRegs) Segment(s x86asm.Reg) uint64 {
	if s == x86asm.FS {
		return p.r.Fs_base
	}
	return p.r.Gs_base
}

func (p ptraceRegs) Read8(addr uint64) (uint64, bool) {
	var v uint64
	b := unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)
	if readCode(p.tid, addr, b) != 8 {
		return 0, false
	}
	return v, true
}

func (p ptraceRegs) Reg(r x86asm.Reg) uint64 {
	x := p.r
	switch r {
	case x86asm.RAX:
		return x.Rax
	case x86asm.RCX:
		return x.Rcx
	case x86asm.RDX:
		return x.Rdx
	case x86asm.RBX:
		return x.Rbx
	case x86asm.RSP:
		return x.Rsp
	case x86asm.RBP:
		return x.Rbp
	case x86asm.RSI:
		return x.Rsi
	case x86asm.RDI:
		return x.Rdi
	case x86asm.R8:
		return x.R8
	case x86asm.R9:
		return x.R9
	case x86asm.R10:
		return x.R10
	case x86asm.R11:
		return x.R11
	case x86asm.R12:
		return x.R12
	case x86asm.R13:
		return x.R13
	case x86asm.R14:
		return x.R14
	case x86asm.R15:
		return x.R15
	case x86asm.RIP:
		return x.Rip
	}
	return 0
}
