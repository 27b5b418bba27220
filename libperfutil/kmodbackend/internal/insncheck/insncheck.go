//go:build cgo

// Package insncheck compiles the pitrace module's x86-64 instruction
// decoder (kmod/pitrace_insn.c) in user space, so that a test can check it
// against golang.org/x/arch/x86/x86asm (libperfutil/itrace.Classify), the
// decoder of the ptrace path. It is never linked into a tool.
package insncheck

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../kmod -Wall -Werror
#include "pitrace_insn.c"
*/
import "C"

import "unsafe"

// Insn is the module decoder's answer for one instruction.
type Insn struct {
	Len  int
	Kind int // PT_INSN_*: the numbers of itrace.Kind
	Rep  bool
}

// Decode runs pt_insn_decode on code.
func Decode(code []byte) Insn {
	var out C.struct_pt_insn
	if len(code) == 0 {
		return Insn{Kind: int(C.PT_INSN_UNDECODABLE)}
	}
	n := C.pt_insn_decode((*C.uchar)(unsafe.Pointer(&code[0])), C.uint(len(code)), &out)
	return Insn{Len: int(n), Kind: int(out.kind), Rep: out.rep != 0}
}

// Branch is the module decoder's answer on a branch's target and
// condition, and on the instruction's change of the stack pointer.
type Branch struct {
	Cond, Direct bool
	Rel          int // target = next + Rel when Direct
	SPKnown      bool
	SP           int // bytes the stack pointer moves (taken, for call and ret)
}

// DecodeBranch runs pt_insn_decode on code and returns its branch fields.
func DecodeBranch(code []byte) Branch {
	var out C.struct_pt_insn
	if len(code) == 0 {
		return Branch{}
	}
	C.pt_insn_decode((*C.uchar)(unsafe.Pointer(&code[0])), C.uint(len(code)), &out)
	return Branch{Cond: out.cond != 0, Direct: out.direct != 0, Rel: int(out.rel), SPKnown: out.spk != 0, SP: int(out.sp)}
}
