package x86branch

import "golang.org/x/arch/x86/x86asm"

// Breakpoint stepping runs straight-line code natively and stops before
// the first instruction that may move control (a hardware execution
// breakpoint on it). A Run is that stretch; Next evaluates the branch at
// its end from the registers at the stop, so the tracer knows where it
// goes before it runs and can put the next breakpoint at once: one stop
// per branch executed.

// Run is the straight line from Start: N instructions that move no
// control, then End, the first that may (or the one MaxBlock cuts at).
type Run struct {
	Start uint64
	N     uint32
	Last  uint64 // the address of the Nth instruction (0 if N is 0)
	End   BranchInsn
	// Branch: End is a branch Next can evaluate (jcc, jmp, call, ret
	// near; direct or through a register or memory operand). Otherwise
	// End is stepped (a system call, rep, an instruction x86asm cannot
	// decode, popf, ...), or it is a plain instruction where MaxBlock cut
	// the line (Cut) and a new run starts there.
	Branch bool
	Cut    bool
}

// plain reports whether a run goes on through the instruction: it moves
// no control and needs no step of its own.
func plain(in BranchInsn) bool {
	return in.Kind == KindPlain && !in.Rep && in.Len != 0 && in.Op == 0
}

// evaluable reports whether Next can tell where the branch goes.
func evaluable(in BranchInsn) bool {
	switch in.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL,
		x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS,
		x86asm.JRCXZ, x86asm.JECXZ:
		return in.Target != 0 && in.Target != in.Next()
	case x86asm.JMP, x86asm.CALL:
		if in.Target != 0 {
			return true
		}
		switch a := in.Arg.(type) {
		case x86asm.Reg:
			return a >= x86asm.RAX && a <= x86asm.R15
		case x86asm.Mem:
			return in.AddrSize == 64 && (a.Segment == 0 || a.Segment == x86asm.FS || a.Segment == x86asm.GS) &&
				(a.Base == 0 || a.Base == x86asm.RIP || a.Base >= x86asm.RAX && a.Base <= x86asm.R15) &&
				(a.Index == 0 || a.Index >= x86asm.RAX && a.Index <= x86asm.R15)
		}
	case x86asm.RET:
		return true
	}
	return false
}

// Run returns the straight line from start (cached like blocks).
func (d *Decoder) Run(read CodeReader, start uint64) *Run {
	if r, ok := d.runs[start]; ok {
		return r
	}
	r := &Run{Start: start}
	pc := start
	for {
		in := d.Insn(read, pc)
		if !plain(in) || r.N == MaxBlock {
			r.End = in
			r.Branch = evaluable(in)
			r.Cut = plain(in)
			break
		}
		r.N++
		r.Last = pc
		pc = in.Next()
	}
	d.runs[start] = r
	return r
}

// Along counts the instructions of r run from its start to a stop at ip
// before End ran (a signal, an interrupt of the tracer): n, the last at
// last. ok is false if ip is not on the line.
func (d *Decoder) Along(read CodeReader, r *Run, ip uint64) (n uint32, last uint64, ok bool) {
	pc := r.Start
	for i := uint32(0); i <= r.N; i++ {
		if pc == ip {
			return i, last, true
		}
		last = pc
		pc = d.Insn(read, pc).Next()
	}
	return 0, 0, false
}

// Regs are what Next reads of a stopped thread: its registers by x86asm
// name (64-bit general registers, RIP), its flags, and 8 bytes of its
// memory.
type Regs interface {
	Reg(r x86asm.Reg) uint64
	Flags() uint64
	Segment(r x86asm.Reg) uint64 // FS and GS bases
	Read8(addr uint64) (uint64, bool)
}

// RFLAGS bits.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagOF = 1 << 11
)

// Next tells where the branch in (evaluable) goes from a thread stopped
// before it with regs. ok is false where a memory operand cannot be read.
func Next(in BranchInsn, regs Regs) (next uint64, ok bool) {
	f := regs.Flags()
	cf, pf, zf, sf, of := f&flagCF != 0, f&flagPF != 0, f&flagZF != 0, f&flagSF != 0, f&flagOF != 0
	var taken bool
	switch in.Op {
	case x86asm.JO:
		taken = of
	case x86asm.JNO:
		taken = !of
	case x86asm.JB:
		taken = cf
	case x86asm.JAE:
		taken = !cf
	case x86asm.JE:
		taken = zf
	case x86asm.JNE:
		taken = !zf
	case x86asm.JBE:
		taken = cf || zf
	case x86asm.JA:
		taken = !cf && !zf
	case x86asm.JS:
		taken = sf
	case x86asm.JNS:
		taken = !sf
	case x86asm.JP:
		taken = pf
	case x86asm.JNP:
		taken = !pf
	case x86asm.JL:
		taken = sf != of
	case x86asm.JGE:
		taken = sf == of
	case x86asm.JLE:
		taken = zf || sf != of
	case x86asm.JG:
		taken = !zf && sf == of
	case x86asm.JRCXZ:
		taken = regs.Reg(x86asm.RCX) == 0
	case x86asm.JECXZ:
		taken = uint32(regs.Reg(x86asm.RCX)) == 0
	case x86asm.RET:
		v, ok := regs.Read8(regs.Reg(x86asm.RSP))
		return v, ok
	default: // jmp, call
		if in.Target != 0 {
			return in.Target, true
		}
		switch a := in.Arg.(type) {
		case x86asm.Reg:
			return regs.Reg(a), true
		case x86asm.Mem:
			addr := uint64(a.Disp)
			switch a.Base {
			case 0:
			case x86asm.RIP:
				addr += in.Next()
			default:
				addr += regs.Reg(a.Base)
			}
			if a.Index != 0 {
				addr += regs.Reg(a.Index) * uint64(a.Scale)
			}
			if a.Segment != 0 {
				addr += regs.Segment(a.Segment)
			}
			return regs.Read8(addr)
		}
		return 0, false
	}
	if taken {
		return in.Target, true
	}
	return in.Next(), true
}
