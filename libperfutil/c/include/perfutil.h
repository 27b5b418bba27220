/*
 * perfutil.h - the C API of libperfutil (perfinsp) for in-process agents.
 *
 * PTT: per-thread metrics read by the calling thread without a system call.
 *
 *   const char *m[] = { "task-clock", "context-switches" };
 *   int rc = PttInit(m, 2);                 // process-wide, up to 8 metrics
 *   if (rc) fprintf(stderr, "%s\n", PttStrerror(rc));
 *   uint64_t v[2];
 *   rc = PttRead(v);                        // calling thread's metrics
 *   uint64_t t;
 *   rc = PttReadMetric0(&t);                // fastest: the first metric only
 *   PttTerminate();
 *
 * Backends ($PERFINSP_BACKEND=kmod|daemon forces one; auto or unset: kmod
 * when /dev/pitrace can be opened, else daemon):
 *   kmod    the pitrace module keeps a work area per thread, current at every
 *           dispatch and around every interrupt (interrupts factored out);
 *           a read is accum + ((rdtsc - last) & live) inside a sequence
 *           check, the same code for every metric. tsc is current to the
 *           read; perf metrics to the thread's last dispatch or interrupt.
 *   daemon  no module: one perf_event counter per metric and thread, read
 *           through its mmap page (or read() for some software counters).
 *
 * Each thread's counters (daemon) or work area (kmod) are opened on its
 * first read (or PttThreadInit), and released when the thread exits. Reads
 * after PttTerminate return PTT_ETERMINATED; they never fault.
 *
 * Link: -lperfutil (bin/libperfutil.a or bin/libperfutil.so) -pthread.
 */
#ifndef PERFUTIL_H
#define PERFUTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PTT_MAX_METRICS 8

/* Return codes (0 is success). */
enum {
	PTT_OK = 0,
	PTT_EINVAL = -1,      /* bad argument (NULL, n < 1, task-clock on kmod) */
	PTT_ETOOMANY = -2,    /* more than PTT_MAX_METRICS metrics */
	PTT_EUNKNOWN = -3,    /* unknown metric name */
	PTT_ENOPMU = -4,      /* hardware metric, no hardware PMU here */
	PTT_EPERM = -5,       /* perf_event permission denied */
	PTT_ENOTINIT = -6,    /* PttInit was not called */
	PTT_ETERMINATED = -7, /* PttTerminate was called */
	PTT_ESYS = -8,        /* a system call failed (see PttStrerror) */
	PTT_EBUSY = -9,       /* PttInit called twice; module out of counters */
	PTT_ENOBACKEND = -10, /* the requested backend is not available (or
	                       * tsc without the pitrace module) */
};

/* Per-thread state. Internal, but visible so that the fast reads can be
 * inline; do not touch the fields. */
struct PttCounter {
	const volatile void *page; /* perf_event_mmap_page; kmod: c[0] the work area */
	const volatile char *data; /* ring buffer of switch records */
	uint64_t mask;
	uint64_t size;
	int kind;
	int fd;
};

struct PttThreadState;
typedef uint64_t (*PttRead1Fn)(struct PttThreadState *s);

struct PttThreadState {
	const volatile uint32_t *lock; /* first counter's page lock (kmod: area seq) */
	PttRead1Fn read1;              /* metric 0, with the retry loop */
	void (*readn)(struct PttThreadState *s, uint64_t *values); /* all metrics (1, 2 or N) */
	volatile int status;           /* 0, or why the fast path cannot be used */
	int n;
	uint64_t retries;
	int tid;
	unsigned gen;
	struct PttCounter c[PTT_MAX_METRICS];
	struct PttThreadState *next;
};

extern __thread struct PttThreadState *PttSelf;

/* Initialize PTT for the process with n metrics (names as for `ptt on -m`:
 * tsc, task-clock, cpu-clock, context-switches, cpu-migrations, page-faults,
 * minor-faults, major-faults, cycles, instructions, branches, branch-misses,
 * cache-references, cache-misses, ref-cycles). tsc (time stamp counter
 * cycles of the thread) needs the pitrace module; task-clock is per-task
 * and the daemon backend's only (on kmod use tsc or cpu-clock). Hardware
 * metrics need a hardware PMU (PTT_ENOPMU). $PERFINSP_BACKEND=kmod|daemon
 * forces a backend, auto (or unset) takes kmod when /dev/pitrace opens. */
int PttInit(const char **metrics, int n);
/* PttInit with flags: PTT_SYSCALL_TIMES (the pitrace module only, else
 * PTT_ENOBACKEND) also has the module measure each thread's system calls
 * (struct pitrace_ptt_sys in the thread's work area, kmod/uapi/pitrace.h:
 * the part of each metric spent between sys_enter and sys_exit, and the
 * number of calls). */
#define PTT_SYSCALL_TIMES 1u
int PttInitFlags(const char **metrics, int n, unsigned flags);
/* Release every thread's counters. */
int PttTerminate(void);
/* Open the calling thread's counters now (otherwise done by its first read). */
int PttThreadInit(void);
/* Read all metrics of the calling thread into values[0..n-1]. */
int PttRead(uint64_t *values);
/* Slow path of PttReadMetric0 (thread setup, errors). */
int PttReadMetric0Slow(uint64_t *value);
/* Number of metrics, and the name of metric i. */
int PttNumMetrics(void);
const char *PttMetricName(int i);
/* Reads of the calling thread repeated because it was dispatched mid-read. */
uint64_t PttRetries(void);
/* Message for a return code; for the calling thread's last error, the
 * detailed message (e.g. which metric needs a hardware counter). */
const char *PttStrerror(int err);
/* Name of the active backend ("daemon" or "kmod"), or NULL. */
const char *PttBackend(void);
/* 1 if the backend factors asynchronous interrupts out of thread metrics
 * (only the pitrace module does), 0 if not, PTT_ENOTINIT. */
int PttInterruptsFactoredOut(void);
/* 1 if every chosen metric is read without a system call. */
int PttNoSyscallRead(void);

/* The fastest read: the calling thread's first metric. The only branch
 * before the counter read is the retry check inside read1. */
static inline int PttReadMetric0(uint64_t *value)
{
	struct PttThreadState *s = PttSelf;
	uint64_t v = s->read1(s);
	if (__builtin_expect(s->status != 0, 0))
		return PttReadMetric0Slow(value);
	*value = v;
	return PTT_OK;
}

/* ITrace (docs/itrace.md): trace every instruction the calling thread runs
 * between ITraceOn and ITraceOff into the trace facility (swtrace on first).
 * pitraced single-steps the thread; 0 on success, -1 with the reason in
 * ITraceStrerror(). */
int ITraceOn(void);
int ITraceOff(void);
/* Writes a user record (major >= 0x100) with up to 64 u32 words into the
 * trace, as `swtrace hook` does; 0 on success, -1 (see ITraceStrerror()). */
int TraceHook(uint16_t major, uint32_t minor, const uint32_t *words, int nwords);
/* The calling thread's last ITraceOn / ITraceOff / TraceHook error. */
const char *ITraceStrerror(void);

#ifdef __cplusplus
}
#endif
#endif
