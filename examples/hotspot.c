/*
 * The bundled program of the hot-spot walk (docs/hotspot.md): a loop in
 * main calls a() -> b() -> c() -> hot() two times in three and x() -> hot()
 * one time in three, so hot's callers are c (2/3 of its calls) and x (1/3).
 * hot() does the work; the others are thin frames.
 *
 *   hotspot-example [SECONDS [WORK [noreturn|sleepy]]]   run for SECONDS (default 5) of wall time
 *
 * With "noreturn" the loop runs in loop_forever(), which never returns: it
 * prints and exits from inside (a caller the walk meets that is entered
 * once and never returns). With "sleepy" c() also sleeps 200 us after each
 * call of hot(): c's wall time per call is then far above its CPU time
 * (hotspot -m task-clock tells them apart).
 *
 * SIGUSR1 ends the run early, as if SECONDS were over: a test runs it for
 * far longer than it needs and ends it once it has what it waits for.
 *
 * At the end it prints how many calls each function got (the count a full
 * entry/exit instrumentation would hook) and the CPU time it used (probe
 * traps included: the benchmark's measure) and exits with status 3, so a test
 * can check that a tool leaves the output and the exit code unchanged.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;
static unsigned long work = 200000;
static unsigned long n_hot, n_a, n_b, n_c, n_x;
static int sleepy;
static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

NOINLINE void hot(void)
{
	unsigned long v = sink, i;

	n_hot++;
	for (i = 0; i < work; i++)
		v = v * 6364136223846793005UL + 1442695040888963407UL;
	sink = v;
}

NOINLINE void c(void)
{
	n_c++;
	hot();
	if (sleepy) {
		struct timespec ts = { 0, 200000 };

		nanosleep(&ts, NULL);
	}
	sink++;		/* no tail call: c stays hot's caller */
}

NOINLINE void b(void)
{
	n_b++;
	c();
	sink++;
}

NOINLINE void a(void)
{
	n_a++;
	b();
	sink++;
}

NOINLINE void x(void)
{
	n_x++;
	hot();
	sink++;
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static inline __attribute__((always_inline)) unsigned long run_loop(double end)
{
	unsigned long i;

	for (i = 0;; i++) {
		if (i % 3 == 2)
			x();
		else
			a();
		if ((i & 15) == 0 && (stop || now() >= end))
			return i;
	}
}

static void report(unsigned long i)
{
	printf("hotspot-example: iterations=%lu calls hot=%lu a=%lu b=%lu c=%lu x=%lu all=%lu cpu_us=%.0f\n",
	       i + 1, n_hot, n_a, n_b, n_c, n_x, n_hot + n_a + n_b + n_c + n_x,
	       clock_s(CLOCK_PROCESS_CPUTIME_ID) * 1e6);
}

NOINLINE __attribute__((noreturn)) void loop_forever(double end)
{
	report(run_loop(end));
	fflush(stdout);
	exit(3);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	double end;
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	if (argc > 2)
		work = strtoul(argv[2], NULL, 0);
	sleepy = argc > 3 && strcmp(argv[3], "sleepy") == 0;
	end = now() + secs;
	if (argc > 3 && strcmp(argv[3], "noreturn") == 0)
		loop_forever(end);
	report(run_loop(end));
	return 3;
}
