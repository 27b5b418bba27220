/*
 * Built -O2 -finstrument-functions: leaf is inlined into mid, and gcc calls
 * its hooks from mid's frame with mid's call site; jumper is left by
 * longjmp and called again from the same call site each time.
 *   inlined N   main -> mid (N calls) -> leaf (10 each, inlined);
 *               main -> jumper (N calls, each left by longjmp); main -> after
 *               main -> mixed (N calls) -> callee, leaf (one each: leaf
 *               inlined, its hooks after callee's, not right after mixed's)
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf jb;
static volatile int sink;

static inline int leaf(int x)
{
	return x * 3 + sink;
}

__attribute__((noinline)) int mid(int n)
{
	int s = 0;

	for (int i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

__attribute__((noinline)) int callee(int x)
{
	return x + sink;
}

__attribute__((noinline)) int mixed(int x)
{
	int s = callee(x);

	return s + leaf(s);
}

__attribute__((noinline)) void jumper(int i)
{
	sink += i;
	longjmp(jb, 1);
}

__attribute__((noinline)) void after(void)
{
	sink++;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	long t = 0;

	for (int k = 0; k < n; k++)
		t += mid(10);
	for (int k = 0; k < n; k++)
		t += mixed(k);
	for (volatile int k = 0; k < n; k++)
		if (setjmp(jb) == 0)
			jumper(k);
	after();
	printf("%ld\n", t);
	return 0;
}
