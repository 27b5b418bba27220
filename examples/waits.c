/*
 * waits: threads that wait in known ways, each timing its own waits, for
 * the off-CPU and wake-up latency reports (post -sched, --offcpu, --wall).
 *
 *   waits DIR
 *
 * sleeper:  10 x nanosleep(100 ms)
 * reader:   20 x read() of a pipe the feeder writes every 50 ms
 * locker:   10 x pthread_mutex_lock() of a mutex the holder holds 20 ms
 * writer:   10 x (1 MB pwrite, fdatasync) of DIR/waits.data (removed at exit)
 * starved:  30 ms of CPU work at nice 5, pinned to CPU 0 beside the
 *           hog, a busy thread at nice 0 pinned there too
 *
 * At the end each thread prints one line: its role, thread id, the number
 * of waits, the time they took by CLOCK_MONOTONIC around the calls and the
 * CPU time the thread ran within them (CLOCK_THREAD_CPUTIME_ID: on a
 * machine that starves the thread's CPU, as a virtual CPU on a busy host
 * is, the system call's own path takes time that is not off the CPU); the
 * starved thread: its CPU time and its wall time. Build with frame
 * pointers: gcc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static long long now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

struct result {
	const char *role;
	pid_t tid;
	int count;
	long long ns, ns2;
};

static struct result results[8];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t held;
static int pfd[2];
static const char *dir;
static atomic_int stop_hog;
static volatile unsigned long sink;

static void die(const char *what)
{
	fprintf(stderr, "waits: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Each wait goes through two calls of its own: the C library's call does
 * not keep a frame pointer, so the frame-pointer walk skips its caller
 * (the inner one) and shows the outer one. */
static NOINLINE int sleep_call(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	int r = nanosleep(&ts, NULL);

	return r < 0 ? -errno : r;
}

static NOINLINE long long sleep_timed(long ms)
{
	long long t0 = now_ns(CLOCK_MONOTONIC);

	if (sleep_call(ms) < 0)
		die("nanosleep");
	return now_ns(CLOCK_MONOTONIC) - t0;
}

static void *sleeper(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	for (int i = 0; i < 10; i++, r->count++) {
		long long c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);

		r->ns += sleep_timed(100);
		r->ns2 += now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	}
	return NULL;
}

static NOINLINE ssize_t read_call(char *c)
{
	ssize_t n = read(pfd[0], c, 1);

	return n < 0 ? -errno : n;
}

static NOINLINE long long read_timed(void)
{
	char c;
	long long t0 = now_ns(CLOCK_MONOTONIC);

	if (read_call(&c) != 1)
		die("read");
	return now_ns(CLOCK_MONOTONIC) - t0;
}

static void *reader(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	for (int i = 0; i < 20; i++, r->count++) {
		long long c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);

		r->ns += read_timed();
		r->ns2 += now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	}
	return NULL;
}

static void *feeder(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	for (int i = 0; i < 20; i++) {
		sleep_timed(50);
		if (write(pfd[1], "x", 1) != 1)
			die("write");
	}
	return NULL;
}

static NOINLINE int lock_call(void)
{
	int e = pthread_mutex_lock(&lock);

	return e ? -e : 0;
}

static NOINLINE long long lock_timed(void)
{
	long long t0 = now_ns(CLOCK_MONOTONIC);

	if (lock_call() < 0)
		die("lock");
	return now_ns(CLOCK_MONOTONIC) - t0;
}

static void *locker(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	for (int i = 0; i < 10; i++, r->count++) {
		while (sem_wait(&held) < 0)
			;
		long long c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);

		r->ns += lock_timed();
		r->ns2 += now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

static void *holder(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	for (int i = 0; i < 10; i++) {
		pthread_mutex_lock(&lock);
		sem_post(&held);
		sleep_timed(20);
		pthread_mutex_unlock(&lock);
		sleep_timed(5);
	}
	return NULL;
}

static NOINLINE int sync_call(int fd)
{
	int e = fdatasync(fd);

	return e < 0 ? -errno : 0;
}

static NOINLINE long long sync_timed(int fd)
{
	long long t0 = now_ns(CLOCK_MONOTONIC);

	if (sync_call(fd) < 0)
		die("fdatasync");
	return now_ns(CLOCK_MONOTONIC) - t0;
}

static void *writer(void *arg)
{
	struct result *r = arg;
	static char buf[1 << 20];
	char path[4096];
	int fd;

	r->tid = gettid_();
	snprintf(path, sizeof(path), "%s/waits.data", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die(path);
	for (int i = 0; i < 10; i++, r->count++) {
		memset(buf, 'a' + i, sizeof(buf));
		if (pwrite(fd, buf, sizeof(buf), (off_t)i * sizeof(buf)) != sizeof(buf))
			die("pwrite");
		r->ns += sync_timed(fd);
	}
	close(fd);
	unlink(path);
	return NULL;
}

static void pin0(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity");
}

static void *hog(void *arg)
{
	struct result *r = arg;

	r->tid = gettid_();
	pin0();
	while (!atomic_load_explicit(&stop_hog, memory_order_relaxed))
		sink++;
	return NULL;
}

static void *starved(void *arg)
{
	struct result *r = arg;
	long long c0, w0;

	r->tid = gettid_();
	pin0();
	if (setpriority(PRIO_PROCESS, r->tid, 5) < 0)
		die("setpriority");
	sleep_timed(10); /* the hog is on CPU 0 by now */
	w0 = now_ns(CLOCK_MONOTONIC);
	c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	while (now_ns(CLOCK_THREAD_CPUTIME_ID) - c0 < 30000000LL)
		for (int i = 0; i < 1000; i++)
			sink += i;
	r->ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	r->ns2 = now_ns(CLOCK_MONOTONIC) - w0;
	r->count = 1;
	atomic_store(&stop_hog, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *role;
		void *(*fn)(void *);
	} roles[] = {
		{ "sleeper", sleeper }, { "reader", reader }, { "feeder", feeder }, { "locker", locker },
		{ "holder", holder }, { "writer", writer }, { "hog", hog }, { "starved", starved },
	};
	pthread_t th[8];
	int n = sizeof(roles) / sizeof(roles[0]);

	if (argc != 2 || !strcmp(argv[1], "--help")) {
		fprintf(stderr, "usage: waits DIR (a directory for the writer's file)\n");
		return 2;
	}
	dir = argv[1];
	if (pipe(pfd) < 0)
		die("pipe");
	if (sem_init(&held, 0, 0) < 0)
		die("sem_init");
	for (int i = 0; i < n; i++) {
		results[i].role = roles[i].role;
		if (pthread_create(&th[i], NULL, roles[i].fn, &results[i]))
			die("pthread_create");
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < n; i++)
		printf("%s %d %d %lld %lld\n", results[i].role, results[i].tid, results[i].count, results[i].ns, results[i].ns2);
	return 0;
}
