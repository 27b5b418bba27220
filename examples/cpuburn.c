/*
 * cpuburn: the bundled example workload for perfinsp.
 *
 * Three functions of known relative cost do the work: heavy() about 60 %,
 * medium() about 30 %, light() about 10 % of the instructions. A second
 * thread shares the work, and a short-lived child process is forked (and
 * exits) while tracing, so traces show threads and a process that exited
 * before tracing stopped. Built with frame pointers (-fno-omit-frame-pointer)
 * it gives tprof's call stacks: main -> work -> heavy, ... (see via_route
 * and account). The child dies with its parent.
 *
 *   cpuburn [units]      units of work (default 300; about 1 s per 100 units)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

/* A serial multiply-add chain the compiler cannot shorten: cost = n. */
#define CHAIN(n, c)                                                     \
	({                                                              \
		unsigned long _y = sink + (c);                          \
		for (unsigned long _j = 0; _j < (n); _j++)              \
			_y = _y * 6364136223846793005UL + (c);          \
		_y;                                                     \
	})

/* Called at the end of each worker function so that none of them is a leaf:
 * GCC (12) drops the frame pointer of leaf functions even with
 * -fno-omit-frame-pointer, and a frameless leaf hides its caller from
 * frame-pointer call stacks (perf's too). */
__attribute__((noinline)) void account(unsigned long v)
{
	sink += v;
}

__attribute__((noinline)) void heavy(void)
{
	account(CHAIN(6000000UL, 1));
	sink++;
}

__attribute__((noinline)) void medium(void)
{
	account(CHAIN(3000000UL, 3));
	sink++;
}

__attribute__((noinline)) void light(void)
{
	account(CHAIN(1000000UL, 5));
	sink++;
}

/* medium() is reached one level deeper, so call stacks have two shapes:
 * main -> work -> heavy/light and main -> work -> via_route -> medium
 * (the worker thread: start_thread -> worker -> work -> ...). */
__attribute__((noinline)) void via_route(void)
{
	medium();
	sink++; /* not a tail call: via_route keeps its frame */
}

__attribute__((noinline)) void work(long units)
{
	for (long u = 0; u < units; u++) {
		heavy();
		via_route();
		light();
	}
	sink++;
}

static void *worker(void *arg)
{
	work((long)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	long units = argc > 1 ? atol(argv[1]) : 300;
	pthread_t t;
	pid_t parent, child;

	if (units <= 0) {
		fprintf(stderr, "usage: cpuburn [units > 0]\n");
		return 2;
	}
	pthread_setname_np(pthread_self(), "cpuburn-main");
	if (pthread_create(&t, NULL, worker, (void *)(units / 2)) != 0) {
		perror("pthread_create");
		return 1;
	}
	pthread_setname_np(t, "cpuburn-worker");
	parent = getpid();
	child = fork();
	if (child == 0) {
		/* the child dies with its parent (a test that kills cpuburn
		 * 100000 must not leave the child working for a minute) */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(1);
		work(units / 20 + 1);
		_exit(0);
	}
	work(units - units / 2);
	pthread_join(t, NULL);
	if (child > 0)
		waitpid(child, NULL, 0);
	printf("cpuburn: %ld units done (child %d)\n", units, (int)child);
	return 0;
}
