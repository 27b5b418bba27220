/*
 * stackprog: call stacks of known shape for the module's call-stack test
 * (scripts/vmtest/pitest/stacks.go). Built static with frame pointers.
 *
 *   stackprog deep N MS   recurse N levels (descend) and spin MS ms at the bottom
 *   stackprog sys MS      read /dev/zero in 1 MB blocks for MS ms (kernel time
 *                         under main -> sysloop -> zero_read)
 *
 * Every function calls another before it returns, so none is a frameless
 * leaf (GCC drops the frame pointer of leaf functions).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static char block[1 << 20];

/*
 * The loops run for their thread's CPU time, not the wall clock's: the
 * tests count tprof ticks of the run (1000 Hz of CPU time), and a TCG
 * vCPU beside a busy host gets a small share of the wall time.
 */
static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void account(unsigned long v)
{
	sink += v;
}

/* the bottom of the deep stack: a busy loop until the deadline */
__attribute__((noinline)) void bottom(double until)
{
	unsigned long y = sink;

	while (now_ms() < until)
		for (int j = 0; j < 100000; j++)
			y = y * 6364136223846793005UL + 1;
	account(y);
}

__attribute__((noinline)) void descend(int n, double until)
{
	if (n > 1)
		descend(n - 1, until);
	else
		bottom(until);
	account(n); /* not a tail call: every level keeps its frame */
}

/*
 * read(2) made here, not in libc's wrapper: the wrapper has no frame, and
 * a frameless function hides its caller from frame-pointer stacks.
 */
__attribute__((noinline)) long zero_read(int fd)
{
	long ret;

	asm volatile("syscall"
		     : "=a"(ret)
		     : "a"((long)SYS_read), "D"((long)fd), "S"(block),
		       "d"(sizeof(block))
		     : "rcx", "r11", "memory");
	account(ret);
	return ret;
}

__attribute__((noinline)) void sysloop(double until)
{
	int fd = open("/dev/zero", O_RDONLY);

	if (fd < 0) {
		perror("/dev/zero");
		exit(1);
	}
	while (now_ms() < until)
		if (zero_read(fd) != (long)sizeof(block)) {
			perror("read /dev/zero");
			exit(1);
		}
	close(fd);
	account(block[0]);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "deep") && atoi(argv[2]) > 0) {
		descend(atoi(argv[2]), now_ms() + atof(argv[3]));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "sys")) {
		sysloop(now_ms() + atof(argv[2]));
		return 0;
	}
	fprintf(stderr, "usage: stackprog deep N MS | sys MS\n");
	return 2;
}
