// Package x86branch classifies x86-64 instructions for the ITrace tracers:
// which instructions move control (calls, returns, jumps, system calls) and,
// for block-stepping, which instructions a block ran between two stops
// (block.go). The ptrace tracer of pitraced and the module's instruction
// tables (checked against it) use it.
package x86branch

import (
	"golang.org/x/arch/x86/x86asm"

	"perfinsp/format/trace"
)

// Kind is the control-transfer kind of one instruction.
type Kind uint8

// Instruction kinds.
const (
	KindPlain       Kind = iota // no control transfer
	KindCall                    // call (near or far)
	KindReturn                  // ret (near or far)
	KindJump                    // unconditional or conditional jump, loop
	KindIret                    // iret
	KindSyscall                 // syscall, sysenter, int 0x80
	KindOther                   // other instructions that may move control (int3, int n, ud2, hlt)
	KindUndecodable             // x86asm could not decode it (VEX/EVEX encodings and unknown opcodes)
)

// Insn is one classified instruction.
type Insn struct {
	Len  uint8
	Kind Kind
	// Rep: a rep-prefixed string instruction, which executes once per
	// iteration and stays at its own address until the count is done.
	Rep bool
}

// Classify decodes the x86-64 instruction at the start of code. Encodings
// x86asm does not know (VEX and EVEX: AVX, AVX2, AVX-512) never transfer
// control; they come back as KindUndecodable with Len 0, and a tracer
// takes the next ip as their fall-through.
func Classify(code []byte) Insn {
	in, _ := decode(code)
	return in
}

// decode is Classify that also returns x86asm's decoding (Op 0 where
// x86asm has none: endbr, undecodable encodings), for the block decoder's
// branch targets.
func decode(code []byte) (Insn, x86asm.Inst) {
	if len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb) {
		return Insn{Len: 4}, x86asm.Inst{} // endbr64 / endbr32 (CET), unknown to x86asm
	}
	in, err := x86asm.Decode(code, 64)
	if err != nil || in.Len == 0 || in.Op == 0 {
		// (Op 0 without an error: x86asm took a prefix of an encoding
		// it does not know for a 1-byte instruction, as objdump prints
		// a lone prefix: CET's rdssp and incsspd (F3 0F 1E /1, F3 0F AE
		// /5), saveprevssp, rstorssp, wruss. The next instruction does
		// not start after it: its length is not known.)
		return Insn{Kind: KindUndecodable}, x86asm.Inst{}
	}
	out := Insn{Len: uint8(in.Len)}
	switch in.Op {
	case x86asm.VZEROUPPER, x86asm.VZEROALL:
		// x86asm takes the byte after them for a ModRM; they are
		// C5 xx 77 and C4 xx xx 77 (glibc's AVX2 string functions end
		// with vzeroupper; ret: a block decoder must not swallow the ret).
		out.Len = 3
		if code[0] == 0xc4 {
			out.Len = 4
		}
	case x86asm.CALL, x86asm.LCALL:
		out.Kind = KindCall
	case x86asm.RET, x86asm.LRET:
		out.Kind = KindReturn
	case x86asm.JMP, x86asm.LJMP, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE,
		x86asm.JECXZ, x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP,
		x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JRCXZ, x86asm.JS, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE,
		x86asm.XBEGIN:
		out.Kind = KindJump
	case x86asm.IRET, x86asm.IRETD, x86asm.IRETQ:
		out.Kind = KindIret
	case x86asm.SYSCALL, x86asm.SYSENTER:
		out.Kind = KindSyscall
	case x86asm.INT:
		out.Kind = KindOther
		if imm, ok := in.Args[0].(x86asm.Imm); ok && imm == 0x80 {
			out.Kind = KindSyscall
		}
	case x86asm.INTO, x86asm.UD0, x86asm.UD1, x86asm.UD2, x86asm.HLT, x86asm.SYSRET, x86asm.SYSEXIT:
		out.Kind = KindOther
	case x86asm.MOVSB, x86asm.MOVSW, x86asm.MOVSD, x86asm.MOVSQ, x86asm.STOSB, x86asm.STOSW, x86asm.STOSD,
		x86asm.STOSQ, x86asm.LODSB, x86asm.LODSW, x86asm.LODSD, x86asm.LODSQ, x86asm.CMPSB, x86asm.CMPSW,
		x86asm.CMPSD, x86asm.CMPSQ, x86asm.SCASB, x86asm.SCASW, x86asm.SCASD, x86asm.SCASQ, x86asm.INSB,
		x86asm.INSW, x86asm.INSD, x86asm.OUTSB, x86asm.OUTSW, x86asm.OUTSD:
		for _, p := range in.Prefix {
			if p == 0 {
				break
			}
			if p&0xff == x86asm.PrefixREP || p&0xff == x86asm.PrefixREPN {
				out.Rep = true
			}
		}
	}
	return out, in
}

// Minor returns the ITRACE branch minor code (PI's arc type) of a taken
// branch ended by an instruction of kind k.
func (k Kind) Minor() uint32 {
	switch k {
	case KindCall:
		return trace.ITraceCall
	case KindReturn:
		return trace.ITraceReturn
	case KindJump:
		return trace.ITraceJump
	case KindIret:
		return trace.ITraceIret
	case KindUndecodable:
		return trace.ITraceUndefd
	}
	return trace.ITraceOther
}

// TypeWords are PI's words for the arc report's types, by minor code.
var TypeWords = [...]string{"INTRPT", "CALL", "RETURN", "JUMP", "IRET", "OTHER", "UNDEFD", "ALLOC"}

// TypeWord returns the word of an arc type.
func TypeWord(t uint32) string {
	if int(t) < len(TypeWords) {
		return TypeWords[t]
	}
	return "UNDEFD"
}
