/*
 * pingpong: two threads pass a byte back and forth over two pipes, N
 * round trips (each a wake-up and a switch-out to wait per thread), and
 * print the TSC ticks per round trip (guest instructions under QEMU's
 * -icount shift=0,sleep=off): the cost of what the scheduler records add
 * to a switch-heavy load, as perf bench sched pipe measures it.
 *
 *   pingpong N
 *
 * Built with frame pointers, so that the stacks of its waits are walked
 * as a real program's would be.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <x86intrin.h>

static int ab[2], ba[2];
static long n;

static __attribute__((noinline)) void pass(int in, int out)
{
	char c;

	if (read(in, &c, 1) != 1 || write(out, &c, 1) != 1)
		exit(1);
}

static void *echo(void *arg)
{
	for (long i = 0; i < n; i++)
		pass(ab[0], ba[1]);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	unsigned long long t0, t1;
	char c = 'x';

	if (argc != 2 || (n = atol(argv[1])) <= 0) {
		fprintf(stderr, "usage: pingpong N (round trips)\n");
		return 2;
	}
	if (pipe(ab) < 0 || pipe(ba) < 0 || pthread_create(&t, NULL, echo, NULL))
		return 1;
	t0 = __rdtsc();
	for (long i = 0; i < n; i++) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			return 1;
	}
	t1 = __rdtsc();
	pthread_join(t, NULL);
	printf("pingpong: %ld round trips, %llu ticks each\n", n, (t1 - t0) / n);
	return 0;
}
