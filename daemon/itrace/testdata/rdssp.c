/*
 * rdsspq (CET: read the shadow-stack pointer; a no-op where shadow stacks
 * are off) in a function called N times: glibc's setjmp and libgcc's
 * unwinder run it. x86asm decodes its F3 prefix alone as a 1-byte
 * instruction.
 *   rdssp N
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long f(long x)
{
	long r = 0;

	__asm__ volatile("rdsspq %0" : "+r"(r));
	return r + x;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100, s = 0;

	for (long i = 0; i < n; i++)
		s += f(i);
	printf("%ld\n", s);
	return 0;
}
