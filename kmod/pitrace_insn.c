// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_insn.c - x86-64 (64-bit mode) instruction length decoder and
 * control-transfer classification for ITrace (see pitrace_insn.h).
 *
 * Length = prefixes + (VEX/EVEX/XOP prefix) + opcode + ModRM/SIB/disp +
 * immediate.  Only what a length and the kind need is decoded: operands
 * are not.  Opcodes invalid in 64-bit mode are undecodable (len 0): they
 * raise #UD, which reaches the tracer as a signal, never as a step.
 */
#include "pitrace_insn.h"

/* 1-byte opcode map: bit 0 ModRM, bits 1-3 immediate kind. */
#define M	0x01	/* has ModRM */
#define I8	0x02	/* imm8 */
#define IZ	0x04	/* imm16/32 by operand size */
#define I16	0x06	/* imm16 */
#define IV	0x08	/* imm16/32/64 (mov r, imm) */
#define IEN	0x0a	/* imm16 + imm8 (enter) */
#define MO	0x0c	/* moffs: 8 bytes (4 with 0x67) */
#define BAD	0x80	/* invalid in 64-bit mode */
#define PFX	0x40	/* prefix (handled before the table) */
#define IMASK	0x0e

static const unsigned char op1[256] = {
	/* 00 */ M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, 0,
	/* 10 */ M, M, M, M, I8, IZ, BAD, BAD, M, M, M, M, I8, IZ, BAD, BAD,
	/* 20 */ M, M, M, M, I8, IZ, PFX, BAD, M, M, M, M, I8, IZ, PFX, BAD,
	/* 30 */ M, M, M, M, I8, IZ, PFX, BAD, M, M, M, M, I8, IZ, PFX, BAD,
	/* 40 */ PFX, PFX, PFX, PFX, PFX, PFX, PFX, PFX,
		 PFX, PFX, PFX, PFX, PFX, PFX, PFX, PFX,
	/* 50 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 60 */ BAD, BAD, 0, M, PFX, PFX, PFX, PFX,
		 IZ, M | IZ, I8, M | I8, 0, 0, 0, 0,
	/* 70 */ I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8, I8,
	/* 80 */ M | I8, M | IZ, BAD, M | I8, M, M, M, M, M, M, M, M, M, M, M, M,
	/* 90 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, BAD, 0, 0, 0, 0, 0,
	/* a0 */ MO, MO, MO, MO, 0, 0, 0, 0, I8, IZ, 0, 0, 0, 0, 0, 0,
	/* b0 */ I8, I8, I8, I8, I8, I8, I8, I8, IV, IV, IV, IV, IV, IV, IV, IV,
	/* c0 */ M | I8, M | I8, I16, 0, 0, 0, M | I8, M | IZ,
		 IEN, 0, I16, 0, 0, I8, BAD, 0,
	/* d0 */ M, M, M, M, BAD, BAD, BAD, 0, M, M, M, M, M, M, M, M,
	/* e0 */ I8, I8, I8, I8, I8, I8, I8, I8, IZ, IZ, BAD, I8, 0, 0, 0, 0,
	/* f0 */ PFX, 0, PFX, PFX, 0, 0, M, M, 0, 0, 0, 0, 0, 0, M, M,
};

/* 0F map: 1 ModRM, 2 ModRM + imm8, 3 rel32 (jcc), 0 none, BAD invalid. */
static unsigned char op2(unsigned char b)
{
	switch (b) {
	case 0x04: case 0x0a: case 0x0c: case 0x0f: case 0x24: case 0x25:
	case 0x26: case 0x27: case 0x36: case 0x39: case 0x3b: case 0x3c:
	case 0x3d: case 0x3e: case 0x3f: case 0x7a: case 0x7b: case 0xa6:
	case 0xa7:
		return BAD;
	case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b:
	case 0x0e: case 0x30: case 0x31: case 0x32: case 0x33: case 0x34:
	case 0x35: case 0x37: case 0x77: case 0xa0: case 0xa1: case 0xa2:
	case 0xa8: case 0xa9: case 0xaa:
		return 0;
	case 0x70: case 0x71: case 0x72: case 0x73: case 0xa4: case 0xac:
	case 0xba: case 0xc2: case 0xc4: case 0xc5: case 0xc6:
		return 2;
	}
	if (b >= 0x80 && b <= 0x8f)
		return 3;
	if (b >= 0xc8 && b <= 0xcf)	/* bswap */
		return 0;
	return 1;
}

/* Bytes of ModRM, SIB and displacement at p (0: truncated). */
static int modrm_len(const unsigned char *p, const unsigned char *end)
{
	unsigned char m, mod, rm;
	int n = 1;

	if (p >= end)
		return 0;
	m = *p;
	mod = m >> 6;
	rm = m & 7;
	if (mod == 3)
		return 1;
	if (rm == 4) {
		if (p + 1 >= end)
			return 0;
		n++;
		if (mod == 0 && (p[1] & 7) == 5)
			n += 4;
	} else if (mod == 0 && rm == 5) {
		n += 4;			/* rip-relative */
	}
	if (mod == 1)
		n += 1;
	else if (mod == 2)
		n += 4;
	return n;
}

static int finish(const unsigned char *code, const unsigned char *p,
		  unsigned int n, struct pt_insn *out)
{
	long len = p - code;

	if (len <= 0 || len > 15 || (unsigned long)len > n) {
		out->len = 0;
		out->kind = PT_INSN_UNDECODABLE;
		out->rep = 0;
		out->cond = 0;
		out->direct = 0;
		out->spk = 0;
		return 0;
	}
	out->len = (unsigned char)len;
	return (int)len;
}

/*
 * The stack pointer as a ModRM operand: its change is not known (the
 * block decoder then tells no two ends apart by it).  group: the reg field
 * extends the opcode (is no register).  Without the REX extension bits
 * (VEX) r12 counts as rsp too: unknown errs on the safe side.
 */
static void sp_modrm(struct pt_insn *out, const unsigned char *mrm, int rex,
		     int group)
{
	unsigned char mod = *mrm >> 6;
	unsigned char reg = ((*mrm >> 3) & 7) | (rex & 4 ? 8 : 0);
	unsigned char rm = (*mrm & 7) | (rex & 1 ? 8 : 0);

	if ((!group && reg == 4) || (mod == 3 && rm == 4))
		out->spk = 0;
}

/* Little-endian signed displacement of w bytes at p. */
static int rel_at(const unsigned char *p, int w)
{
	if (w == 1)
		return (signed char)p[0];
	return (int)((unsigned int)p[0] | (unsigned int)p[1] << 8 |
		     (unsigned int)p[2] << 16 | (unsigned int)p[3] << 24);
}

/*
 * A relative branch ending at p with a w-byte displacement.  With 0x66 the
 * CPUs disagree (AMD truncates the target to 16 bits): not direct then,
 * and never block-stepped.
 */
static void set_rel(struct pt_insn *out, const unsigned char *p, int w,
		    int opsize16)
{
	if (opsize16)
		return;
	out->direct = 1;
	out->rel = rel_at(p - w, w);
}

static int bad(struct pt_insn *out)
{
	out->len = 0;
	out->kind = PT_INSN_UNDECODABLE;
	out->rep = 0;
	out->cond = 0;
	out->direct = 0;
	out->spk = 0;
	return 0;
}

/* VEX (C4/C5), EVEX (62) and XOP (8F) encoded instructions: never branch. */
static int decode_vex(const unsigned char *code, const unsigned char *p,
		      const unsigned char *end, unsigned int n,
		      struct pt_insn *out)
{
	unsigned char first = *p, map, opc;
	int m;

	if (first == 0xc5) {
		p += 2;
		map = 1;
	} else if (first == 0xc4 || first == 0x8f) {
		if (p + 1 >= end)
			return bad(out);
		map = p[1] & 0x1f;
		p += 3;
	} else {		/* 0x62 EVEX */
		if (p + 1 >= end)
			return bad(out);
		map = p[1] & 0x07;
		p += 4;
	}
	if (p >= end)
		return bad(out);
	opc = *p++;
	if (first != 0x8f && map == 1 && opc == 0x77)	/* vzeroupper/all */
		return finish(code, p, n, out);
	m = modrm_len(p, end);
	if (!m)
		return bad(out);
	sp_modrm(out, p, 0, 0);
	p += m;
	if (first == 0x8f) {
		if (map == 8)
			p += 1;
		else if (map == 0xa)
			p += 4;
	} else if (map == 3) {
		p += 1;
	} else if (map == 1 && op2(opc) == 2) {
		p += 1;
	}
	return finish(code, p, n, out);
}

/* Opcodes whose ModRM reg field extends the opcode. */
static int group1(unsigned char b)
{
	return (b >= 0x80 && b <= 0x83) || b == 0x8f || b == 0xc0 ||
	       b == 0xc1 || b == 0xc6 || b == 0xc7 ||
	       (b >= 0xd0 && b <= 0xdf) || b == 0xf6 || b == 0xf7 ||
	       b == 0xfe || b == 0xff;
}

/*
 * The stack pointer's change by a one-byte-map instruction b ending at
 * end (its ModRM at mrm, or none): push/pop, pushf/popf, call/ret,
 * add/sub rsp with an immediate; anything else writing rsp is unknown.
 */
static void legacy_sp(struct pt_insn *out, unsigned char b,
		      const unsigned char *mrm, int rex, int opsize16,
		      const unsigned char *end)
{
	unsigned char r = (b & 7) | (rex & 1 ? 8 : 0);
	unsigned char ext = mrm ? (*mrm >> 3) & 7 : 0;

	if (mrm)
		sp_modrm(out, mrm, rex, group1(b));
	switch (b) {
	case 0x50: case 0x51: case 0x52: case 0x53:
	case 0x54: case 0x55: case 0x56: case 0x57:
	case 0x68: case 0x6a: case 0x9c:
		out->sp = -8;			/* push */
		break;
	case 0x58: case 0x59: case 0x5a: case 0x5b:
	case 0x5c: case 0x5d: case 0x5e: case 0x5f:
		out->sp = 8;			/* pop */
		if (r == 4)
			out->spk = 0;		/* pop rsp */
		break;
	case 0x9d:
		out->sp = 8;			/* popf */
		break;
	case 0x8f:
		out->sp = 8;			/* pop r/m */
		break;
	case 0x90: case 0x91: case 0x92: case 0x93:
	case 0x94: case 0x95: case 0x96: case 0x97:
	case 0xb8: case 0xb9: case 0xba: case 0xbb:
	case 0xbc: case 0xbd: case 0xbe: case 0xbf:
		if (r == 4)
			out->spk = 0;		/* xchg rsp / mov rsp, imm */
		break;
	case 0xc8: case 0xc9: case 0xca: case 0xcb: case 0xcf:
		out->spk = 0;			/* enter, leave, far ret, iret */
		break;
	case 0xe8:
		out->sp = -8;			/* call */
		break;
	case 0xc3:
		out->sp = 8;			/* ret */
		break;
	case 0xc2:
		out->sp = 8 + (end[-2] | end[-1] << 8);	/* ret imm16 */
		break;
	case 0xff:
		if (ext == 2 || ext == 6)
			out->sp = -8;		/* call, push r/m */
		else if (ext == 3 || ext == 5)
			out->spk = 0;		/* far call, far jmp */
		break;
	case 0x81: case 0x83:
		/* add/sub rsp, imm: REX.W, ModRM 11 000/101 100 */
		if (rex == 0x48 && (*mrm == 0xc4 || *mrm == 0xec)) {
			int imm = b == 0x83 ? (signed char)end[-1] :
				  (int)((unsigned int)end[-4] |
					(unsigned int)end[-3] << 8 |
					(unsigned int)end[-2] << 16 |
					(unsigned int)end[-1] << 24);

			out->spk = 1;
			out->sp = *mrm == 0xc4 ? imm : -imm;
		}
		break;
	}
	if (opsize16 && out->sp)
		out->spk = 0;			/* 2-byte pushes and pops */
}

int pt_insn_decode(const unsigned char *code, unsigned int n,
		   struct pt_insn *out)
{
	const unsigned char *p = code, *end = code + (n > 15 ? 15 : n), *op;
	const unsigned char *mrm = 0;
	int opsize16 = 0, addr32 = 0, rexw = 0, rex = 0, repp = 0, m;
	unsigned char b, t, reg;

	out->kind = PT_INSN_PLAIN;
	out->rep = 0;
	out->len = 0;
	out->cond = 0;
	out->direct = 0;
	out->rel = 0;
	out->spk = 1;
	out->sp = 0;

	/* legacy prefixes, then at most one REX (the last before the opcode) */
	for (;;) {
		if (p >= end)
			return bad(out);
		b = *p;
		if (b == 0x66)
			opsize16 = 1;
		else if (b == 0x67)
			addr32 = 1;
		else if (b == 0xf2 || b == 0xf3)
			repp = 1;
		else if (b == 0xf0 || b == 0x26 || b == 0x2e || b == 0x36 ||
			 b == 0x3e || b == 0x64 || b == 0x65)
			;
		else
			break;
		p++;
	}
	rexw = 0;
	if ((b & 0xf0) == 0x40) {
		rex = b;
		rexw = (b & 8) != 0;
		p++;
		if (p >= end)
			return bad(out);
		b = *p;
		if ((b & 0xf0) == 0x40)	/* two REX: x86asm refuses it too */
			return bad(out);
	}

	if (b == 0xc4 || b == 0xc5 || b == 0x62)
		return decode_vex(code, p, end, n, out);
	if (b == 0x8f && p + 1 < end && (p[1] & 0x1f) >= 8)
		return decode_vex(code, p, end, n, out);

	op = p++;
	if (b == 0x0f) {
		unsigned char c, k;

		if (p >= end)
			return bad(out);
		c = *p++;
		if (c == 0x38 || c == 0x3a) {
			if (p >= end)
				return bad(out);
			p++;		/* the third opcode byte */
			m = modrm_len(p, end);
			if (!m)
				return bad(out);
			sp_modrm(out, p, rex, 0);
			p += m + (c == 0x3a ? 1 : 0);
			return finish(code, p, n, out);
		}
		k = op2(c);
		if (k == BAD)
			return bad(out);
		switch (c) {
		case 0x05: case 0x34:
			out->kind = PT_INSN_SYSCALL;
			break;
		case 0x07: case 0x35: case 0x0b:
			out->kind = PT_INSN_OTHER;
			break;
		case 0xb9: case 0xff:
			out->kind = PT_INSN_OTHER;	/* ud1, ud0 */
			break;
		}
		if (k == 3) {
			out->kind = PT_INSN_JUMP;
			out->cond = 1;
			p += 4;
			if (p <= end)
				set_rel(out, p, 4, opsize16);
		} else if (k) {
			m = modrm_len(p, end);
			if (!m)
				return bad(out);
			/* groups: 0f 00, 01, 0d, 18-1f, 71-73, ae, ba, c7 */
			sp_modrm(out, p, rex, c <= 0x01 || c == 0x0d ||
				 (c >= 0x18 && c <= 0x1f) ||
				 (c >= 0x71 && c <= 0x73) || c == 0xae ||
				 c == 0xba || c == 0xc7);
			p += m + (k == 2 ? 1 : 0);
		}
		if (c == 0xa0 || c == 0xa8)		/* push fs/gs */
			out->sp = -8;
		else if (c == 0xa1 || c == 0xa9)	/* pop fs/gs */
			out->sp = 8;
		else if (c >= 0xc8 && c <= 0xcf &&
			 ((c & 7) | (rex & 1 ? 8 : 0)) == 4)
			out->spk = 0;			/* bswap esp */
		if (opsize16 && out->sp)
			out->spk = 0;
		return finish(code, p, n, out);
	}

	t = op1[b];
	if (t & BAD)
		return bad(out);
	reg = 0;
	if (t & M) {
		if (p >= end)
			return bad(out);
		reg = (*p >> 3) & 7;
		mrm = p;
		m = modrm_len(p, end);
		if (!m)
			return bad(out);
		p += m;
	}
	switch (t & IMASK) {
	case I8:
		p += 1;
		break;
	case IZ:
		p += opsize16 && !rexw ? 2 : 4;
		break;
	case I16:
		p += 2;
		break;
	case IV:
		p += rexw ? 8 : opsize16 ? 2 : 4;
		break;
	case IEN:
		p += 3;
		break;
	case MO:
		p += addr32 ? 4 : 8;
		break;
	}
	/* test r/m, imm (F6 /0 /1, F7 /0 /1) */
	if (b == 0xf6 && reg < 2)
		p += 1;
	else if (b == 0xf7 && reg < 2)
		p += opsize16 && !rexw ? 2 : 4;

	switch (b) {
	case 0xe8:
		out->kind = PT_INSN_CALL;
		if (p <= end)
			set_rel(out, p, 4, opsize16);
		break;
	case 0xc2: case 0xc3: case 0xca: case 0xcb:
		out->kind = PT_INSN_RETURN;
		break;
	case 0xe0: case 0xe1: case 0xe2: case 0xe3:
		out->kind = PT_INSN_JUMP;
		out->cond = 1;
		if (p <= end)
			set_rel(out, p, 1, 0);	/* rel8: no operand size */
		break;
	case 0xe9: case 0xeb:
		out->kind = PT_INSN_JUMP;
		if (p <= end)
			set_rel(out, p, b == 0xeb ? 1 : 4, opsize16);
		break;
	case 0xcf:
		out->kind = PT_INSN_IRET;
		break;
	case 0xcc: case 0xf1: case 0xf4:
		out->kind = PT_INSN_OTHER;
		break;
	case 0xcd:
		out->kind = p <= end && op[1] == 0x80 ? PT_INSN_SYSCALL
						      : PT_INSN_OTHER;
		break;
	case 0xc7:
		if (op[1] == 0xf8) {	/* xbegin rel: an abort goes there */
			out->kind = PT_INSN_JUMP;
			out->cond = 1;
		}
		break;
	case 0xff:
		if (reg == 2 || reg == 3)
			out->kind = PT_INSN_CALL;
		else if (reg == 4 || reg == 5)
			out->kind = PT_INSN_JUMP;
		break;
	case 0xa4: case 0xa5: case 0xa6: case 0xa7: case 0xaa: case 0xab:
	case 0xac: case 0xad: case 0xae: case 0xaf: case 0x6c: case 0x6d:
	case 0x6e: case 0x6f:
		out->rep = repp;
		break;
	}
	if (b >= 0x70 && b <= 0x7f) {
		out->kind = PT_INSN_JUMP;
		out->cond = 1;
		if (p <= end)
			set_rel(out, p, 1, 0);
	}
	if (p <= end)
		legacy_sp(out, b, mrm, rex, opsize16, p);
	return finish(code, p, n, out);
}
