/* Waits at the end of call chains, for the off-CPU stacks test: built -O2
 * without frame pointers, as distributions build, so only call-frame
 * information finds the callers of a wait.
 *
 The main thread, ROUNDS times: sleeps 20 ms in nanosleep (main →
 * sleep_outer → sleep_mid → sleep_leaf → nanosleep), blocks in read on a
 * pipe (main → read_outer → read_mid → read_leaf → read), in libc's fread
 * of another pipe (main → fread_outer → fread_leaf → fread → the
 * library's own calls → read) and in poll (main → poll_outer → poll_leaf
 * → poll); a feeder thread writes each pipe's byte 10 ms after the main
 * thread asks for it. Then it prints "tid main TID" and exits.
 *
 * Usage: waitchain [ROUNDS]
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int rounds = 10;
static int rpipe[2], fpipe[2], ppipe[2];
static volatile long sink;

#define NOINLINE __attribute__((noinline))
/* the work after each call keeps it a call (no tail call) */
#define AFTER(x) (sink += (x))

static pid_t tid(void) { return (pid_t)syscall(SYS_gettid); }

NOINLINE static void sleep_leaf(void)
{
	struct timespec ts = {0, 20 * 1000 * 1000};
	AFTER(nanosleep(&ts, NULL));
}
NOINLINE static void sleep_mid(void) { sleep_leaf(); AFTER(1); }
NOINLINE static void sleep_outer(void) { sleep_mid(); AFTER(1); }

NOINLINE static void read_leaf(void)
{
	char c;
	AFTER(read(rpipe[0], &c, 1));
}
NOINLINE static void read_mid(void) { read_leaf(); AFTER(1); }
NOINLINE static void read_outer(void) { read_mid(); AFTER(1); }

NOINLINE static void fread_leaf(FILE *f)
{
	char c;
	AFTER(fread(&c, 1, 1, f));
}
NOINLINE static void fread_outer(FILE *f) { fread_leaf(f); AFTER(1); }

NOINLINE static void poll_leaf(void)
{
	struct pollfd p = {ppipe[0], POLLIN, 0};
	char c;
	AFTER(poll(&p, 1, -1));
	AFTER(read(ppipe[0], &c, 1));
}
NOINLINE static void poll_outer(void) { poll_leaf(); AFTER(1); }

static int req[2]; /* the main thread's requests to the feeder: which pipe */

/* The feeder writes a byte into the pipe asked for 10 ms after the
 * request: the main thread is blocked on it by then. */
static void *feeder(void *a)
{
	(void)a;
	char which;
	while (read(req[0], &which, 1) == 1) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
		int fd = which == 'r' ? rpipe[1] : which == 'f' ? fpipe[1] : ppipe[1];
		if (write(fd, "x", 1) != 1)
			return NULL;
	}
	return NULL;
}

static void ask(char which)
{
	if (write(req[1], &which, 1) != 1) {
		perror("write");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rounds = atoi(argv[1]);
	if (pipe(rpipe) || pipe(fpipe) || pipe(ppipe) || pipe(req)) {
		perror("pipe");
		return 1;
	}
	FILE *f = fdopen(fpipe[0], "r");
	if (!f) {
		perror("fdopen");
		return 1;
	}
	setvbuf(f, NULL, _IONBF, 0); /* every fread reads the pipe */
	pthread_t th;
	if (pthread_create(&th, NULL, feeder, NULL)) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	for (int i = 0; i < rounds; i++) {
		sleep_outer();
		ask('r');
		read_outer();
		ask('f');
		fread_outer(f);
		ask('p');
		poll_outer();
	}
	close(req[1]);
	pthread_join(th, NULL);
	printf("tid main %d\n", (int)tid());
	return 0;
}
