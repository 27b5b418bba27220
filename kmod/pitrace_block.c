// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_block.c - forward block decoding for ITrace block-stepping
 * (pitrace_block.h).  Pure C: compiled into the module and, by the host
 * test, into user space.
 */
#include "pitrace_block.h"

void pt_insn_fetch(pt_read_fn rd, void *ctx, unsigned long long addr,
		   struct pt_insn *in)
{
	unsigned char code[16];
	unsigned int n = sizeof(code);

	if (rd(ctx, addr, code, n)) {
		/* the 16 bytes cross into an unmapped page: read to its end */
		n = 4096 - (unsigned int)(addr & 4095);
		if (n >= sizeof(code) || rd(ctx, addr, code, n))
			n = 0;
	}
	pt_insn_decode(code, n, in);
}

static unsigned long long target_of(unsigned long long a,
				    const struct pt_insn *in)
{
	return a + in->len + (long long)in->rel;
}

/* An instruction block-stepping cannot count, or that ends no line cleanly. */
static int unsteppable(const struct pt_insn *in)
{
	if (!in->len || in->rep)
		return 1;
	switch (in->kind) {
	case PT_INSN_SYSCALL:
	case PT_INSN_OTHER:
	case PT_INSN_UNDECODABLE:
		return 1;
	}
	/*
	 * A jmp or jcc to its own fall-through: single-stepping sees no
	 * branch (the next ip is the fall-through), BTF traps if it is taken.
	 */
	if (in->kind == PT_INSN_JUMP && in->direct && !in->rel)
		return 1;
	/* xbegin, a jcc with 0x66: no target known for sure */
	return in->cond && !in->direct;
}

#define PT_SCAN_JCC	64	/* jcc targets compared; more: single-step */

void pt_block_scan(pt_read_fn rd, void *ctx, unsigned long long start,
		   struct pt_scan *out)
{
	unsigned long long a = start, t[PT_SCAN_JCC + 1];
	unsigned int n = 0, nt = 0, i, j;
	int first_branch = 0, end_direct = 0;
	struct pt_insn in;

	out->flags = 0;
	out->len = 0;
	out->first_next = 0;
	for (;;) {
		if (n == PT_BLOCK_MAX)
			return;
		pt_insn_fetch(rd, ctx, a, &in);
		if (unsteppable(&in))
			return;
		if (!n) {
			out->first_next = a + in.len;
			first_branch = in.kind != PT_INSN_PLAIN;
		}
		n++;
		if (in.kind == PT_INSN_PLAIN) {
			a += in.len;
			continue;
		}
		if (in.cond) {
			if (nt == PT_SCAN_JCC)
				return;
			t[nt++] = target_of(a, &in);
			a += in.len;
			continue;
		}
		/* the end of the line: jmp, call, ret, iret, indirect */
		if (in.direct) {
			t[nt++] = target_of(a, &in);
			end_direct = 1;
		} else if (nt) {
			return;	/* a jcc's target may be the indirect one's */
		}
		break;
	}
	for (i = 0; i < nt; i++)
		for (j = i + 1; j < nt; j++)
			if (t[i] == t[j])
				return;
	out->len = n;
	out->flags = PT_BLOCK_STEPPABLE;
	/*
	 * The probe: a first instruction that moves no control, an end whose
	 * target is known, and no end reaching the first one's fall-through.
	 */
	if (first_branch || !end_direct)
		return;
	for (i = 0; i < nt; i++)
		if (t[i] == out->first_next)
			return;
	out->flags |= PT_BLOCK_PROBE;
}

int pt_block_walk(pt_read_fn rd, void *ctx, unsigned long long start,
		  unsigned long long target, struct pt_block *out)
{
	unsigned long long a = start;
	struct pt_insn in;
	unsigned int n;

	for (n = 1; n <= PT_BLOCK_MAX; n++) {
		pt_insn_fetch(rd, ctx, a, &in);
		if (!in.len)
			return -1;
		out->count = n;
		out->last = a;
		out->kind = in.kind;
		if (in.kind == PT_INSN_SYSCALL || in.kind == PT_INSN_OTHER ||
		    in.rep)
			return -1;
		if (in.kind == PT_INSN_PLAIN) {
			a += in.len;
			continue;
		}
		if (in.cond) {
			if (in.direct && target_of(a, &in) == target)
				return 0;	/* taken */
			a += in.len;
			continue;
		}
		/* unconditional: the end; a direct one must have gone there */
		return in.direct && target_of(a, &in) != target ? -1 : 0;
	}
	return -1;
}

int pt_block_walk_to(pt_read_fn rd, void *ctx, unsigned long long start,
		     unsigned long long ip, struct pt_block *out)
{
	unsigned long long a = start;
	struct pt_insn in;
	unsigned int n;

	out->count = 0;
	out->last = start;
	out->kind = PT_INSN_PLAIN;
	for (n = 0; n < PT_BLOCK_MAX; n++) {
		if (a == ip)
			return 0;
		pt_insn_fetch(rd, ctx, a, &in);
		if (!in.len || in.rep ||
		    (in.kind != PT_INSN_PLAIN && !in.cond))
			return -1;
		out->count = n + 1;
		out->last = a;
		out->kind = in.kind;
		a += in.len;
	}
	return a == ip ? 0 : -1;
}
