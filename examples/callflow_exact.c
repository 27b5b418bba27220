// SPDX-License-Identifier: GPL-2.0
/*
 * callflow_exact.c - the exactness example of call flows (the -icount VM
 * test, scripts/vmtest/guest/callflow.sh; docs/callflow.md). Built with
 * -finstrument-functions (and without, for callgrind's reference counts).
 *
 * The measured functions call only measured functions (every instruction
 * they run is their own or a measured callee's): tiny leaves called many
 * times, a deep chain, recursion, one function reached from two callers,
 * an empty function, and a second thread; and three functions that make a
 * system call (libc's write(2) to /dev/null, getppid through syscall(2),
 * a 200 us nanosleep(2), whose time asleep is no one's CPU time):
 * the kernel's work is not the program's instructions (metric tsc-user
 * leaves it out, SYS shows it); and one that takes page faults (a write
 * to each of FAULT_PAGES pages the program dropped just before: the
 * kernel's work again, which tsc-user leaves out too). The harness (main,
 * the thread start, drop_pages) is not instrumented: libc's work (thread
 * creation, exit) is the threads' time outside instrumented functions,
 * which is not compared. mlockall faults every other page in before the
 * work (so that only fault_pages takes faults); a first, smaller pass
 * warms the code and the thread cache.
 *
 *   callflow_exact [N]    N leaf calls per pass (default 100000)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINSTR __attribute__((no_instrument_function))

static volatile unsigned long sink;
static int devnull = -1;

#define FAULT_PAGES 8
static char *fresh; /* FAULT_PAGES pages, unlocked, dropped before each fault_pages */
static long pagesz;

__attribute__((noinline)) void empty(void)
{
	__asm__ volatile("" ::: "memory"); /* keep the call: gcc drops calls to empty functions */
}

__attribute__((noinline)) void leaf(void)
{
	sink++;
}

__attribute__((noinline)) void chain4(void)
{
	leaf();
}

__attribute__((noinline)) void chain3(void)
{
	chain4();
}

__attribute__((noinline)) void chain2(void)
{
	chain3();
}

__attribute__((noinline)) void chain1(void)
{
	chain2();
}

__attribute__((noinline)) int fib(int n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) void shared(void)
{
	leaf();
	sink += 3;
}

__attribute__((noinline)) void caller_a(void)
{
	shared();
}

__attribute__((noinline)) void caller_b(void)
{
	shared();
	shared();
}

__attribute__((noinline)) void loop_leaf(long n)
{
	for (long i = 0; i < n; i++)
		leaf();
}

__attribute__((noinline)) void loop_empty(long n)
{
	for (long i = 0; i < n; i++)
		empty();
}

__attribute__((noinline)) void sys_write(void)
{
	static const char c = 'x';

	if (write(devnull, &c, 1) != 1)
		sink++;
}

__attribute__((noinline)) void sys_getppid(void)
{
	sink += (unsigned long)syscall(SYS_getppid);
}

__attribute__((noinline)) void sys_sleep(void)
{
	static const struct timespec ts = {0, 200000};

	if (nanosleep(&ts, NULL) != 0)
		sink++;
}

__attribute__((noinline)) void fault_pages(void)
{
	for (int i = 0; i < FAULT_PAGES; i++)
		fresh[(long)i * pagesz] = (char)i;
}

/* The next fault_pages faults a fresh zero page in at each write. */
NOINSTR static void drop_pages(void)
{
	if (madvise(fresh, (size_t)(FAULT_PAGES * pagesz), MADV_DONTNEED) != 0) {
		perror("callflow_exact: madvise");
		exit(1);
	}
}

__attribute__((noinline)) void work(long n)
{
	loop_leaf(n);
	loop_empty(n / 2);
	for (int i = 0; i < 100; i++)
		chain1();
	sink += (unsigned long)fib(15);
	for (int i = 0; i < 50; i++) {
		caller_a();
		caller_b();
	}
	for (int i = 0; i < 20; i++) {
		sys_write();
		sys_getppid();
	}
	for (int i = 0; i < 5; i++)
		sys_sleep();
	for (int i = 0; i < 10; i++) {
		drop_pages();
		fault_pages();
	}
}

__attribute__((noinline)) void *worker(void *arg)
{
	loop_leaf((long)arg);
	sink += (unsigned long)fib(10);
	return NULL;
}

NOINSTR static void pass(long n)
{
	pthread_t th;

	if (pthread_create(&th, NULL, worker, (void *)(n / 10)) != 0) {
		perror("pthread_create");
		exit(1);
	}
	work(n);
	pthread_join(th, NULL);
}

NOINSTR int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;

	/* Every page mapped now and later (thread stacks) is faulted in at
	 * once: a page fault is kernel work that the thread's TSC counts
	 * (an exception, not an interrupt) but no instruction trace of the
	 * program does. Not fatal when refused (not root, RLIMIT_MEMLOCK). */
	if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
		perror("callflow_exact: mlockall (page faults will be counted)");
	/* fault_pages' pages: out of mlockall's reach, one fault a page */
	pagesz = sysconf(_SC_PAGESIZE);
	fresh = mmap(NULL, (size_t)(FAULT_PAGES * pagesz), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fresh == MAP_FAILED) {
		perror("callflow_exact: mmap");
		return 1;
	}
	munlock(fresh, (size_t)(FAULT_PAGES * pagesz));
	madvise(fresh, (size_t)(FAULT_PAGES * pagesz), MADV_NOHUGEPAGE);
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0) {
		perror("callflow_exact: /dev/null");
		return 1;
	}
	pass(n / 100 + 1); /* warm-up */
	pass(n);
	printf("callflow_exact: %lu\n", (unsigned long)sink);
	return 0;
}
