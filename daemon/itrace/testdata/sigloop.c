/*
 * sigloop: a loop of short lines, conditional jumps both ways and calls,
 * interrupted by a timer's SIGALRM (a handler that sets the timer again,
 * so that the loop runs 2 ms between two signals however slowly it is
 * traced), so that a
 * tracer's native runs are cut short by signals everywhere: at a line's
 * start, inside it, before a branch. spin's and step's instructions and
 * calls do not depend on when the signals come.
 *
 *   sigloop [N]   N iterations (default 20000)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

static volatile unsigned long ticks;

static const struct itimerval next = { { 0, 0 }, { 0, 2000 } };

static void on_alarm(int sig)
{
	(void)sig;
	ticks++;
	setitimer(ITIMER_REAL, &next, NULL);
}

__attribute__((noinline)) unsigned long step(unsigned long x)
{
	return x % 7 ? x * 3 + 1 : x / 7;
}

__attribute__((noinline)) unsigned long spin(unsigned long n)
{
	unsigned long s = 0;

	for (unsigned long i = 0; i < n; i++) {
		if (i & 1)
			s += step(i);
		else
			s ^= i;
	}
	return s;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval off = { { 0, 0 }, { 0, 0 } };

	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &next, NULL);
	unsigned long s = spin(n);
	setitimer(ITIMER_REAL, &off, NULL);
	printf("sigloop: %lu %lu\n", s, ticks);
	return 0;
}
