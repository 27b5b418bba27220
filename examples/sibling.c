/*
 * Calls entered by a jump, as -O2 builds them: sibling (tail) calls inside
 * the program, a tail call through the PLT into zlib, and lazily bound
 * calls of libz and libm (the dynamic loader's first call through a PLT
 * entry ends with a jump to the function it bound). ITrace's replay counts
 * each such jump as a call, as callgrind does.
 *
 *   gcc -O2 -g -Wl,-z,lazy -o sibling examples/sibling.c -lz -lm
 *   sibling [N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile unsigned sink;

/* a true leaf: no frame, no calls */
NOINLINE unsigned sib_mix(unsigned x)
{
	return (x ^ (x >> 13)) * 0x5bd1e995u;
}

/* called (not jumped to) by sib_emit: its children hang below the
 * tail-called function that calls it */
NOINLINE unsigned sib_emit(unsigned x, int n)
{
	for (int i = 0; i < n; i++)
		x = sib_mix(x + i);
	sink = x;
	return x;
}

/* sib_compress ends in a call of sib_emit; sib_flush ends in a jump to
 * sib_compress (a sibling call), as gzip's flush_block does */
NOINLINE unsigned sib_compress(unsigned x, int n)
{
	x = sib_mix(x);
	x = sib_emit(x, n) + 1;
	return sib_emit(x, n & 3);
}

NOINLINE unsigned sib_flush(unsigned x, int n)
{
	if (n & 1)
		x = sib_mix(x);
	return sib_compress(x * 3, n);
}

/* a chain of sibling calls: sib_a jumps to sib_b, which jumps to sib_c */
NOINLINE unsigned sib_c(unsigned x)
{
	sink = x;
	return x + 7;
}

NOINLINE unsigned sib_b(unsigned x)
{
	return sib_c(sib_mix(x) | 1);
}

NOINLINE unsigned sib_a(unsigned x)
{
	return sib_b(x * 5);
}

/* a sibling call through the PLT into zlib */
NOINLINE unsigned long sib_crc(unsigned long crc, const unsigned char *p, unsigned n)
{
	return crc32(crc, p, n);
}

/* a call of libm through the PLT (lazily bound on its first call) */
NOINLINE double sib_root(double v)
{
	double r = sqrt(v) + cbrt(v);
	sink = (unsigned)r;
	return r;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	unsigned char buf[64];
	unsigned x = 1;
	unsigned long crc = crc32(0L, Z_NULL, 0);

	for (int i = 0; i < (int)sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7);
	for (int i = 0; i < n; i++) {
		x = sib_flush(x, i % 16);
		x += sib_a(x);
		crc = sib_crc(crc, buf, sizeof(buf));
		if (i % 10 == 0)
			x += (unsigned)sib_root((double)(x & 0xffff));
	}
	printf("sibling: n=%d x=%u crc=%lx\n", n, x, crc);
	return 0;
}
