/* sleeper: a program of known off-CPU time for the continuous mode's
 * tests. Its thread "sleeper" calls sleep_timed(), which sleeps N times
 * 100 ms in nanosleep(); the main thread waits for it. At the end it prints the time sleep_timed spent in its
 * sleeps, measured on CLOCK_MONOTONIC around each call (the time from the
 * call to the return: what a profile of the thread's time off the CPU
 * under sleep_timed holds, give or take the microseconds of the system
 * calls themselves):
 *
 *	slept_ns 1001234567
 *
 *	sleeper [N = 10]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int n = 10;
static long long slept;

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void sleep_timed(void)
{
	struct timespec d = { 0, 100 * 1000 * 1000 };

	for (int i = 0; i < n; i++) {
		long long t0 = now_ns();

		nanosleep(&d, NULL);
		slept += now_ns() - t0;
	}
}

static void *run(void *arg)
{
	(void)arg;
	sleep_timed();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th;

	if (argc > 1)
		n = atoi(argv[1]);
	if (pthread_create(&th, NULL, run, NULL) != 0) {
		perror("pthread_create");
		return 1;
	}
	pthread_setname_np(th, "sleeper");
	pthread_join(th, NULL);
	printf("slept_ns %lld\n", slept);
	return 0;
}
