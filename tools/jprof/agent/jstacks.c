/*
 * Java stacks for tprof (docs/jprof.md): in tprof mode the agent samples
 * the Java frames of the JVM's running threads, so that post can name the
 * ticks tprof takes in the interpreter (its generated code is one blob,
 * "Interpreter", whatever method it runs) by the method it was running.
 *
 * A CPU-time timer per thread (a task-clock perf event whose overflow
 * signals the thread, else timer_create on the thread's CPU clock,
 * SIGEV_THREAD_ID) sends the thread SIGPROF every 1/HZ s of its CPU time:
 * the threads that exist when sampling starts (/proc/self/task) and every
 * Java thread that starts later (JVMTI ThreadStart; the JVM's compiler
 * and GC threads start unannounced and are left out); the handler calls HotSpot's
 * AsyncGetCallTrace (the frame walk made for signal handlers: it fails
 * with a code instead of crashing on a frame it cannot walk) and copies
 * the method ids into a free slot of a preallocated ring: no allocation,
 * no lock, no call that is not async-signal-safe. The writer thread (a
 * daemon thread of the JVM) takes the filled slots, names each method
 * once (JVMTI), and appends both to DIR/jprof-PID.jstk, DIR the perf-map
 * directory (/tmp unless dir=).
 *
 * The file (little-endian): a 24-byte header "JPRFSTK1", u32 version (1),
 * u32 pid, u32 rate (Hz asked), u32 clock (1: CLOCK_MONOTONIC, the trace's
 * clock); then records of u32 type, u32 size (bytes, the 8 of the type and
 * size included, a multiple of 8):
 *   1 method: u64 id, the name (NUL-terminated, NUL-padded)
 *   2 sample: u32 tid, i32 frames (AsyncGetCallTrace's count: <= 0 is its
 *     failure code), u64 time (ns), then max(frames, 0) u64 method ids,
 *     the running frame first.
 *   3 native: u64 id, a method (named by a record 1) that is native (a
 *     Java frame it calls was called from C: reflection, JNI); readers
 *     skip the types they do not know.
 *
 * HotSpot gives AsyncGetCallTrace a method only if the method's jmethodID
 * exists: every class's method ids are made when the class is prepared
 * (and, at the start or an attach, for the classes loaded before).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jvmti.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "jprof.h"

typedef struct {
	jint bci;
	jmethodID method_id;
} asgct_frame;

typedef struct {
	JNIEnv *env;
	jint num_frames;
	asgct_frame *frames;
} asgct_trace;

typedef void (*asgct_fn)(asgct_trace *, jint, void *);

#define JS_DEPTH	256	/* javac runs 100 frames deep and more */
#define JS_SLOTS	2048	/* a power of two */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY };

struct js_slot {
	int state;
	uint32_t tid;
	int32_t n;
	uint64_t time;
	uint64_t ids[JS_DEPTH];
};

static struct js_slot *ring;
static unsigned ring_next;		/* atomic: the next slot to try */
static unsigned long js_dropped;	/* atomic: samples with no free slot */
static unsigned long js_taken, js_failed, js_native;	/* the writer's */
static asgct_fn asgct;
static JavaVM *js_vm;
static jvmtiEnv *js_jvmti;
static int js_fd = -1;
static unsigned js_hz;
static int js_on;			/* the timers run */
static int js_stop;			/* the writer ends */
static int js_writer;			/* the writer was started */
static pthread_t js_thread;
static struct sigaction js_old;
static char js_path[4096];

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void on_prof(int sig, siginfo_t *si, void *uc)
{
	asgct_frame fr[JS_DEPTH];
	asgct_trace tr;
	struct js_slot *s;
	JNIEnv *env = NULL;
	int saved = errno, free_ = SLOT_FREE;
	unsigned i;

	(void)sig; (void)si;
	/* GetEnv reads the thread's JVM state: JNI_EDETACHED off the JVM's threads */
	if ((*js_vm)->GetEnv(js_vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK || !env)
		goto out;
	i = __atomic_fetch_add(&ring_next, 1, __ATOMIC_RELAXED) & (JS_SLOTS - 1);
	s = &ring[i];
	if (!__atomic_compare_exchange_n(&s->state, &free_, SLOT_FILLING, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&js_dropped, 1, __ATOMIC_RELAXED);
		goto out;
	}
	tr.env = env;
	tr.num_frames = 0;
	tr.frames = fr;
	asgct(&tr, JS_DEPTH, uc);
	s->tid = (uint32_t)syscall(SYS_gettid);
	s->time = mono_ns();
	s->n = tr.num_frames;
	for (int k = 0; k < tr.num_frames && k < JS_DEPTH; k++)
		s->ids[k] = (uint64_t)(uintptr_t)fr[k].method_id;
	__atomic_store_n(&s->state, SLOT_READY, __ATOMIC_RELEASE);	/* pairs with the writer's acquire */
out:
	errno = saved;
}

/* The method ids the writer named already (the writer's own). */
static uint64_t *named;
static size_t named_cap, named_n;

static int name_once(uint64_t id)
{
	size_t i, mask;

	if (!id)
		return 0;
	if (2 * (named_n + 1) > named_cap) {
		size_t cap = named_cap ? 2 * named_cap : 4096;
		uint64_t *t = calloc(cap, sizeof(*t)), *old = named;

		if (!t)
			return 0;
		named = t;
		named_cap = cap;
		named_n = 0;
		for (i = 0; old && i < cap / 2; i++)
			if (old[i])
				name_once(old[i]);
		free(old);
	}
	mask = named_cap - 1;
	for (i = (size_t)(id >> 3) * 0x9E3779B97F4A7C15ULL & mask; named[i]; i = (i + 1) & mask)
		if (named[i] == id)
			return 0;
	named[i] = id;
	named_n++;
	return 1;
}

static unsigned char obuf[1 << 16];
static size_t olen;

static void out_flush(void)
{
	size_t o = 0;

	while (o < olen) {
		ssize_t w = write(js_fd, obuf + o, olen - o);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		o += (size_t)w;
	}
	olen = 0;
}

static void out(const void *p, size_t n)
{
	if (olen + n > sizeof(obuf))
		out_flush();
	memcpy(obuf + olen, p, n);
	olen += n;
}

static void put_method(uint64_t id)
{
	char *name = jprof_method_name((jmethodID)(uintptr_t)id);
	uint32_t h[2];
	size_t n;
	jboolean native = JNI_FALSE;
	static const char zero[8];

	if (!name)
		return;
	n = strlen(name) + 1;
	h[0] = 1;
	h[1] = (uint32_t)(8 + 8 + ((n + 7) & ~(size_t)7));
	out(h, 8);
	out(&id, 8);
	out(name, n);
	out(zero, ((n + 7) & ~(size_t)7) - n);
	free(name);
	if ((*js_jvmti)->IsMethodNative(js_jvmti, (jmethodID)(uintptr_t)id, &native) == JVMTI_ERROR_NONE && native) {
		h[0] = 3;
		h[1] = 16;
		out(h, 8);
		out(&id, 8);
	}
}

static void put_sample(const struct js_slot *s)
{
	int n = s->n > 0 ? (s->n < JS_DEPTH ? s->n : JS_DEPTH) : 0;
	uint32_t h[4] = { 2, (uint32_t)(24 + 8 * n), s->tid, (uint32_t)s->n };

	for (int k = 0; k < n; k++)
		if (name_once(s->ids[k]))
			put_method(s->ids[k]);
	out(h, 16);
	out(&s->time, 8);
	out(s->ids, 8 * (size_t)n);
}

/* Takes the filled slots into the file. */
static void drain(void)
{
	for (unsigned i = 0; i < JS_SLOTS; i++) {
		struct js_slot *s = &ring[i];

		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_READY)
			continue;
		put_sample(s);
		if (s->n > 0)
			js_taken++;
		else if (s->n == -3 || s->n == -4)	/* ticks_unknown_not_Java, ticks_not_walkable_not_Java */
			js_native++;
		else
			js_failed++;
		__atomic_store_n(&s->state, SLOT_FREE, __ATOMIC_RELEASE);
	}
	out_flush();
}

static void *writer(void *arg)
{
	JNIEnv *env = NULL;

	(void)arg;
	/* attached: JVMTI names methods for attached threads only */
	if ((*js_vm)->AttachCurrentThreadAsDaemon(js_vm, (void **)&env, NULL) != JNI_OK)
		return NULL;
	while (!__atomic_load_n(&js_stop, __ATOMIC_ACQUIRE)) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		drain();
	}
	drain();
	(*js_vm)->DetachCurrentThread(js_vm);
	return NULL;
}

/* Makes the jmethodIDs of klass's methods (AsyncGetCallTrace needs them). */
static void make_ids(jvmtiEnv *jvmti, jclass klass)
{
	jint n = 0;
	jmethodID *ms = NULL;

	if ((*jvmti)->GetClassMethods(jvmti, klass, &n, &ms) == JVMTI_ERROR_NONE && ms)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)ms);
}

void jstacks_class_prepare(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jclass klass)
{
	(void)jni; (void)th;
	make_ids(jvmti, klass);
}

static void make_all_ids(void)
{
	jint n = 0;
	jclass *cs = NULL;

	if ((*js_jvmti)->GetLoadedClasses(js_jvmti, &n, &cs) != JVMTI_ERROR_NONE)
		return;
	for (jint i = 0; i < n; i++)
		make_ids(js_jvmti, cs[i]);
	(*js_jvmti)->Deallocate(js_jvmti, (unsigned char *)cs);
}

/*
 * The threads' timers; a thread beyond JS_TIMERS is not sampled. A
 * thread's timer is a perf event on its CPU time (task-clock, an hrtimer:
 * the rate asked whatever the kernel's HZ) whose overflow sends the
 * thread SIGPROF (O_ASYNC, F_SETOWN_EX to the thread, F_SETSIG): a
 * sample in the kernel counts only where perf_event_paranoid allows it,
 * else at the next return to user mode. Where perf events are refused,
 * a POSIX timer on the thread's CPU clock, which the kernel checks at its
 * scheduler tick (a rate of at most HZ).
 */
#define JS_TIMERS	4096
static struct {
	pid_t tid;		/* 0: a free entry */
	int fd;			/* the perf event, or -1: the POSIX timer */
	timer_t t;
} timers[JS_TIMERS];
static pthread_mutex_t timers_lock = PTHREAD_MUTEX_INITIALIZER;	/* timers[], js_on */
static unsigned long js_untimed;	/* threads with no timer */
static int js_no_perf;		/* perf events refused: POSIX timers */
static int js_user_only;	/* perf events of user mode only (perf_event_paranoid) */

/* A perf event on tid's CPU time that sends it SIGPROF; -1 if refused. */
static int thread_perf(pid_t tid)
{
	struct perf_event_attr a;
	struct f_owner_ex own = { F_OWNER_TID, tid };
	int fd;

	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_SOFTWARE;
	a.size = sizeof(a);
	a.config = PERF_COUNT_SW_TASK_CLOCK;
	a.sample_period = 1000000000ULL / js_hz;
	a.exclude_kernel = js_user_only;
	a.exclude_hv = 1;
	a.disabled = 1;
	fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0 && (errno == EACCES || errno == EPERM) && !js_user_only) {
		js_user_only = 1;
		a.exclude_kernel = 1;
		fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	}
	if (fd < 0)
		return -1;
	if (fcntl(fd, F_SETOWN_EX, &own) != 0 || fcntl(fd, F_SETSIG, SIGPROF) != 0 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0 || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A timer on tid's CPU clock; timers_lock held. */
static void thread_timer(pid_t tid)
{
	/* the kernel's id of a thread's CPU clock: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) */
	clockid_t clk = (clockid_t)((~(unsigned)tid << 3) | 6);
	struct itimerspec its;
	struct sigevent ev;
	int i, free_ = -1;

	for (i = 0; i < JS_TIMERS; i++) {
		if (timers[i].tid == tid)
			return;
		if (!timers[i].tid && free_ < 0)
			free_ = i;
	}
	if (free_ < 0) {
		js_untimed++;
		return;
	}
	if (!js_no_perf) {
		int fd = thread_perf(tid);

		if (fd >= 0) {
			timers[free_].fd = fd;
			timers[free_].tid = tid;
			return;
		}
		if (errno != ESRCH)
			js_no_perf = 1;	/* refused: POSIX timers from now on */
	}
	memset(&ev, 0, sizeof(ev));
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev.sigev_signo = SIGPROF;
	ev._sigev_un._tid = tid;	/* sigev_notify_thread_id, which older glibc headers lack */
	if (timer_create(clk, &ev, &timers[free_].t) != 0) {
		js_untimed++;
		return;
	}
	memset(&its, 0, sizeof(its));
	its.it_interval.tv_nsec = 1000000000L / js_hz;
	its.it_value = its.it_interval;
	if (timer_settime(timers[free_].t, 0, &its, NULL) != 0) {
		timer_delete(timers[free_].t);
		js_untimed++;
		return;
	}
	timers[free_].fd = -1;
	timers[free_].tid = tid;
}

/* Entry i's timer deleted; timers_lock held. */
static void timer_drop(int i)
{
	if (timers[i].fd >= 0)
		close(timers[i].fd);
	else
		timer_delete(timers[i].t);
	timers[i].tid = 0;
}

/* Every thread's timer deleted; timers_lock held. */
static void timers_delete(void)
{
	for (int i = 0; i < JS_TIMERS; i++)
		if (timers[i].tid)
			timer_drop(i);
}

/* Timers for the process's threads that exist; timers_lock held. */
static void timers_all(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		long tid = strtol(e->d_name, NULL, 10);

		if (tid > 0)
			thread_timer((pid_t)tid);
	}
	closedir(d);
}

void jstacks_thread_start(void)
{
	pthread_mutex_lock(&timers_lock);
	if (js_on)
		thread_timer((pid_t)syscall(SYS_gettid));
	pthread_mutex_unlock(&timers_lock);
}

void jstacks_thread_end(void)
{
	pid_t tid = (pid_t)syscall(SYS_gettid);

	pthread_mutex_lock(&timers_lock);
	for (int i = 0; i < JS_TIMERS; i++)
		if (timers[i].tid == tid)
			timer_drop(i);
	pthread_mutex_unlock(&timers_lock);
}

int jstacks_init(JavaVM *vm, jvmtiEnv *jvmti, const char *dir, unsigned hz)
{
	struct {
		char magic[8];
		uint32_t version, pid, rate, clock;
	} hdr = { { 'J', 'P', 'R', 'F', 'S', 'T', 'K', '1' }, 1, 0, 0, 1 };
	void *jvm;

	if (js_fd >= 0)
		return 0;	/* a second attach: the same file */
	asgct = (asgct_fn)dlsym(RTLD_DEFAULT, "AsyncGetCallTrace");
	if (!asgct && (jvm = dlopen("libjvm.so", RTLD_LAZY | RTLD_NOLOAD)) != NULL)
		asgct = (asgct_fn)dlsym(jvm, "AsyncGetCallTrace");
	if (!asgct) {
		fprintf(stderr, "jprof: this JVM has no AsyncGetCallTrace: interpreted methods stay unnamed (jstacks=off says so quietly)\n");
		return -1;
	}
	ring = calloc(JS_SLOTS, sizeof(*ring));
	if (!ring)
		return -1;
	js_vm = vm;
	js_jvmti = jvmti;
	js_hz = hz;
	snprintf(js_path, sizeof(js_path), "%s/jprof-%d.jstk", dir, (int)getpid());
	/* a file of an earlier process of this pid is ours to replace; another
	 * user's (in a sticky /tmp) is not, and O_EXCL refuses it and links */
	if (unlink(js_path) != 0 && errno != ENOENT) {
		fprintf(stderr, "jprof: %s exists and is not ours to replace (%s): interpreted methods stay unnamed; give dir=DIR\n", js_path, strerror(errno));
		return -1;
	}
	js_fd = open(js_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (js_fd < 0) {
		fprintf(stderr, "jprof: cannot create %s (%s): interpreted methods stay unnamed; give dir=DIR\n", js_path, strerror(errno));
		return -1;
	}
	hdr.pid = (uint32_t)getpid();
	hdr.rate = hz;
	out(&hdr, sizeof(hdr));
	out_flush();
	return 0;
}

int jstacks_start(void)
{
	struct sigaction sa;

	if (js_fd < 0 || js_on)
		return js_fd < 0 ? -1 : 0;
	make_all_ids();
	if (!js_writer) {
		if (pthread_create(&js_thread, NULL, writer, NULL) != 0)
			return -1;
		js_writer = 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_prof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPROF, &sa, &js_old) != 0) {
		fprintf(stderr, "jprof: cannot start the Java stack sampler: %s\n", strerror(errno));
		return -1;
	}
	pthread_mutex_lock(&timers_lock);
	js_on = 1;
	timers_all();
	pthread_mutex_unlock(&timers_lock);
	return 0;
}

/* The timers deleted, the handler kept; the file stays (another attach). */
void jstacks_pause(void)
{
	pthread_mutex_lock(&timers_lock);
	timers_delete();
	/* SIGPROF already pending goes to the handler: it stays installed */
	js_on = 0;
	pthread_mutex_unlock(&timers_lock);
}

void jstacks_end(int verbose)
{
	jstacks_pause();
	if (js_writer) {
		__atomic_store_n(&js_stop, 1, __ATOMIC_RELEASE);
		pthread_join(js_thread, NULL);
		js_writer = 0;
	}
	if (js_fd >= 0 && verbose)
		fprintf(stderr, "jprof: %lu Java stacks sampled, %lu not walkable, %lu dropped (no free slot), %lu outside Java code (compiler, GC, native); in %s; timers: %s%s\n",
			js_taken, js_failed, __atomic_load_n(&js_dropped, __ATOMIC_RELAXED), js_native, js_path,
			js_no_perf ? "POSIX CPU-clock timers (perf events refused: at most the kernel's HZ)" :
			js_user_only ? "perf task-clock, user mode only (perf_event_paranoid)" : "perf task-clock",
			js_untimed ? " (some threads had no timer: too many threads, or the pending-signal limit)" : "");
}
