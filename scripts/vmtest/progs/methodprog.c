/*
 * JProf's method entry/exit records, for the VM test
 * (scripts/vmtest/guest/jit.sh; the guest has no JVM): drives the
 * agent's record path the way calltree,trace does, through the agent's
 * own writer (tools/jprof/agent/jittrace.c, compiled in): a method is
 * named once (jt_method, JIT_METHOD) before its first event, then every
 * entry and exit is jt_event (0x30 interpreted / 0x50 jitted).  Whether
 * the records go to the module (PITRACE_IOC_METHOD) or to pitraced is
 * jittrace.c's choice ($PERFINSP_BACKEND), as in the agent.
 *
 * The "JVM": a jitted method's code is a hot loop copied into anonymous
 * executable memory named "Work.hot" by JIT_LOAD; the template
 * interpreter is a second copy named "Interpreter", which the
 * interpreted method Work.cold runs.  Calls (ids in brackets):
 *
 *   main thread:  Main.main[1] { N x Work.outer[2] { Work.hot[3] (MS ms),
 *                 Work.cold[4] (MS/4 ms) } }, then BENCH x Bench.empty[6]
 *   worker:       Worker.run[5] { N/2 x Work.hot[3] (MS ms) }
 *   a child:      Forged.method[9] once: its own pid, not the parent's
 *
 *   methodprog N MS BENCH
 *
 * Prints "methodprog: pid P child C ..." and the cost of one method event
 * on the calling thread (BENCH entries and exits) beside getppid's.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jittrace.h"

#define INTERP	0x30
#define JITTED	0x50

/* x86-64: mov %rdi,%rax; 1: dec %rax; jnz 1b; ret */
static const unsigned char hot_loop[] = {
	0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3,
};

static unsigned long (*jitted_hot)(unsigned long);	/* "Work.hot" */
static unsigned long (*interpreter)(unsigned long);	/* "Interpreter" */
static int n_iter, ms;
static unsigned long events;	/* records sent by this process (atomic) */

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* cached per thread, as the agent's gettid_ */
static unsigned tid(void)
{
	static __thread unsigned t;

	if (!t)
		t = (unsigned)syscall(SYS_gettid);
	return t;
}

/* calltree's m_info: a method is named once, before its first event */
static const char *names[16];
static int named[16];
static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;

static void enter(unsigned major, unsigned id)
{
	pthread_mutex_lock(&name_lock);
	if (!named[id]) {
		named[id] = 1;
		jt_method(id, names[id]);
		__atomic_add_fetch(&events, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&name_lock);
	jt_event(major, 0, tid(), id, 0);
	__atomic_add_fetch(&events, 1, __ATOMIC_RELAXED);
}

static void leave(unsigned major, unsigned id)
{
	jt_event(major, 1, tid(), id, 0);
	__atomic_add_fetch(&events, 1, __ATOMIC_RELAXED);
}

static void spin(unsigned long (*code)(unsigned long), int msecs)
{
	unsigned long long end = now_ns() + (unsigned long long)msecs * 1000000ULL;

	while (now_ns() < end)
		code(20000);
}

static void *worker(void *arg)
{
	(void)arg;
	enter(INTERP, 5);
	for (int i = 0; i < n_iter / 2; i++) {
		enter(JITTED, 3);
		spin(jitted_hot, ms);
		leave(JITTED, 3);
	}
	leave(INTERP, 5);
	return NULL;
}

static void *blob(const char *name)
{
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (code == MAP_FAILED) {
		perror("methodprog: mmap");
		exit(1);
	}
	memcpy(code, hot_loop, sizeof(hot_loop));
	__builtin___clear_cache((char *)code, (char *)code + sizeof(hot_loop));
	jt_load(tid(), (unsigned long long)(uintptr_t)code, sizeof(hot_loop), name);
	__atomic_add_fetch(&events, 1, __ATOMIC_RELAXED);
	return code;
}

int main(int argc, char **argv)
{
	unsigned long sent, failed;
	unsigned long long send_ns, t0, ev_ns, pp_ns;
	const char *err;
	int bench, st, stop = 0;
	pthread_t th, flusher;
	pid_t child;

	if (argc != 4) {
		fprintf(stderr, "usage: methodprog N MS BENCH\n");
		return 2;
	}
	n_iter = atoi(argv[1]);
	ms = atoi(argv[2]);
	bench = atoi(argv[3]);
	names[1] = "Main.main";
	names[2] = "Work.outer";
	names[3] = "Work.hot";
	names[4] = "Work.cold";
	names[5] = "Worker.run";
	names[6] = "Bench.empty";
	names[9] = "Forged.method";

	/* another process's events: the module writes its own pid */
	child = fork();
	if (child == 0) {
		enter(INTERP, 9);
		leave(INTERP, 9);
		jt_flush();
		jt_stats(&sent, &failed, &err, &send_ns);
		if (sent != 3 || failed)
			fprintf(stderr, "methodprog: child: sent %lu failed %lu err %s\n", sent, failed, err[0] ? err : "-");
		_exit(sent == 3 && failed == 0 ? 0 : 2);
	}
	if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "methodprog: the child's records failed\n");
		return 1;
	}

	/* the agent's sending thread (daemon backend), as jprof.c starts it */
	if (pthread_create(&flusher, NULL, jt_flusher, &stop)) {
		fprintf(stderr, "methodprog: pthread_create failed\n");
		return 1;
	}
	jitted_hot = (unsigned long (*)(unsigned long))blob("Work.hot");
	interpreter = (unsigned long (*)(unsigned long))blob("Interpreter");
	if (pthread_create(&th, NULL, worker, NULL)) {
		fprintf(stderr, "methodprog: pthread_create failed\n");
		return 1;
	}
	enter(INTERP, 1);
	for (int i = 0; i < n_iter; i++) {
		enter(INTERP, 2);
		enter(JITTED, 3);
		spin(jitted_hot, ms);
		leave(JITTED, 3);
		enter(INTERP, 4);
		spin(interpreter, ms / 4);
		leave(INTERP, 4);
		leave(INTERP, 2);
	}
	leave(INTERP, 1);
	pthread_join(th, NULL);

	/* the cost of one event on the calling thread, beside a system call */
	enter(INTERP, 6);
	leave(INTERP, 6);
	t0 = now_ns();
	for (int i = 1; i < bench; i++) {	/* the agent's per-event call */
		jt_event(INTERP, 0, tid(), 6, 0);
		jt_event(INTERP, 1, tid(), 6, 0);
	}
	ev_ns = now_ns() - t0;
	__atomic_add_fetch(&events, 2UL * (unsigned long)(bench - 1), __ATOMIC_RELAXED);
	t0 = now_ns();
	for (int i = 1; i < bench; i++) {
		syscall(SYS_getppid);
		syscall(SYS_getppid);
	}
	pp_ns = now_ns() - t0;

	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(flusher, NULL);
	jt_flush();
	jt_stats(&sent, &failed, &err, &send_ns);
	printf("methodprog: pid %d child %d sent %lu of %lu failed %lu err %s\n", (int)getpid(), (int)child,
	       sent, events, failed, err[0] ? err : "-");
	if (bench > 1)
		printf("methodprog: cost: %d method events %.0f ns each on the calling thread, getppid %.0f ns\n",
		       2 * (bench - 1), (double)ev_ns / (2.0 * (bench - 1)), (double)pp_ns / (2.0 * (bench - 1)));
	return failed || sent != events;
}
