/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pitrace_block.h - forward block decoding for ITrace block-stepping (BTF:
 * a trap on taken branches only).  A block is the straight line of
 * instructions from its first address up to the first taken branch.  With
 * BTF the trap names only where that branch went; the decoder walks the
 * line from the block's start and finds which branch it was: the first
 * unconditional transfer (jmp, call, ret, iret, indirect) ends the line, a
 * conditional one (jcc, loop, jrcxz) ends it only if the trap's ip is its
 * target.  Like pitrace_insn.c, pure C without kernel headers: the host
 * test (make kitrace-insn-test) compiles the same file in user space.
 */
#ifndef _PITRACE_BLOCK_H
#define _PITRACE_BLOCK_H

#include "pitrace_insn.h"

/*
 * longest line walked: a longer block is single-stepped.  The scan runs
 * under ith_lock with interrupts off, reading each instruction with
 * copy_from_user_nofault: 512 (the ptrace path's bound) keeps that to tens
 * of microseconds where 4096 let crafted straight-line code hold
 * interrupts off for hundreds.
 */
#define PT_BLOCK_MAX	512

/* Copy n bytes at user address addr into buf: 0, or nonzero if any is unmapped. */
typedef int (*pt_read_fn)(void *ctx, unsigned long long addr,
			  unsigned char *buf, unsigned int n);

/* Decode the instruction at addr (16 bytes, or up to its page's end). */
void pt_insn_fetch(pt_read_fn rd, void *ctx, unsigned long long addr,
		   struct pt_insn *in);

/* pt_block_scan's answer */
#define PT_BLOCK_STEPPABLE	1	/* its end is known from the trap's ip alone */
#define PT_BLOCK_PROBE		2	/* and a trap after its first instruction alone is told apart */
#define PT_BLOCK_NEEDS_SP	4	/* two ends are told apart by the stack pointer only */

struct pt_scan {
	unsigned int flags;		/* PT_BLOCK_* (0: single-step it) */
	unsigned int len;		/* instructions on the line, the end included */
	unsigned long long first_next;	/* the fall-through of the first instruction */
	int first_spk, first_sp;	/* the first instruction's stack pointer change */
};

/*
 * Before the block at start runs: can its end be decoded exactly from the
 * trap's ip?  Not if the line holds what block-stepping cannot count (a
 * rep string instruction: callgrind counts its iterations from per
 * iteration traps; syscall, int n and the like; an undecodable or
 * unmapped instruction; xbegin), if it is longer than PT_BLOCK_MAX, or if
 * two of its possible ends could reach the same ip with the same stack
 * pointer (two jcc with one target, a jcc and the final jmp or call to the
 * same place, a jcc and an indirect end, whose target is unknown, with no
 * known difference of the stack pointer between them: a ret after pops
 * is told from a jcc before them).  PT_BLOCK_PROBE: also a trap after the
 * first instruction alone (BTF ignored) is told apart from every end: the
 * block can tell whether BTF works.
 */
void pt_block_scan(pt_read_fn rd, void *ctx, unsigned long long start,
		   struct pt_scan *out);

struct pt_block {
	unsigned int count;		/* instructions, the last one included */
	unsigned long long last;	/* the address of the last instruction */
	unsigned char kind;		/* its PT_INSN_* */
};

/*
 * The block from start that ended with a taken branch to target, the stack
 * pointer then dsp bytes from the start's (dspk: known; else the scan's
 * PT_BLOCK_NEEDS_SP lines are not exact): 0, or -1 if no branch on the
 * line can have gone there (or the line is not decodable).  The first
 * branch that can is taken: exact when pt_block_scan said
 * PT_BLOCK_STEPPABLE.
 */
int pt_block_walk(pt_read_fn rd, void *ctx, unsigned long long start,
		  unsigned long long target, long long dsp, int dspk,
		  struct pt_block *out);

/*
 * The instructions run from start until ip was next, with no branch taken
 * (an interrupt, fault or signal came in the middle of a block): out->count
 * instructions, the last at out->last (count 0: ip is start).  0, or -1 if
 * ip is not on the line before its first unconditional transfer.
 */
int pt_block_walk_to(pt_read_fn rd, void *ctx, unsigned long long start,
		     unsigned long long ip, struct pt_block *out);

#endif /* _PITRACE_BLOCK_H */
