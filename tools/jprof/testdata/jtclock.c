/*
 * The trace records' clock of the agent's writer (jittrace.c's jt_time,
 * compiled in): for 60 ms of its CPU time, each record's time against
 * CLOCK_MONOTONIC read just before and just after it, half of them at a TSC value the
 * caller read (as calltree passes the call-flow runtime's), half at the
 * writer's own read. Prints "tsc T records N converted K outside X
 * backwards B worst W" (T: the clock source is the TSC; K: records timed
 * by the TSC's conversion; X: records outside [before - SLACK, after +
 * SLACK]; W: the farthest outside, ns) and exits 1 when X or B is not 0.
 */
#include "../agent/jittrace.c"

#define SLACK 1000	/* ns */

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int main(void)
{
	struct jt_chunk *c = calloc(1, sizeof(*c));
	unsigned long n = 0, conv = 0, outside = 0, back = 0;
	uint64_t prev = 0;
	long long worst = 0;

	if (!c)
		return 2;
	/* 60 ms of the thread's own CPU time, however busy the machine: the
	 * first 10 ms of wall time (no rate yet) are at most a sixth of it */
	while (cpu_ns() < 60000000ULL) {
		uint64_t a = now_ns(), tsc = __rdtsc();
		int converted = __atomic_load_n(&jt_mult32, __ATOMIC_RELAXED) && c->anchor_ns;
		uint64_t t = jt_time(c, n & 1 ? tsc : 0);
		uint64_t b = now_ns();
		long long off = t + SLACK < a ? (long long)(a - t) : t > b + SLACK ? (long long)(t - b) : 0;

		if (off) {
			outside++;
			if (off > worst)
				worst = off;
		}
		if (t < prev)
			back++;
		prev = t;
		conv += converted;
		n++;
		for (uint64_t s = now_ns(); now_ns() - s < 20000;)
			;
	}
	printf("tsc %d records %lu converted %lu outside %lu backwards %lu worst %lld\n",
	       jt_tsc, n, conv, outside, back, worst);
	return outside || back;
}
