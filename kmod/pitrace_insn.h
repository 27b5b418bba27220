/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pitrace_insn.h - x86-64 instruction length and control-transfer kind,
 * for ITrace's single-step handler (the kernel's insn_decode() is not
 * exported to modules on 6.1).  Pure C without kernel headers, so that
 * libperfutil/kmodbackend/internal/insncheck compiles the same file in user
 * space and checks it against golang.org/x/arch/x86/x86asm.
 */
#ifndef _PITRACE_INSN_H
#define _PITRACE_INSN_H

/* Kinds: the same numbers as internal/x86branch.Kind. */
#define PT_INSN_PLAIN		0	/* moves no control */
#define PT_INSN_CALL		1
#define PT_INSN_RETURN		2
#define PT_INSN_JUMP		3	/* jmp, jcc, loop, jrcxz, xbegin */
#define PT_INSN_IRET		4
#define PT_INSN_SYSCALL		5	/* syscall, sysenter, int 0x80 */
#define PT_INSN_OTHER		6	/* int3, int n, ud2, hlt, ... */
#define PT_INSN_UNDECODABLE	7	/* invalid in 64-bit mode, or truncated */

struct pt_insn {
	unsigned char len;	/* 1..15; 0 when undecodable */
	unsigned char kind;	/* PT_INSN_* */
	unsigned char rep;	/* rep/repne prefixed string instruction */
	unsigned char cond;	/* a branch that may fall through: jcc, loop, jrcxz, xbegin */
	unsigned char direct;	/* a relative branch: its target is next + rel */
	int rel;		/* that displacement */
	unsigned char spk;	/* sp is known: the change of the stack pointer */
	int sp;			/* (a taken call -8, ret +8, push -8, sub rsp,16 -16, ...) */
};

/* Decode the instruction at code[0..n-1]; returns its length (0: undecodable). */
int pt_insn_decode(const unsigned char *code, unsigned int n, struct pt_insn *out);

#endif /* _PITRACE_INSN_H */
