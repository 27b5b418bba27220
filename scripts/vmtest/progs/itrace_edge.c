/*
 * ITrace's edge cases (run.sh itrace): signal handlers left by siglongjmp,
 * a system call restarted after SIGSTOP/SIGCONT.
 *   itrace_edge N              N times: sigsetjmp, raise(SIGUSR1), the
 *                                handler calls in_handler and siglongjmps
 *                                out; then after_jump.  The module's trace
 *                                must count these functions as callgrind.
 *   itrace_edge after FILE M   20 handlers left by siglongjmp (more than
 *                                the module keeps frames for), then FILE
 *                                is created and the program spins M times:
 *                                an itrace off then must let it go.
 *   itrace_edge in FILE M      the handler creates FILE and spins M times
 *                                inside the handler, then leaves it by
 *                                siglongjmp and spins M times more: an
 *                                itrace off while inside the handler must
 *                                let it go.
 *   itrace_edge restart FIFO     reads one byte from FIFO (opened read-write:
 *                                the open does not wait) with its own
 *                                syscall instruction, in read_raw, twice;
 *                                the guest stops and continues it inside
 *                                the first read: the kernel runs that
 *                                syscall instruction again.  Callgrind
 *                                counts it once, so must the trace.
 *   itrace_edge restart-handler  reads one byte from a pipe (fd 3) with
 *                                read_raw; SIGUSR2 (SA_RESTART), sent while
 *                                it blocks, runs a handler that writes the
 *                                byte; the read is restarted through
 *                                rt_sigreturn.  Callgrind counts the
 *                                syscall once, so must the trace.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sigjmp_buf env;
static volatile unsigned long sink;
static const char *ready_file;
static unsigned long spins;
static int spin_in_handler;

__attribute__((noinline)) static void in_handler(int n)
{
	for (int i = 0; i < n; i++)
		sink += i * 3;
}

__attribute__((noinline)) static void after_jump(int n)
{
	for (int i = 0; i < n; i++)
		sink ^= i;
}

__attribute__((noinline)) static void spin(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i;
}

__attribute__((noinline)) static void ready(void)
{
	int fd = open(ready_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0) {
		perror(ready_file);
		exit(1);
	}
	close(fd);
}

/* read(2) with its own syscall instruction: counted in this function */
__attribute__((noinline)) static long read_raw(int fd, void *buf, long n)
{
	long ret;

	asm volatile("syscall" : "=a"(ret)
		     : "0"(0L), "D"((long)fd), "S"(buf), "d"(n)
		     : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) static int restart(const char *fifo)
{
	char c[2];
	int fd = open(fifo, O_RDWR);

	if (fd < 0) {
		perror(fifo);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		if (read_raw(fd, &c[i], 1) != 1) {
			fprintf(stderr, "itrace_edge: read %d of %s failed\n", i, fifo);
			return 1;
		}
	}
	printf("itrace_edge: read %c%c\n", c[0], c[1]);
	return 0;
}

static int restart_pipe[2];

__attribute__((noinline)) static void feed_handler(int sig)
{
	in_handler(sig);
	if (write(restart_pipe[1], "x", 1) != 1)
		_exit(3);
}

/* a read interrupted by a handler and restarted (SA_RESTART) */
__attribute__((noinline)) static int restart_handler(void)
{
	struct sigaction sa;
	char c;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = feed_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (pipe(restart_pipe) || sigaction(SIGUSR2, &sa, NULL)) {
		perror("itrace_edge: pipe/sigaction");
		return 1;
	}
	if (read_raw(restart_pipe[0], &c, 1) != 1) {
		fprintf(stderr, "itrace_edge: the restarted read failed\n");
		return 1;
	}
	printf("itrace_edge: read %c after a handler\n", c);
	return 0;
}

static void handler(int sig)
{
	in_handler(sig);
	if (spin_in_handler) {
		ready();
		spin(spins);
	}
	siglongjmp(env, 1);
}

/* One handler left by siglongjmp. */
__attribute__((noinline)) static void jump_once(void)
{
	if (sigsetjmp(env, 1) == 0) {
		raise(SIGUSR1);
		fprintf(stderr, "itrace_edge: the handler returned\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	int n;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL)) {
		perror("sigaction");
		return 1;
	}
	if (argc == 3 && !strcmp(argv[1], "restart"))
		return restart(argv[2]);
	if (argc == 2 && !strcmp(argv[1], "restart-handler"))
		return restart_handler();
	if (argc == 4 && (!strcmp(argv[1], "after") || !strcmp(argv[1], "in"))) {
		ready_file = argv[2];
		spins = strtoul(argv[3], NULL, 10);
		spin_in_handler = !strcmp(argv[1], "in");
		for (n = 0; n < (spin_in_handler ? 1 : 20); n++)
			jump_once();
		ready();
		spin(spins);
		return 0;
	}
	if (argc != 2 || (n = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: itrace_edge N | after FILE M | in FILE M | restart FIFO | restart-handler\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		jump_once();
		after_jump(i % 7 + 1);
	}
	printf("itrace_edge: %d handlers left by siglongjmp\n", n);
	return 0;
}
