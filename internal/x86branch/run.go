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
	return in.Kind == KindPlain && !in.Rep && in.Len != 0 && in.Op == 0 || in.Kind == KindUndecodable && in.VexLen != 0
}

// runNext is the instruction's fall-through on a run (a VEX one's by
// its VexLen).
func runNext(in BranchInsn) uint64 {
	if in.Kind == KindUndecodable {
		return in.Addr + uint64(in.VexLen)
	}
	return in.Next()
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
		pc = runNext(in)
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
		pc = runNext(d.Insn(read, pc))
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

// vexLen returns the length of a VEX (C4, C5) or EVEX (62) encoded
// instruction at the start of code, after any segment or address-size
// prefixes, or 0 if code holds none (or too few bytes). x86asm does not
// decode them; none moves control, and a run goes on through them.
func vexLen(code []byte) int {
	i := 0
	for i < len(code) && i < 4 {
		switch code[i] {
		case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x67:
			i++
			continue
		}
		break
	}
	if i+2 > len(code) {
		return 0
	}
	var mmap byte
	var op byte
	switch code[i] {
	case 0xc5: // C5 [R vvvv L pp] op
		mmap, i = 1, i+2
	case 0xc4: // C4 [RXB m-mmmm] [W vvvv L pp] op
		if i+3 > len(code) {
			return 0
		}
		mmap, i = code[i+1]&0x1f, i+3
	case 0x62: // 62 [RXBR' 0 mmm] [W vvvv 1 pp] [z L'L b V' aaa] op
		if i+4 > len(code) || code[i+2]&0x04 == 0 {
			return 0
		}
		mmap, i = code[i+1]&0x07, i+4
	default:
		return 0
	}
	if i >= len(code) {
		return 0
	}
	op, i = code[i], i+1
	imm := 0
	switch mmap {
	case 1: // 0F
		if op == 0x77 {
			return i // vzeroupper, vzeroall: no ModRM
		}
		switch op {
		case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
			imm = 1
		}
	case 2: // 0F38
	case 3: // 0F3A
		imm = 1
	default:
		return 0
	}
	if i >= len(code) {
		return 0
	}
	modrm := code[i]
	i++
	mod, rm := modrm>>6, modrm&7
	if mod != 3 {
		if rm == 4 {
			if i >= len(code) {
				return 0
			}
			sib := code[i]
			i++
			if mod == 0 && sib&7 == 5 {
				i += 4
			}
		} else if mod == 0 && rm == 5 {
			i += 4 // rip + disp32
		}
		switch mod {
		case 1:
			i++
		case 2:
			i += 4
		}
	}
	i += imm
	if i > len(code) || i > 15 {
		return 0
	}
	return i
}
