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
// the next line and continues: one stop per branch executed instead of
// one per instruction. An instruction Next cannot evaluate (a system
// call, rep, an encoding x86asm does not know, popf, far and loop
// branches) is single-stepped with the breakpoint off, as the single-step
// path does.

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
	offDR7 = offDR0 + 7*8
	// dr7Exec0: DR0 enabled (L0), execution (R/W0 00), length 1 (LEN0 00).
	dr7Exec0 = 1
	// trapHWBkpt is si_code TRAP_HWBKPT.
	trapHWBkpt = 4
)

func pokeUser(tid int, off, val uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_POKEUSR, uintptr(tid), off, val, 0, 0); e != 0 {
		return e
	}
	return nil
}

// arm puts th's breakpoint at addr (DR0) and enables it (DR7). One debug
// register only: the kernel switches each enabled one with the thread at
// every context switch, two per stop, where writing a debug register can
// be dear (a hypervisor's exit); keeping a loop's few line ends in
// DR0-DR3, so that no register moves per stop, costs more than it saves.
func (t *Tracer) arm(th *thread, addr uint64) error {
	if !th.armed || th.dr0 != addr {
		if err := pokeUser(th.tid, offDR0, uintptr(addr)); err != nil {
			return err
		}
		th.dr0 = addr
	}
	if !th.armed {
		if err := pokeUser(th.tid, offDR7, dr7Exec0); err != nil {
			return err
		}
		th.armed = true
	}
	return nil
}

// disarm turns th's breakpoint off (before single steps, at detach: a
// breakpoint left set would give the untraced thread a SIGTRAP).
func (t *Tracer) disarm(th *thread) {
	if th.armed {
		if pokeUser(th.tid, offDR7, 0) == nil {
			th.armed = false
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
		t.decided(&t.stats.Breakpoints, "work", "itrace: breakpoint stepping: hardware breakpoints stop the threads (%s): one stop per branch", why)
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
		if err := t.arm(th, th.ip); err != nil {
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
		if err := t.arm(th, r.End.Next()); err != nil {
			return false, nil
		}
		th.rep, th.repRCX = r.End, rcx
		t.stats.BreakpointRuns++
		if err := ptraceSig(unix.PTRACE_CONT, th.tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return true, fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
		}
		return true, nil
	}
	if th.before {
		// Stopped by the breakpoint before r's end: run the branch from
		// here (the kernel set the resume flag, so the breakpoint does
		// not stop it again) and the line after it.
		th.before = false
		if r.N == 0 {
			if !r.Branch {
				return false, nil
			}
			next, ok := x86branch.Next(r.End, ptraceRegs{tid: th.tid, r: &th.regs})
			if !ok {
				return false, nil
			}
			to := t.chain(th, th.as.dec.Run(th.read, next))
			if err := t.arm(th, to.End.Addr); err != nil {
				// (the branch is then single-stepped, not yet counted)
				if errors.Is(err, unix.ESRCH) {
					return true, nil
				}
				t.stats.BreakpointFails++
				t.disarm(th)
				th.via = th.via[:0]
				return false, nil
			}
			t.branch(th, r.End, next)
			r = to
		}
	} else if r.N == 0 {
		// th.ip is the line's end: a breakpoint on the next instruction
		// would stop before it at once (or, with the flags' resume bit
		// left set by a rep iteration, not at all): step it.
		return false, nil
	} else {
		r = t.chain(th, r)
	}
	if err := t.arm(th, r.End.Addr); err != nil {
		th.via = th.via[:0]
		if errors.Is(err, unix.ESRCH) {
			return true, nil
		}
		t.stats.BreakpointFails++
		t.disarm(th)
		return false, nil
	}
	th.run = r
	t.stats.BreakpointRuns++
	if err := ptraceSig(unix.PTRACE_CONT, th.tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return true, fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
	}
	return true, nil
}

// maxChain bounds the lines one breakpoint run goes through.
const maxChain = 16

// direct reports whether the branch in always goes to its target, known
// without the registers: a direct jmp or call.
func direct(in x86branch.BranchInsn) bool {
	return in.Target != 0 && !in.Cond && (in.Kind == x86branch.KindJump || in.Kind == x86branch.KindCall) && in.Len != 0
}

// chain extends the run r through the direct jumps and calls that end
// it: their targets are known before they run, so the thread need not
// stop at them. th.via gets the lines run through (each ending in such a
// branch, whose target starts the next); chain returns the last line,
// whose end the breakpoint goes on. Lines with distinct ends never share
// an instruction (decoding from a shared one would give the same end),
// so a stop cut short lies on one line only; a chain that comes back to
// a line's end already in it stops before it (a loop: that end is
// reached first from its own line).
func (t *Tracer) chain(th *thread, r *x86branch.Run) *x86branch.Run {
	th.via = th.via[:0]
	for r.Branch && direct(r.End) && len(th.via) < maxChain {
		next := th.as.dec.Run(th.read, r.End.Target)
		if next.End.Addr == r.End.Addr || next.End.Addr == 0 {
			break
		}
		loop := false
		for _, v := range th.via {
			if v.End.Addr == next.End.Addr {
				loop = true
				break
			}
		}
		if loop {
			break
		}
		th.via = append(th.via, r)
		r = next
	}
	return r
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

// bpStop accounts a stop before th.run's end: the line ran; the thread
// stands before its end (th.ip), whose registers are kept for bpResume.
func (t *Tracer) bpStop(th *thread, regs *unix.PtraceRegs) {
	r := th.run
	th.run = nil
	t.stats.BreakpointStops++
	for _, v := range th.via {
		t.runLine(th, v, v.N)
		t.branch(th, v.End, v.End.Target)
	}
	th.via = th.via[:0]
	if r.N > 0 {
		th.count += r.N
		th.lastOff = uint32(r.Last - th.start)
		t.stats.Instructions += uint64(r.N)
	}
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
// signal, the tracer's interrupt): the line ran up to ip.
func (t *Tracer) bpCut(th *thread, ip uint64) {
	r := th.run
	th.run = nil
	via := th.via
	th.via = th.via[:0]
	for i, v := range append(via, r) {
		if n, last, ok := th.as.dec.Along(th.read, v, ip); ok {
			for _, w := range via[:i] {
				t.runLine(th, w, w.N)
				t.branch(th, w.End, w.End.Target)
			}
			if n > 0 {
				th.count += n
				th.lastOff = uint32(last - th.start)
				t.stats.Instructions += uint64(n)
			}
			th.ip = ip
			return
		}
	}
	t.stats.BlocksLost++
	th.ip = ip
}

// runLine accounts the n instructions of the line r, the last at r.Last.
func (t *Tracer) runLine(th *thread, r *x86branch.Run, n uint32) {
	if n > 0 {
		th.count += n
		th.lastOff = uint32(r.Last - th.start)
		t.stats.Instructions += uint64(n)
	}
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
