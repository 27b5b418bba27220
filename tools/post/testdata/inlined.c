/* inlined.c: a program whose time is in functions that gcc -O2 inlines
 * (mix into leafwork, mix and inl_outer into main), beside a tail call
 * (tailer jumps to leafwork). ./inlined N runs N rounds. */
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

static inline unsigned long mix(unsigned long x)
{
	for (int i = 0; i < 50; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) unsigned long leafwork(unsigned long x)
{
	unsigned long s = 0;
	for (int i = 0; i < 200; i++)
		s += mix(x + i);
	return s;
}

__attribute__((noinline)) unsigned long tailer(unsigned long x)
{
	return leafwork(x ^ 0x55);
}

__attribute__((noinline)) unsigned long middle(unsigned long x)
{
	unsigned long r = tailer(x);
	sink += r;
	return r + 1;
}

static unsigned long inl_outer(unsigned long x)
{
	return mix(x) + middle(x);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	unsigned long acc = 0;
	for (long i = 0; i < n; i++)
		acc += inl_outer(i);
	printf("%lu\n", acc);
	return 0;
}
