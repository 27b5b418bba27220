/*
 * PTT, per-thread metrics read without a system call. See docs/ptt.md.
 *
 * Two backends:
 *   kmod    the pitrace module (/dev/pitrace): each thread maps its own work
 *           area (struct pitrace_ptt_area), which the module keeps current
 *           at every dispatch and around every interrupt (interrupts are
 *           factored out). A read is accum + ((rdtsc - last) & live) inside
 *           a sequence check, the same code for every metric.
 *   perf    no module: one perf_event counter per metric and thread, read
 *           through the counter's mmap page.
 * $PERFINSP_BACKEND=kmod|daemon forces one ("perf" is accepted: its former name); auto (or unset) takes kmod when
 * /dev/pitrace can be opened.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perfutil.h"
#include "backend.h"
#include "../../kmod/uapi/pitrace.h"

enum { K_SWITCH_TIME, K_TSC_TIME, K_PMC, K_DISPATCH, K_SYSCALL, K_KMOD };
enum { B_DAEMON, B_KMOD };
enum { ST_OK = 0, ST_UNSET = 1, ST_DEAD = 2, ST_STOPPING = 3 };

struct metric {
	const char *name;
	uint32_t type;
	uint64_t config;
	int hw;
	int tsc; /* the module's TSC metric (kmod backend only) */
};

static const struct metric metrics_tab[] = {
	{"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 1, 0},
	{"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, 1, 0},
	{"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 1, 0},
	{"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, 1, 0},
	{"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 0, 0},
	{"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, 0, 0},
	{"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, 0, 0},
	{"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 1, 0},
	{"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 1, 0},
	{"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, 0, 0},
	{"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN, 0, 0},
	{"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 0, 0},
	{"ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES, 1, 0},
	{"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, 0, 0},
	{"tsc", 0, 0, 0, 1},
};
#define NTAB ((int)(sizeof metrics_tab / sizeof metrics_tab[0]))

/* Process-wide configuration. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static unsigned generation;
static int nmetrics;
static const struct metric *chosen[PTT_MAX_METRICS];
static int kinds[PTT_MAX_METRICS];
static int exclude_kernel;
static int backend;  /* B_DAEMON or B_KMOD, while initialized */
static int kfd = -1; /* /dev/pitrace (kmod backend) */
static struct PttThreadState *all_threads;
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
/* Zero pages swapped in for terminated threads' mappings, freed by the
 * next PttInit. */
static struct grave {
	void *p;
	size_t len;
	struct grave *next;
} *graves;

static const uint32_t zero_lock;
/* What a terminated thread's counters point at from then on. */
static const char zero_area[8192] __attribute__((aligned(4096)));
static uint64_t read_unset(struct PttThreadState *s)
{
	(void)s;
	return 0;
}
static void readn_unset(struct PttThreadState *s, uint64_t *values)
{
	(void)s;
	(void)values;
}
static struct PttThreadState unset_state = {.lock = &zero_lock, .read1 = read_unset, .readn = readn_unset, .status = ST_UNSET};
/* An exiting thread's state once its counters are released (thread_exit):
 * a signal handler that reads after that reads zeros. */
static struct PttThreadState exited_state = {.lock = &zero_lock, .read1 = read_unset, .readn = readn_unset, .status = ST_DEAD};
__thread struct PttThreadState *PttSelf = &unset_state;

static __thread int last_err;
static __thread char last_msg[512];

static int fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_msg, sizeof last_msg, fmt, ap);
	va_end(ap);
	last_err = code;
	return code;
}

const char *PttStrerror(int err)
{
	if (err == last_err && err != 0 && last_msg[0])
		return last_msg;
	switch (err) {
	case PTT_OK: return "success";
	case PTT_EINVAL: return "invalid argument";
	case PTT_ETOOMANY: return "too many metrics: PTT supports at most 8 at once";
	case PTT_EUNKNOWN: return "unknown metric";
	case PTT_ENOPMU: return "no hardware PMU on this machine";
	case PTT_EPERM: return "permission denied by perf_event_paranoid";
	case PTT_ENOTINIT: return "ptt is not initialized: call PttInit first";
	case PTT_ETERMINATED: return "ptt was terminated: this thread's work area is gone";
	case PTT_ESYS: return "a system call failed";
	case PTT_EBUSY: return "ptt is already initialized: call PttTerminate first";
	case PTT_ENOBACKEND: return "the requested PTT backend is not available";
	}
	return "unknown error";
}

/* ---- the read paths ---- */

#define barrier() __asm__ __volatile__("" ::: "memory")

struct page { /* the head of struct perf_event_mmap_page */
	uint32_t version, compat_version, lock, index;
	int64_t offset;
	uint64_t time_enabled, time_running, capabilities;
	uint16_t pmc_width, time_shift;
	uint32_t time_mult;
	uint64_t time_offset;
};
#define PG(c) ((const volatile struct page *)(c)->page)
#define PG_DATA_HEAD 1024

static inline uint64_t rdtsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint32_t lo, hi;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#else
	return 0;
#endif
}

static inline uint64_t rdpmc(uint32_t idx)
{
#if defined(__x86_64__) || defined(__i386__)
	uint32_t lo, hi;
	__asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(idx));
	return ((uint64_t)hi << 32) | lo;
#else
	(void)idx;
	return 0;
#endif
}

static inline uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t val_switch(const struct PttCounter *c)
{
	uint64_t head = *(const volatile uint64_t *)((const volatile char *)c->page + PG_DATA_HEAD);
	barrier();
	uint64_t at = *(const volatile uint64_t *)(c->data + ((head - 8) & c->mask));
	uint64_t run = PG(c)->time_running;
	uint64_t now = mono_ns();
	uint64_t d = now - at;
	return run + (now >= at ? d : 0); /* a conditional move, after the read */
}

static inline uint64_t val_tsc(const struct PttCounter *c)
{
	const volatile struct page *p = PG(c);
	uint64_t run = p->time_running, off = p->time_offset;
	uint32_t mult = p->time_mult;
	uint16_t shift = p->time_shift;
	uint64_t cyc = rdtsc();
	uint64_t quot = cyc >> shift, rem = cyc & (((uint64_t)1 << shift) - 1);
	return run + off + quot * mult + ((rem * mult) >> shift);
}

static inline uint64_t val_pmc(const struct PttCounter *c)
{
	const volatile struct page *p = PG(c);
	uint32_t idx = p->index;
	int64_t off = p->offset;
	uint16_t width = p->pmc_width;
	if (!idx) /* not on a hardware counter now: rdpmc would fault */
		return (uint64_t)off;
	uint64_t pmc = rdpmc(idx - 1);
	if (width > 0 && width < 64)
		pmc = (uint64_t)((int64_t)(pmc << (64 - width)) >> (64 - width));
	return (uint64_t)(off + (int64_t)pmc);
}

static inline uint64_t val_dispatch(const struct PttCounter *c)
{
	return (uint64_t)PG(c)->offset;
}

static uint64_t val_syscall(const struct PttCounter *c)
{
	uint64_t v = 0;
	if (read(c->fd, &v, sizeof v) != (ssize_t)sizeof v)
		return 0;
	return v;
}

static uint64_t val_any(const struct PttCounter *c)
{
	switch (c->kind) {
	case K_SWITCH_TIME: return val_switch(c);
	case K_TSC_TIME: return val_tsc(c);
	case K_PMC: return val_pmc(c);
	case K_DISPATCH: return val_dispatch(c);
	}
	return val_syscall(c);
}

/* One-metric readers, one per kind: the retry loop around the counter read. */
#define READ1(NAME, VAL)                                           \
	static uint64_t NAME(struct PttThreadState *s)             \
	{                                                          \
		for (;;) {                                         \
			uint32_t seq = *s->lock;                   \
			barrier();                                 \
			uint64_t v = VAL(&s->c[0]);                \
			barrier();                                 \
			if (__builtin_expect(*s->lock == seq, 1))  \
				return v;                          \
			s->retries++;                              \
		}                                                  \
	}
READ1(read1_switch, val_switch)
READ1(read1_tsc, val_tsc)
READ1(read1_pmc, val_pmc)
READ1(read1_dispatch, val_dispatch)
READ1(read1_syscall, val_syscall)

static void read_all(struct PttThreadState *s, uint64_t *values)
{
	for (;;) {
		uint32_t seq = *s->lock;
		barrier();
		for (int i = 0; i < s->n; i++)
			values[i] = val_any(&s->c[i]);
		barrier();
		if (__builtin_expect(*s->lock == seq, 1))
			return;
		s->retries++;
	}
}

/*
 * The kmod backend: the calling thread's work area, the same code for every
 * metric (live[i] is all ones for the TSC, 0 for a perf counter, which the
 * module keeps current to the thread's last state change). One rdtsc serves
 * all metrics of a read. The one branch of the fast path is the retry check:
 * the sequence changed or was odd (the module was updating the area), or the
 * area is dead (PTT_TERM, or the file was closed under the library).
 */
typedef const volatile struct pitrace_ptt_area karea;
#define KAREA(s) ((karea *)(s)->c[0].page)
#define KVAL(a, i, t) ((a)->accum[i] + (((t) - (a)->last[i]) & (a)->live[i]))
#define KBAD(a, seq) (((a)->seq ^ (seq)) | ((seq) & 1) | (a)->dead)

static int kmod_dead(struct PttThreadState *s);

static uint64_t kmod_read1(struct PttThreadState *s)
{
	karea *a = KAREA(s);
	for (;;) {
		uint32_t seq = a->seq;
		barrier();
		uint64_t v = KVAL(a, 0, rdtsc());
		barrier();
		if (__builtin_expect(KBAD(a, seq) == 0, 1))
			return v;
		if (kmod_dead(s))
			return 0;
		s->retries++;
	}
}

static void kmod_read2(struct PttThreadState *s, uint64_t *values)
{
	karea *a = KAREA(s);
	for (;;) {
		uint32_t seq = a->seq;
		barrier();
		uint64_t t = rdtsc();
		uint64_t v0 = KVAL(a, 0, t), v1 = KVAL(a, 1, t);
		barrier();
		if (__builtin_expect(KBAD(a, seq) == 0, 1)) {
			values[0] = v0;
			values[1] = v1;
			return;
		}
		if (kmod_dead(s))
			return;
		s->retries++;
	}
}

static void kmod_readn(struct PttThreadState *s, uint64_t *values)
{
	karea *a = KAREA(s);
	int n = s->n;
	for (;;) {
		uint32_t seq = a->seq;
		barrier();
		uint64_t t = rdtsc();
		for (int i = 0; i < n; i++)
			values[i] = KVAL(a, i, t);
		barrier();
		if (__builtin_expect(KBAD(a, seq) == 0, 1))
			return;
		if (kmod_dead(s))
			return;
		s->retries++;
	}
}

/* ---- counters ---- */

static void readn_one(struct PttThreadState *s, uint64_t *values);

static int perf_open(const struct metric *m, int switch_records, int excl_kernel, int *err)
{
	struct perf_event_attr a;
	memset(&a, 0, sizeof a);
	a.size = sizeof a;
	a.type = m->type;
	a.config = m->config;
	a.exclude_hv = 1;
	a.exclude_kernel = excl_kernel;
	if (switch_records) {
		a.context_switch = 1;
		a.sample_id_all = 1;
		a.sample_type = PERF_SAMPLE_TIME;
		a.use_clockid = 1;
		a.clockid = CLOCK_MONOTONIC;
	}
	int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	*err = fd < 0 ? errno : 0;
	return fd;
}

static int has_pmu(void)
{
	struct stat st;
	return stat("/sys/bus/event_source/devices/cpu", &st) == 0 ||
	       stat("/sys/bus/event_source/devices/cpu_core", &st) == 0;
}

static int open_error(const struct metric *m, int err)
{
	if (m->hw && (err == ENOENT || err == EOPNOTSUPP || err == ENODEV)) {
		if (!has_pmu())
			return fail(PTT_ENOPMU, "no hardware PMU on this machine: metric %s needs a hardware counter", m->name);
		return fail(PTT_ENOPMU, "metric %s: the hardware PMU does not provide this event: %s", m->name, strerror(err));
	}
	if (err == EACCES || err == EPERM)
		return fail(PTT_EPERM, "metric %s: perf_event_open: permission denied (perf_event_paranoid)", m->name);
	if (err == EMFILE)
		return fail(PTT_ESYS, "metric %s: out of file descriptors (raise ulimit -n)", m->name);
	return fail(PTT_ESYS, "metric %s: perf_event_open: %s", m->name, strerror(err));
}

static int is_time(const struct metric *m)
{
	return m->type == PERF_TYPE_SOFTWARE && (m->config == PERF_COUNT_SW_TASK_CLOCK || m->config == PERF_COUNT_SW_CPU_CLOCK);
}

static int is_dispatch(const struct metric *m)
{
	return m->type == PERF_TYPE_SOFTWARE && (m->config == PERF_COUNT_SW_CONTEXT_SWITCHES || m->config == PERF_COUNT_SW_CPU_MIGRATIONS);
}

static void release_counters(struct PttThreadState *s, int n)
{
	for (int i = 0; i < n; i++) {
		if (s->c[i].page)
			munmap((void *)s->c[i].page, s->c[i].size);
		if (s->c[i].fd >= 0)
			close(s->c[i].fd);
		s->c[i].page = NULL;
		s->c[i].fd = -1;
	}
}

/* Unlink and free a state only its own thread can reach (with mu held). */
static void forget_locked(struct PttThreadState *s)
{
	for (struct PttThreadState **p = &all_threads; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			free(s);
			return;
		}
}

/* The thread exits: release its counters and state (called by pthread). */
static void thread_exit(void *arg)
{
	struct PttThreadState *s = arg;
	pthread_mutex_lock(&mu);
	/* Before anything is released or freed: a signal handler of this
	 * thread (an instrumented one's hooks read the counters) reads the
	 * exited state from here on, never an unmapped page or freed state. */
	if (PttSelf == s)
		PttSelf = &exited_state;
	barrier();
	if (s->status == ST_OK && s->gen == generation && initialized) {
		s->status = ST_DEAD;
		release_counters(s, s->n);
	}
	forget_locked(s);
	pthread_mutex_unlock(&mu);
}

static void make_key(void)
{
	pthread_key_create(&exit_key, thread_exit);
}

/* From now on the state reads zeros (static, never unmapped). */
static void park_state(struct PttThreadState *s)
{
	for (int i = 0; i < PTT_MAX_METRICS; i++) {
		struct PttCounter *c = &s->c[i];
		c->page = zero_area;
		c->data = zero_area + 4096;
		c->mask = 4095;
	}
	s->lock = &zero_lock;
	s->read1 = read_unset;
	s->readn = readn_unset;
}

/* A kmod read saw a bad sequence (cold): 1 if the area is dead, the state
 * then stopped (status != 0); 0 to retry. Only the owning thread reads its
 * area, so it may unmap it here. */
static __attribute__((noinline, cold)) int kmod_dead(struct PttThreadState *s)
{
	if (!KAREA(s)->dead)
		return 0;
	pthread_mutex_lock(&mu);
	/* PttTerminate stops the states (status) before anything else; if it
	 * did not, the file was terminated or closed under the library. */
	if (s->status == ST_OK) {
		s->status = ST_DEAD;
		munmap((void *)s->c[0].page, s->c[0].size);
		park_state(s);
	}
	pthread_mutex_unlock(&mu);
	return 1;
}

/* Link a new, complete state as the calling thread's (mu held). */
static int publish_locked(struct PttThreadState *s)
{
	s->status = ST_OK;
	/* A state left by an earlier PttInit (terminated) is this thread's
	 * alone: free it. */
	if (PttSelf != &unset_state && PttSelf->status != ST_OK)
		forget_locked(PttSelf);
	s->next = all_threads;
	all_threads = s;
	PttSelf = s;
	pthread_once(&key_once, make_key);
	pthread_setspecific(exit_key, s);
	return PTT_OK;
}

static struct PttThreadState *new_state(void)
{
	struct PttThreadState *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->n = nmetrics;
	s->gen = generation;
	s->tid = (int)syscall(SYS_gettid);
	for (int i = 0; i < PTT_MAX_METRICS; i++)
		s->c[i].fd = -1;
	return s;
}

/* kmod: map the calling thread's work area. */
static int setup_thread_kmod_locked(void)
{
	struct PttThreadState *s = new_state();
	if (!s)
		return fail(PTT_ESYS, "out of memory");
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, kfd, (off_t)PITRACE_PTT_MMAP_OFFSET);
	if (p == MAP_FAILED) {
		int err = errno;
		free(s);
		if (err == EBUSY)
			return fail(PTT_EBUSY, "map the PTT work area of thread %d: the thread already has one on this /dev/pitrace file",
				    (int)syscall(SYS_gettid));
		return fail(PTT_ESYS, "map the PTT work area (/dev/pitrace): %s", strerror(err));
	}
	karea *a = p;
	if (a->nmetrics != (uint32_t)nmetrics || a->dead) {
		int rc = fail(PTT_ESYS, "the PTT work area from /dev/pitrace has %u metrics (want %d), dead %u", a->nmetrics, nmetrics, a->dead);
		munmap(p, 4096);
		free(s);
		return rc;
	}
	struct PttCounter *c = &s->c[0];
	c->page = p;
	c->size = 4096;
	c->kind = K_KMOD;
	s->lock = &a->seq;
	s->read1 = kmod_read1;
	s->readn = nmetrics == 1 ? readn_one : nmetrics == 2 ? kmod_read2 : kmod_readn;
	return publish_locked(s);
}

static int setup_thread_locked(void)
{
	if (backend == B_KMOD)
		return setup_thread_kmod_locked();
	long ps = sysconf(_SC_PAGESIZE);
	struct PttThreadState *s = new_state();
	if (!s)
		return fail(PTT_ESYS, "out of memory");
	for (int i = 0; i < nmetrics; i++) {
		struct PttCounter *c = &s->c[i];
		int err;
		c->kind = kinds[i];
		c->fd = perf_open(chosen[i], c->kind == K_SWITCH_TIME, exclude_kernel, &err);
		if (c->fd < 0) {
			int rc = open_error(chosen[i], err);
			release_counters(s, i);
			free(s);
			return rc;
		}
		c->size = (uint64_t)ps * (c->kind == K_SWITCH_TIME ? 2 : 1);
		void *p = mmap(NULL, c->size, PROT_READ, MAP_SHARED, c->fd, 0);
		if (p == MAP_FAILED) {
			int rc = fail(PTT_ESYS, "mmap the perf page of %s: %s", chosen[i]->name, strerror(errno));
			release_counters(s, i + 1);
			free(s);
			return rc;
		}
		c->page = p;
		if (c->kind == K_SWITCH_TIME) {
			const struct perf_event_mmap_page *pg = p;
			c->data = (const volatile char *)p + pg->data_offset;
			c->mask = pg->data_size - 1;
		}
	}
	s->lock = (const volatile uint32_t *)((const volatile char *)s->c[0].page + 8);
	switch (kinds[0]) {
	case K_SWITCH_TIME: s->read1 = read1_switch; break;
	case K_TSC_TIME: s->read1 = read1_tsc; break;
	case K_PMC: s->read1 = read1_pmc; break;
	case K_DISPATCH: s->read1 = read1_dispatch; break;
	default: s->read1 = read1_syscall; break;
	}
	s->readn = nmetrics == 1 ? readn_one : read_all;
	/* A time counter needs one switch-in record: let the thread be
	 * dispatched once. */
	for (int i = 0; i < nmetrics; i++) {
		if (s->c[i].kind != K_SWITCH_TIME)
			continue;
		const volatile uint64_t *head = (const volatile uint64_t *)((const volatile char *)s->c[i].page + PG_DATA_HEAD);
		for (int t = 0; *head == 0; t++) {
			if (t == 1000) {
				release_counters(s, nmetrics);
				free(s);
				return fail(PTT_ESYS, "no context-switch record arrived for the new counter");
			}
			struct timespec ts = {0, 1000};
			nanosleep(&ts, NULL);
		}
	}
	return publish_locked(s);
}

/* Make sure the calling thread has live counters. */
static int ensure_thread(void)
{
	struct PttThreadState *s = PttSelf;
	if (s->status == ST_OK)
		return PTT_OK;
	if (s == &exited_state)
		return fail(PTT_ETERMINATED, "this thread is exiting: its counters are released");
	pthread_mutex_lock(&mu);
	int rc;
	/* Not initialized: never (ENOTINIT), or terminated since: then every
	 * thread's read says so, one that never read before included. */
	if (!initialized)
		rc = s == &unset_state && generation == 0 ? fail(PTT_ENOTINIT, "ptt is not initialized: call PttInit first")
							  : fail(PTT_ETERMINATED, "ptt was terminated: this thread's work area is gone");
	else if (s->status == ST_OK && s->gen == generation)
		rc = PTT_OK;
	else
		rc = setup_thread_locked();
	pthread_mutex_unlock(&mu);
	return rc;
}

int PttThreadInit(void)
{
	return ensure_thread();
}

int PttReadMetric0Slow(uint64_t *value)
{
	int rc = ensure_thread();
	if (rc)
		return rc;
	struct PttThreadState *s = PttSelf;
	uint64_t v = s->read1(s);
	if (s->status != ST_OK)
		return fail(PTT_ETERMINATED, "ptt was terminated: this thread's work area is gone");
	*value = v;
	return PTT_OK;
}

static void readn_one(struct PttThreadState *s, uint64_t *values)
{
	values[0] = s->read1(s);
}

int PttRead(uint64_t *values)
{
	struct PttThreadState *s = PttSelf;
	s->readn(s, values); /* the routine for 1 or N metrics, chosen at setup */
	if (__builtin_expect(s->status == ST_OK, 1))
		return PTT_OK;
	/* Not set up yet, or terminated: checked after the read. */
	int rc = ensure_thread();
	if (rc)
		return rc;
	s = PttSelf;
	s->readn(s, values);
	if (s->status != ST_OK)
		return fail(PTT_ETERMINATED, "ptt was terminated: this thread's work area is gone");
	return PTT_OK;
}

uint64_t PttRetries(void)
{
	return PttSelf->retries;
}

static const struct metric *lookup(const char *name)
{
	for (int i = 0; i < NTAB; i++)
		if (strcasecmp(metrics_tab[i].name, name) == 0)
			return &metrics_tab[i];
	return NULL;
}

/* PttInit returns this when the module has no PTT (auto: daemon backend). */
#define KMOD_NO_PTT 1

static int is_task_clock(const struct metric *m)
{
	return m->type == PERF_TYPE_SOFTWARE && m->config == PERF_COUNT_SW_TASK_CLOCK && !m->tsc;
}

/* PttInitFlags' flags for the call under way (mu held). */
static unsigned init_flags;

static int kmod_ptt_init(int fd, const struct metric **ms, int n)
{
	struct pitrace_ptt_init in;
	memset(&in, 0, sizeof in);
	in.nmetrics = (uint32_t)n;
	if (init_flags & PTT_SYSCALL_TIMES)
		in.flags = PITRACE_PTT_INIT_SYSCALLS;
	for (int i = 0; i < n; i++) {
		in.m[i].kind = ms[i]->tsc ? PITRACE_PTT_TSC : PITRACE_PTT_PERF;
		in.m[i].type = ms[i]->tsc ? 0 : ms[i]->type;
		in.m[i].config = ms[i]->tsc ? 0 : ms[i]->config;
	}
	return ioctl(fd, PITRACE_IOC_PTT_INIT, &in) == 0 ? 0 : errno;
}

/* PTT_INIT on the module (fd open, mu held): the kmod backend, or an error
 * (fd closed), or KMOD_NO_PTT (fd closed) when the module has no PTT and the
 * backend is not forced. */
static int init_kmod_locked(int fd, const struct metric **ms, int n, int forced)
{
	/* the module's ABI must be the one this library was built with */
	struct pitrace_sysinfo si;
	memset(&si, 0, sizeof si);
	if (ioctl(fd, PITRACE_IOC_SYSINFO, &si) == 0 && si.abi != PITRACE_ABI_VERSION) {
		close(fd);
		return fail(PTT_ENOBACKEND, "the loaded pitrace module speaks ABI %u, this library ABI %d: load the module built "
			    "from the same source tree (or PERFINSP_BACKEND=daemon)", si.abi, PITRACE_ABI_VERSION);
	}
	for (int i = 0; i < n; i++)
		if (is_task_clock(ms[i])) {
			close(fd);
			return fail(PTT_EINVAL, "task-clock is a per-task counter; on the pitrace module use tsc or cpu-clock "
				    "(or PERFINSP_BACKEND=daemon for task-clock)");
		}
	int err = kmod_ptt_init(fd, ms, n);
	if (err == EINVAL && (init_flags & PTT_SYSCALL_TIMES) && !(si.features & PITRACE_FEAT_PTT_SYSCALLS)) {
		close(fd);
		return fail(PTT_ENOBACKEND, "the loaded pitrace module does not measure system calls in PTT: load the module "
			    "built from the same source tree");
	}
	if (!err) {
		kfd = fd;
		for (int i = 0; i < n; i++) {
			chosen[i] = ms[i];
			kinds[i] = K_KMOD;
		}
		nmetrics = n;
		exclude_kernel = 0;
		backend = B_KMOD;
		generation++;
		initialized = 1;
		return PTT_OK;
	}
	int rc;
	if (err == ENOTTY) {
		close(fd);
		if (!forced)
			return KMOD_NO_PTT;
		return fail(PTT_ENOBACKEND, "ptt backend kmod is not available: the loaded pitrace module has no PTT support (PTT_INIT: %s)",
			    strerror(err));
	}
	if (err == EBUSY) {
		close(fd);
		return fail(PTT_EBUSY, "the pitrace module is busy: its PTT keeps at most %d distinct perf counters for all processes "
			    "(PTT_INIT: %s)", PITRACE_PTT_MAX_SLOTS, strerror(err));
	}
	/* Which metric: each alone (the file is closed after the failure). */
	const struct metric *bad = NULL;
	for (int i = 0; i < n && !bad && n > 1; i++) {
		int e = kmod_ptt_init(fd, &ms[i], 1);
		if (e && e != EBUSY) {
			bad = ms[i];
			err = e;
		}
	}
	if (!bad && n == 1)
		bad = ms[0];
	close(fd);
	const char *name = bad ? bad->name : "(all)";
	if (bad && bad->hw && (err == ENOENT || err == EOPNOTSUPP || err == ENODEV)) {
		if (!has_pmu())
			return fail(PTT_ENOPMU, "no hardware PMU on this machine: %s needs a hardware counter", bad->name);
		return fail(PTT_ENOPMU, "metric %s: the hardware PMU does not provide this event: %s", bad->name, strerror(err));
	}
	if (err == EPERM || err == EACCES)
		rc = fail(PTT_EPERM, "metric %s: the pitrace module refused it: %s", name, strerror(err));
	else if (err == EOPNOTSUPP && bad && !bad->tsc)
		rc = fail(PTT_ENOBACKEND, "metric %s: the loaded pitrace module does not keep perf counters in PTT (PTT_INIT: %s)",
			  name, strerror(err));
	else
		rc = fail(PTT_ESYS, "metric %s: the pitrace module's PTT_INIT failed: %s (see dmesg)", name, strerror(err));
	return rc;
}

/* fork: the child has no work areas (the module's mappings are not copied)
 * and shares the parent's file: it starts uninitialized, its states dead. */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_prepare(void)
{
	pthread_mutex_lock(&mu);
}
static void atfork_parent(void)
{
	pthread_mutex_unlock(&mu);
}
static void atfork_child(void)
{
	if (initialized && backend == B_KMOD) {
		for (struct PttThreadState *s = all_threads; s; s = s->next)
			if (s->status == ST_OK) {
				s->status = ST_DEAD;
				park_state(s);
			}
		close(kfd);
		kfd = -1;
		initialized = 0;
	} else if (initialized) {
		/* perf's pages are not copied into the child (VM_DONTCOPY) and
		 * the fds count the parent's threads: every state reads zeros
		 * from here on, and the child's thread sets up counters of its
		 * own at its next PttThreadInit or read. */
		for (struct PttThreadState *s = all_threads; s; s = s->next)
			if (s->status == ST_OK) {
				s->status = ST_DEAD;
				for (int i = 0; i < s->n; i++)
					if (s->c[i].fd >= 0) {
						close(s->c[i].fd);
						s->c[i].fd = -1;
					}
				park_state(s);
			}
	}
	pthread_mutex_unlock(&mu);
}
static void register_atfork(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

int PttInit(const char **names, int n)
{
	return PttInitFlags(names, n, 0);
}

int PttInitFlags(const char **names, int n, unsigned flags)
{
	if (flags & ~(unsigned)PTT_SYSCALL_TIMES)
		return fail(PTT_EINVAL, "PttInitFlags: unknown flags %#x", flags & ~(unsigned)PTT_SYSCALL_TIMES);
	if (!names || n < 1)
		return fail(PTT_EINVAL, "PttInit: need 1 to %d metric names", PTT_MAX_METRICS);
	if (n > PTT_MAX_METRICS)
		return fail(PTT_ETOOMANY, "%d metrics requested: PTT supports at most %d at once", n, PTT_MAX_METRICS);
	const struct metric *ms[PTT_MAX_METRICS];
	for (int i = 0; i < n; i++) {
		ms[i] = names[i] ? lookup(names[i]) : NULL;
		if (!ms[i]) {
			char list[400] = "";
			for (int j = 0; j < NTAB; j++) {
				strcat(list, metrics_tab[j].name);
				if (j + 1 < NTAB)
					strcat(list, ", ");
			}
			return fail(PTT_EUNKNOWN, "unknown metric \"%s\": valid metrics are %s", names[i] ? names[i] : "(null)", list);
		}
		for (int j = 0; j < i; j++)
			if (ms[j] == ms[i])
				return fail(PTT_EINVAL, "metric %s given twice", ms[i]->name);
	}
	char berr[160];
	enum pu_backend be = pu_backend_choice(berr, sizeof(berr));
	if (be == PU_BACKEND_UNKNOWN)
		return fail(PTT_ENOBACKEND, "%s", berr);
	int force_kmod = be == PU_BACKEND_KMOD, force_daemon = be == PU_BACKEND_DAEMON;

	pthread_mutex_lock(&mu);
	if (initialized) {
		pthread_mutex_unlock(&mu);
		return fail(PTT_EBUSY, "ptt is already initialized: call PttTerminate first");
	}
	while (graves) {
		struct grave *g = graves;
		graves = g->next;
		munmap(g->p, g->len);
		free(g);
	}
	pthread_once(&atfork_once, register_atfork);
	/* The module when it is there (or forced), else the daemon backend. */
	char why[160] = "PERFINSP_BACKEND=daemon";
	if (!force_daemon) {
		int fd = open(PITRACE_DEVICE, O_RDWR | O_CLOEXEC);
		int err = errno;
		if (fd >= 0) {
			init_flags = flags;
			int rc = init_kmod_locked(fd, ms, n, force_kmod || (flags & PTT_SYSCALL_TIMES));
			init_flags = 0;
			if (rc != KMOD_NO_PTT) {
				pthread_mutex_unlock(&mu);
				return rc;
			}
			snprintf(why, sizeof why, "the loaded pitrace module has no PTT");
		} else if (force_kmod) {
			pthread_mutex_unlock(&mu);
			return fail(PTT_ENOBACKEND, "ptt backend kmod is not available: %s: %s", PITRACE_DEVICE,
				    err == ENOENT ? "module not loaded" : strerror(err));
		} else {
			snprintf(why, sizeof why, "%s: %s", PITRACE_DEVICE, err == ENOENT ? "module not loaded" : strerror(err));
		}
	}
	if (flags & PTT_SYSCALL_TIMES) {
		pthread_mutex_unlock(&mu);
		return fail(PTT_ENOBACKEND, "system-call times need the pitrace module (%s)", why);
	}
	for (int i = 0; i < n; i++)
		if (ms[i]->tsc) {
			pthread_mutex_unlock(&mu);
			return fail(PTT_ENOBACKEND, "metric tsc needs the pitrace module (%s); without it use task-clock or cpu-clock", why);
		}
	/* Check each metric on the calling thread; learn the capabilities. */
	int excl = 0, cap_time = 0, cap_rdpmc = 0;
	long ps = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < n; i++) {
		int err;
		int fd = perf_open(ms[i], 0, excl, &err);
		if (fd < 0 && !excl && (err == EACCES || err == EPERM)) {
			fd = perf_open(ms[i], 0, 1, &err);
			if (fd >= 0)
				excl = 1;
		}
		if (fd < 0) {
			int rc = open_error(ms[i], err);
			pthread_mutex_unlock(&mu);
			return rc;
		}
		struct perf_event_mmap_page *pg = mmap(NULL, (size_t)ps, PROT_READ, MAP_SHARED, fd, 0);
		if (pg != MAP_FAILED) {
			if (is_time(ms[i]))
				cap_time = pg->cap_user_time;
			if (ms[i]->hw)
				cap_rdpmc = pg->cap_user_rdpmc;
			munmap(pg, (size_t)ps);
		}
		close(fd);
	}
	for (int i = 0; i < n && excl; i++)
		if (ms[i]->type == PERF_TYPE_SOFTWARE && ms[i]->config == PERF_COUNT_SW_CONTEXT_SWITCHES) {
			pthread_mutex_unlock(&mu);
			return fail(PTT_EPERM, "metric %s counts in kernel mode, which perf_event_paranoid forbids for a non-root user", ms[i]->name);
		}
	for (int i = 0; i < n; i++) {
		int x86 = 0;
#if defined(__x86_64__) || defined(__i386__)
		x86 = 1;
#endif
		chosen[i] = ms[i];
		if (is_time(ms[i]))
			kinds[i] = cap_time && x86 ? K_TSC_TIME : K_SWITCH_TIME;
		else if (ms[i]->hw && cap_rdpmc && x86)
			kinds[i] = K_PMC;
		else if (is_dispatch(ms[i]))
			kinds[i] = K_DISPATCH;
		else
			kinds[i] = K_SYSCALL;
	}
	nmetrics = n;
	exclude_kernel = excl;
	backend = B_DAEMON;
	generation++;
	initialized = 1;
	pthread_mutex_unlock(&mu);
	return PTT_OK;
}

int PttTerminate(void)
{
	pthread_mutex_lock(&mu);
	if (!initialized) {
		pthread_mutex_unlock(&mu);
		return fail(PTT_ENOTINIT, "ptt is not initialized: call PttInit first");
	}
	/* Stop the states first: a reader that sees an area die (PTT_TERM
	 * below) or turn to zeros then fails its status check. */
	for (struct PttThreadState *s = all_threads; s; s = s->next)
		if (s->status == ST_OK)
			s->status = ST_STOPPING;
	if (backend == B_KMOD)
		ioctl(kfd, PITRACE_IOC_PTT_TERM); /* every area: dead = 1 */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (struct PttThreadState *s = all_threads; s; s = s->next) {
		if (s->status != ST_STOPPING)
			continue;
		s->status = ST_DEAD;
		/* Readers on other threads may be inside a read: keep the
		 * addresses mapped (zero pages) and the descriptors valid. */
		int nmap = s->c[0].kind == K_KMOD ? 1 : s->n; /* kmod: one area */
		for (int i = 0; i < nmap; i++) {
			struct PttCounter *c = &s->c[i];
			void *p = mmap((void *)c->page, c->size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			if (p != MAP_FAILED) {
				struct grave *g = malloc(sizeof *g);
				if (g) {
					g->p = p;
					g->len = c->size;
					g->next = graves;
					graves = g;
				}
			}
			if (c->kind == K_SYSCALL && null >= 0)
				dup3(null, c->fd, O_CLOEXEC); /* left open on purpose */
			else if (c->fd >= 0)
				close(c->fd);
		}
		/* Later reads of this state (the thread may read again after
		 * the next PttInit frees the zero pages) see static zeros. */
		park_state(s);
	}
	if (null >= 0)
		close(null);
	if (backend == B_KMOD) {
		close(kfd);
		kfd = -1;
	}
	/* Thread states stay allocated: threads still point at them. */
	initialized = 0;
	pthread_mutex_unlock(&mu);
	return PTT_OK;
}

int PttNumMetrics(void)
{
	return initialized ? nmetrics : PTT_ENOTINIT;
}

const char *PttMetricName(int i)
{
	return initialized && i >= 0 && i < nmetrics ? chosen[i]->name : NULL;
}

const char *PttBackend(void)
{
	if (!initialized)
		return NULL;
	return backend == B_KMOD ? "kmod" : "daemon";
}

int PttInterruptsFactoredOut(void)
{
	return initialized ? backend == B_KMOD : PTT_ENOTINIT;
}

int PttNoSyscallRead(void)
{
	if (!initialized)
		return PTT_ENOTINIT;
	for (int i = 0; i < nmetrics; i++)
		if (kinds[i] == K_SYSCALL)
			return 0;
	return 1;
}
