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

#define PT_SCAN_JCC	64	/* jcc on a line compared; more: single-step */

/* A possible end of a line: where it goes and the stack pointer then. */
struct pt_end {
	unsigned long long t;
	long long sp;
	int tk, sk;		/* known */
};

/* 1 if a and b are told apart (*by_sp: only by the stack pointer) */
static int apart(const struct pt_end *a, const struct pt_end *b, int *by_sp)
{
	if (a->tk && b->tk && a->t != b->t)
		return 1;
	if (a->sk && b->sk && a->sp != b->sp) {
		*by_sp = 1;
		return 1;
	}
	return 0;
}

void pt_block_scan(pt_read_fn rd, void *ctx, unsigned long long start,
		   struct pt_scan *out)
{
	struct pt_end e[PT_SCAN_JCC + 1], probe;
	unsigned long long a = start;
	unsigned int n = 0, ne = 0, i, j;
	int first_branch = 0, by_sp = 0, dk = 1;
	long long d = 0;
	struct pt_insn in;

	out->flags = 0;
	out->len = 0;
	out->first_next = 0;
	out->first_spk = 0;
	out->first_sp = 0;
	for (;;) {
		if (n == PT_BLOCK_MAX)
			return;
		pt_insn_fetch(rd, ctx, a, &in);
		if (unsteppable(&in))
			return;
		if (!n) {
			out->first_next = a + in.len;
			out->first_spk = in.spk;
			out->first_sp = in.sp;
			first_branch = in.kind != PT_INSN_PLAIN;
		}
		n++;
		if (in.kind == PT_INSN_PLAIN) {
			d += in.sp;
			dk = dk && in.spk;
			a += in.len;
			continue;
		}
		if (ne == PT_SCAN_JCC)
			return;
		e[ne].t = in.direct ? target_of(a, &in) : 0;
		e[ne].tk = in.direct;
		e[ne].sp = d + (in.cond ? 0 : in.sp);
		e[ne].sk = dk && (in.cond || in.spk);
		ne++;
		if (in.cond) {
			a += in.len;
			continue;
		}
		break;	/* the end of the line: jmp, call, ret, iret, indirect */
	}
	for (i = 0; i < ne; i++)
		for (j = i + 1; j < ne; j++)
			if (!apart(&e[i], &e[j], &by_sp))
				return;
	out->len = n;
	out->flags = PT_BLOCK_STEPPABLE;
	/* the probe: a first instruction that moves no control, told apart */
	if (!first_branch) {
		probe.t = out->first_next;
		probe.tk = 1;
		probe.sp = out->first_sp;
		probe.sk = out->first_spk;
		for (i = 0; i < ne; i++)
			if (!apart(&probe, &e[i], &by_sp))
				break;
		if (i == ne)
			out->flags |= PT_BLOCK_PROBE;
	}
	if (by_sp)
		out->flags |= PT_BLOCK_NEEDS_SP;
}

int pt_block_walk(pt_read_fn rd, void *ctx, unsigned long long start,
		  unsigned long long target, long long dsp, int dspk,
		  struct pt_block *out)
{
	unsigned long long a = start;
	struct pt_insn in;
	unsigned int n;
	long long d = 0;
	int dk = 1;

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
			d += in.sp;
			dk = dk && in.spk;
			a += in.len;
			continue;
		}
		if (in.cond) {
			if (in.direct && target_of(a, &in) == target &&
			    (!dk || !dspk || d == dsp))
				return 0;	/* taken */
			a += in.len;
			continue;
		}
		/* unconditional: the end; it must have gone there */
		if (in.direct && target_of(a, &in) != target)
			return -1;
		if (dk && in.spk && dspk && d + in.sp != dsp)
			return -1;
		return 0;
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
