/*
 * itrace: the bundled example for ITrace (instruction tracing).
 *
 * Every kind of control transfer a tracer must get right, with
 * instruction counts that do not depend on timing:
 *   - recursion (fib),
 *   - calls through function pointers (apply with op_add / op_mul),
 *   - calls into shared libraries (cos from libm, memcpy from libc),
 *   - a tiny leaf called many times (leaf; `itrace N` calls it N times),
 *   - a signal handler (on_signal, run by raise(SIGUSR1)),
 *   - a second thread (worker),
 *   - a rep-prefixed string instruction (copy_rep: rep movsb, one
 *     instruction executed once per byte).
 *
 *   itrace [N]   N leaf calls in main (default 2000000); the worker
 *                thread makes N/4
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned long sink;
static volatile int sigcount;

__attribute__((noinline)) unsigned long leaf(unsigned long x)
{
	return x * 3 + 1;
}

__attribute__((noinline)) unsigned long fib(unsigned long n)
{
	if (n < 2)
		return n;
	return fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) unsigned long op_add(unsigned long a, unsigned long b)
{
	return a + b;
}

__attribute__((noinline)) unsigned long op_mul(unsigned long a, unsigned long b)
{
	return a * b;
}

__attribute__((noinline)) unsigned long apply(unsigned long (*op)(unsigned long, unsigned long),
					      unsigned long a, unsigned long b)
{
	return op(a, b);
}

__attribute__((noinline)) void copy_rep(char *dst, const char *src, unsigned long n)
{
	asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

__attribute__((noinline)) unsigned long leaf_loop(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

__attribute__((noinline)) void on_signal(int sig)
{
	sigcount++;
	sink += leaf_loop(10 + sig);
}

__attribute__((noinline)) void *worker(void *arg)
{
	unsigned long n = *(unsigned long *)arg;

	sink += leaf_loop(n / 4);
	sink += fib(12);
	return NULL;
}

__attribute__((noinline)) double use_libm(int n)
{
	double d = 0;

	for (int i = 0; i < n; i++)
		d += cos(i * 0.25);
	return d;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 2000000;
	char src[256], dst[256];
	struct sigaction sa;
	pthread_t t;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGUSR1, &sa, NULL);

	if (pthread_create(&t, NULL, worker, &n) != 0) {
		perror("pthread_create");
		return 1;
	}
	sink += fib(15);
	sink += apply(op_add, 3, 4) + apply(op_mul, 5, 6);
	for (int i = 0; i < 100; i++)
		sink += apply(i & 1 ? op_add : op_mul, i, 7);
	sink += leaf_loop(n);
	for (int i = 0; i < (int)sizeof(src); i++)
		src[i] = (char)i;
	copy_rep(dst, src, sizeof(src));
	memcpy(src, dst, 100);
	sink += (unsigned long)use_libm(20);
	raise(SIGUSR1);
	pthread_join(t, NULL);
	printf("itrace example: n=%lu signals=%d sum=%lu\n", n, sigcount, (unsigned long)sink);
	return 0;
}
