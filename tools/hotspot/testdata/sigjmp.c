/*
 * A program whose hot function is reached three ways (a test of the
 * hot-spot walk's exit probes): called and returning normally, called from
 * a function left by longjmp (its own return never runs), and called from
 * a SIGPROF handler running on an alternate signal stack — one placed in
 * main's frame, above the stack of the interrupted calls (a stack switch
 * that makes the kernel drop the interrupted calls' uretprobe records).
 *
 *   sigjmp SECONDS
 *
 * It prints how many calls took each way and a checksum of hot's results
 * over the normal and longjmp calls, and exits 0.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;
static volatile sig_atomic_t in_handler_calls;
static jmp_buf env;

NOINLINE unsigned long hot(unsigned long seed)
{
	unsigned long v = seed, i;

	for (i = 0; i < 20000; i++)
		v = v * 6364136223846793005UL + 1442695040888963407UL;
	sink = v;
	return v;
}

NOINLINE void on_prof(int sig)
{
	(void)sig;
	hot(sink);
	in_handler_calls++;
}

NOINLINE __attribute__((noreturn)) void leap(unsigned long seed)
{
	sink ^= hot(seed);
	longjmp(env, 1);
}

NOINLINE unsigned long direct(unsigned long seed)
{
	unsigned long v = hot(seed);

	sink++;			/* no tail call: direct stays hot's caller */
	return v;
}

NOINLINE unsigned long jumped(unsigned long seed)
{
	if (setjmp(env) == 0)
		leap(seed);
	sink++;
	return 1;
}

/* SIGUSR1 ends the run early, as if its seconds were over. */
static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long work(double end, unsigned long *n_direct, unsigned long *n_jumped)
{
	unsigned long i, sum = 0;

	for (i = 0;; i++) {
		if (i % 2) {
			sum += direct(i);
			++*n_direct;
		} else {
			sum += jumped(i);
			++*n_jumped;
		}
		if ((i & 15) == 0 && (stop || now() >= end))
			return sum;
	}
}

int main(int argc, char **argv)
{
	/* The alternate stack lies in main's frame: above work's frames. */
	static const size_t altsize = 256 * 1024;
	char alt[256 * 1024];
	stack_t ss = { .ss_sp = alt, .ss_size = altsize };
	struct sigaction sa;
	struct itimerval it = { { 0, 2000 }, { 0, 2000 } };
	unsigned long n_direct = 0, n_jumped = 0, sum;
	double secs = argc > 1 ? atof(argv[1]) : 5;

	if (sigaltstack(&ss, NULL) != 0) {
		perror("sigaltstack");
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_prof;
	sa.sa_flags = SA_ONSTACK | SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	sa.sa_handler = on_usr1;
	sa.sa_flags = 0;
	sigaction(SIGUSR1, &sa, NULL);
	setitimer(ITIMER_PROF, &it, NULL);
	sum = work(now() + secs, &n_direct, &n_jumped);
	it.it_value.tv_usec = it.it_interval.tv_usec = 0;
	setitimer(ITIMER_PROF, &it, NULL);
	printf("sigjmp: direct=%lu jumped=%lu handler=%lu sum=%lu\n",
	       n_direct, n_jumped, (unsigned long)in_handler_calls, sum);
	return 0;
}
