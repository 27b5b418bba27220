// SPDX-License-Identifier: GPL-2.0
/*
 * hookit.c - the entry/exit runtime of perfinsp call flows (libhookit.so).
 *
 * A program built with -finstrument-functions calls __cyg_profile_func_enter
 * and __cyg_profile_func_exit around every function. Preloaded (or linked),
 * this library records each of those events of every thread, with a PTT
 * metric read at the start of the hook (early read) and at its end (late
 * read): the hook's own work between the two reads is never counted. Nothing
 * before the early read or after the late read branches: the read is one
 * indirect call chosen at start-up (libperfutil's no-syscall PTT read of
 * metric 0, or the raw TSC), and the late value is stored through a pointer
 * that the hook's work chose.
 *
 * Each thread writes into its own file DIR/hookit-PID-TID.bin through a
 * shared mapping, so a process killed with SIGKILL leaves every event it
 * recorded (the file ends at the first all-zero record). See
 * docs/callflow.md for the file format and the environment.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>
#include <linux/perf_event.h>

#include "perfutil.h"
#include "../../../kmod/uapi/pitrace.h"
#include "hookit.h"
#include "hookit_api.h"

#define HK_VIS __attribute__((visibility("default")))
#define HK_NOINSTR __attribute__((no_instrument_function))
#define hk_barrier() __asm__ volatile("" ::: "memory")

/* A stack pointer's entry in hk_thread.frames (t): frames 16 bytes apart
 * or more, 4 KB of stack before two share one. The entry's address is
 * 2 KB from the stack pointer modulo 4 KB, whatever the stack pointer:
 * never 4K-aliased with the hook's own stack accesses, so that the store
 * costs the same at every depth (and in the start-up calibration). */
#define HK_FRAMES 256u
#define HK_FRAME(t, sp) \
	(&(t)->frames[(unsigned)(((sp) - (uint64_t)(uintptr_t)(t)->frames + 2048) >> 4) & (HK_FRAMES - 1)])
/* An entry's key: its stack pointer and call site. */
#define HK_FRAME_KEY(sp, site) ((site) ^ ((sp) << 32 | (sp) >> 32))

struct hk_thread {
	/* The hot fields first (one cache line). */
	uint64_t *win;        /* the buffer: the tail file's words (its header: words 0, 1) */
	uint32_t pos, cap;    /* words used / in the buffer */
	uint64_t last_late;   /* the previous event's late read (the hooks store it here) */
	uint64_t last_early;  /* its early read */
	uint64_t last_sp;     /* the last stack pointer recorded */
	uint8_t need_sync;    /* the next event starts with a sync */
	uint8_t need_wall;    /* the next event gets a wall-clock anchor */
	uint8_t in_inl;       /* the last hook entry was marked inlined */
	int busy;             /* 1: inside the hook; 2: finished (shutdown, exit) */
	int closing;          /* a shutdown is finishing the file: record nothing */
	unsigned gen;         /* reset generation last marked */
	uint64_t sched;       /* hk_sched_mark() at the last anchor */
	/* (the first cache line ends here) */
	/* The last hook entry's stack pointer, call site and the address its
	 * hook was called from (entries only). */
	uint64_t in_sp, in_site, in_from;
	uint32_t ds, in;      /* dispatches, interrupts at the last event (kmod) */
	uint32_t nsys;        /* system calls at the end of the last event (hk_sys) */
	uint64_t sys_time;    /* the metric in system calls then */
	uint32_t nflt;        /* user page faults then (hk_faults) */
	uint64_t flt_time;    /* the metric in them */
	uint32_t nres;        /* rseq updates on the way to user mode then (hk_resumes) */
	uint64_t res_time;    /* the metric in them */
	int fd;               /* the thread file */
	int tail_fd;          /* the tail file (mapped: the buffer) */
	pid_t tid;
	unsigned life;        /* 1, or the OS thread's Nth attach (hookit_thread_end) */
	uint64_t bin_off;     /* bytes of the thread file written */
	uint64_t alloc_end;   /* its blocks are allocated up to here (hk_prealloc) */
	struct hk_thread *next;
	/* The function in each slot (HK_SLOT) of the thread's last event
	 * record for it: a short record names the function by its slot. */
	uint64_t fns[HK_SLOTS];
	/* The last unmarked hook entry at each stack pointer (HK_FRAME): the
	 * entry that opened the frame there, its key (HK_FRAME_KEY) and the
	 * address its hook was called from. */
	struct hk_frame {
		uint64_t key, from;
	} frames[HK_FRAMES];
};


static uint64_t read_zero(void);
typedef uint64_t (*hk_read_fn)(void);
/* The metric read: read_zero until start-up is done. */
static hk_read_fn hk_read = read_zero;
/* How the hooks read it: 0 through hk_read, 1 the TSC, 2 the fast
 * task-clock (both inline: no indirect call). Set with hk_read. */
static int hk_read_kind;
static volatile int hk_ready;
/* The PTT backend is the module: dispatches and interrupts are in the
 * thread's work area. */
static int hk_dsin;
/* The module measures the thread's system calls (struct pitrace_ptt_sys in
 * its work area): metric tsc-user, and tsc where the module can. */
static int hk_sys;
/* The kernel's work per system call outside the module's sys_enter ..
 * sys_exit window (its entry and exit code), measured at start-up
 * (calibrate_sys), in metric units. */
static uint64_t hk_sys_glue;
/* The same for a user page fault outside the module's page_fault_user ..
 * handle_mm_fault return window (calibrate_fault), where the module
 * measures faults (faults_on); 0 otherwise. */
static uint64_t hk_fault_glue;
static int hk_faults; /* the module measures faults (faults_on) */
/* The kernel's work per rseq update on the way back to user mode after a
 * switch (the module's resume windows: resumes_on) outside those windows:
 * the exit-to-user loop around it and the probes' own way in and out
 * (calibrate_resume); 0 where the module does not measure them. A
 * resume is counted with the system calls (SYS): after a blocking system
 * call it is the rest of the call's way out. */
static uint64_t hk_resume_glue;
static int hk_resumes; /* the module measures resumes (resumes_on) */
/* The metric is tsc-user: the TSC less the thread's system calls. */
static int hk_user;
static volatile int hk_on = 1;
static char hk_dir[4096] = ".";
/* hk_dir, opened once and checked (hk_open_dir): every file goes in it by
 * name, never through a path that could be redirected afterwards. */
static int hk_dirfd = -1;
static char hk_metric[64] = "task-clock";
static pid_t hk_pid;
static pthread_mutex_t hk_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hk_thread *hk_threads;
static uint64_t hk_dropped;
static volatile unsigned hk_gen; /* bumped by every start, end, reset */
static volatile uint64_t hk_resets;
static int hk_exited;

static __thread struct hk_thread *hk_self __attribute__((tls_model("initial-exec")));
/* This thread records nothing (its file failed, or it ended). */
static __thread int hk_noopen __attribute__((tls_model("initial-exec")));
/* This thread is opening its files (its first event): the events of a
 * signal handler that interrupts it are dropped, not a second opening
 * (which would wait for ever on a lock the first one holds). */
static __thread int hk_opening __attribute__((tls_model("initial-exec")));
/* Thread ends this OS thread has had (hookit_thread_end): a thread
 * attached to it again after one (hookit_thread_start: a JVM's
 * DestroyJavaVM after main, a JNI detach and attach) records into a file
 * of its own. */
static __thread unsigned hk_ended __attribute__((tls_model("initial-exec")));

HK_NOINSTR static uint64_t read_zero(void)
{
	return 0;
}

/*
 * Memory: every allocation of the runtime (its thread states, and
 * libperfutil's PTT states: ptt.o is built for this library with malloc,
 * calloc and free renamed to these, see mk/callflow.mk) is a mapping of
 * its own, never the program's allocator, so that the program's heap is
 * the same with and without the runtime. A few per thread: a page each.
 */
#define HK_ALLOC_HEAD 16
HK_NOINSTR __attribute__((visibility("hidden"))) void *hk_calloc(size_t n, size_t size)
{
	size_t len;
	char *p;

	if (size && n > (SIZE_MAX - HK_ALLOC_HEAD) / size)
		return NULL;
	len = n * size + HK_ALLOC_HEAD;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*(size_t *)p = len;
	return p + HK_ALLOC_HEAD;
}

HK_NOINSTR __attribute__((visibility("hidden"))) void *hk_malloc(size_t size)
{
	return hk_calloc(1, size);
}

HK_NOINSTR __attribute__((visibility("hidden"))) void hk_free(void *q)
{
	char *p = q;

	if (p)
		munmap(p - HK_ALLOC_HEAD, *(size_t *)(p - HK_ALLOC_HEAD));
}

HK_NOINSTR static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The fast task-clock read (daemon backend, switch records): libperfutil's
 * read is time_running plus the CLOCK_MONOTONIC time since the thread's
 * last switch-in (the newest record of its perf ring), and the vDSO clock
 * read is most of a hook's cost. Where the kernel's clock source is the TSC
 * the runtime reads the TSC and scales it itself (rate measured against
 * CLOCK_MONOTONIC at start-up), its zero set HK_FAST_MARGIN ahead: the
 * value is the thread's CPU time plus that constant (less the rate's error
 * times the time since start-up, microseconds after minutes), which
 * intervals cancel. Checked against libperfutil's read at start-up.
 */
#define HK_FAST_MARGIN 1000000000ull
static uint64_t hk_tsc0, hk_mono0, hk_mult32; /* ns per TSC cycle << 32 */
/* The switch ring's head the fast read saw last (hk_sched_mark). */
static __thread uint64_t hk_head __attribute__((tls_model("initial-exec")));

/* The TSC of the calling thread's last fast task-clock read
 * (hookit_last_tsc). Metric rdtsc keeps none: a store beside its bare TSC
 * read moved the start-up calibration's minimum (t_I) below the typical
 * interval it stands for, by 1 to 4 cycles of 26 on this VM. */
static __thread uint64_t hk_last_tsc __attribute__((tls_model("initial-exec")));

HK_NOINSTR static inline uint64_t tsc_mono_at(uint64_t tsc)
{
	return hk_mono0 + (uint64_t)(((unsigned __int128)(tsc - hk_tsc0) * hk_mult32) >> 32);
}

/* What the fast read took from the thread's perf page at its last full
 * read: the switch ring's head, the task's time_running and the time of
 * its last switch-in. While the head stays, the thread was not scheduled
 * out and in, and the read is the TSC's alone. */
static __thread uint64_t hk_run __attribute__((tls_model("initial-exec")));
static __thread uint64_t hk_at __attribute__((tls_model("initial-exec")));
static __thread const struct PttThreadState *hk_cs __attribute__((tls_model("initial-exec")));

HK_NOINSTR static uint64_t read_ptt_full(struct PttThreadState *s, uint64_t *tscp)
{
	const struct PttCounter *c = &s->c[0];

	for (;;) {
		uint32_t seq = *s->lock;

		hk_barrier();
		uint64_t head = *(const volatile uint64_t *)((const volatile char *)c->page + 1024);
		hk_barrier();
		uint64_t at = *(const volatile uint64_t *)(c->data + ((head - 8) & c->mask));
		uint64_t run = ((const volatile struct perf_event_mmap_page *)c->page)->time_running;
		uint64_t tsc = __rdtsc();
		uint64_t now = tsc_mono_at(tsc);
		uint64_t v = run + (now >= at ? now - at : 0);

		hk_barrier();
		if (__builtin_expect(*s->lock == seq, 1)) {
			hk_head = head;
			hk_run = run;
			hk_at = at;
			hk_cs = s;
			*tscp = tsc;
			return v;
		}
	}
}

HK_NOINSTR static inline __attribute__((always_inline)) uint64_t read_ptt_fast_inline(void)
{
	struct PttThreadState *s = PttSelf;
	const struct PttCounter *c = &s->c[0];
	uint64_t tsc, v;

	if (__builtin_expect(s->status != 0 || !c->data, 0)) {
		hk_last_tsc = 0;
		hk_cs = NULL; /* the read may set up new counters */
		return s->read1(s);
	}
	/* The TSC before the head: a switch after the TSC read moves the
	 * head, and the full read takes a TSC of its own. */
	tsc = __rdtsc();
	hk_barrier();
	if (__builtin_expect(s == hk_cs && *(const volatile uint64_t *)((const volatile char *)c->page + 1024) == hk_head,
			     1)) {
		uint64_t now = tsc_mono_at(tsc);
		v = hk_run + (now >= hk_at ? now - hk_at : 0);
	} else {
		v = read_ptt_full(s, &tsc);
	}
	hk_last_tsc = tsc;
	return v;
}

HK_NOINSTR static uint64_t read_ptt_fast(void)
{
	return read_ptt_fast_inline();
}

/* A value that changes when the thread was scheduled out and in again
 * since the last look (the next event gets a wall-clock anchor): the
 * head of its switch-record ring (daemon backend), its dispatch count
 * (module); 0 where there is neither (rdtsc: the TSC is a wall clock). */
static int hk_sched_kind; /* 0 none, 1 switch ring, 2 module area, 3 the fast read's */
HK_NOINSTR static inline uint64_t hk_sched_mark(void)
{
	const struct PttCounter *c;

	if (hk_sched_kind == 3)
		return hk_head;
	if (!hk_sched_kind)
		return 0;
	c = &PttSelf->c[0];
	if (!c->page)
		return 0;
	if (hk_sched_kind == 1)
		return c->data ? *(const volatile uint64_t *)((const volatile char *)c->page + 1024) : 0;
	return ((const volatile struct pitrace_ptt_area *)c->page)->dispatches;
}

HK_NOINSTR static uint64_t read_ptt(void)
{
	struct PttThreadState *s = PttSelf;

	return s->read1(s);
}

/* The calling thread's system-call figures in its work area, or NULL. */
HK_NOINSTR static inline const volatile struct pitrace_ptt_sys *hk_sys_area(void)
{
	const volatile char *page = PttSelf->c[0].page;

	return page ? (const volatile struct pitrace_ptt_sys *)(page + PITRACE_PTT_SYS_OFFSET) : NULL;
}

/* tsc-user: the thread's TSC less its system calls, user page faults and
 * rseq updates after a switch (the module's windows and the calibrated
 * kernel code around each). The figures change only inside the thread's
 * own kernel work: read in user mode, they are still. Without fault or
 * resume figures (faults_on, resumes_on 0) their fields are 0. */
HK_NOINSTR static uint64_t read_ptt_user(void)
{
	struct PttThreadState *s = PttSelf;
	uint64_t v = s->read1(s);
	const volatile struct pitrace_ptt_sys *sy = hk_sys_area();

	if (sy)
		v -= sy->sys_time[0] + hk_sys_glue * sy->syscalls + sy->fault_time[0] + hk_fault_glue * sy->faults +
		     sy->resume_time[0] + hk_resume_glue * sy->resumes;
	return v;
}

HK_NOINSTR static uint64_t read_tsc(void)
{
	return __rdtsc();
}

HK_NOINSTR static inline __attribute__((always_inline)) uint64_t read_ptt_fast_inline(void);

/* The hooks' read. */
HK_NOINSTR static inline __attribute__((always_inline)) uint64_t hk_now(void)
{
	switch (hk_read_kind) {
	case 1:
		return __rdtsc();
	case 2:
		return read_ptt_fast_inline();
	}
	return hk_read();
}

HK_NOINSTR static pid_t gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/*
 * Blocks allocated ahead of the thread file's end (fallocate, the size
 * kept): the buffer's write then finds its blocks allocated, where a
 * file system with delayed allocation (ext4) would reserve them page by
 * page inside the write (some 6 % of a call's cost). As much again
 * as the file holds, from HK_PREALLOC_MIN to HK_PREALLOC_MAX ahead;
 * thread_close gives back what was not written. 0 once the file system
 * refuses.
 */
#define HK_PREALLOC_MIN (256u << 10)
#define HK_PREALLOC_MAX (4u << 20)
static int hk_prealloc_on = 1;

HK_NOINSTR static void hk_prealloc(struct hk_thread *t, size_t n)
{
	uint64_t ahead = t->bin_off;

	if (t->bin_off + n <= t->alloc_end || !__atomic_load_n(&hk_prealloc_on, __ATOMIC_RELAXED))
		return;
	ahead = ahead < HK_PREALLOC_MIN ? HK_PREALLOC_MIN : ahead > HK_PREALLOC_MAX ? HK_PREALLOC_MAX : ahead;
	/* A failure (no space) is the write's to report; the next tries again. */
	if (fallocate(t->fd, FALLOC_FL_KEEP_SIZE, (off_t)t->bin_off, (off_t)(n + ahead)) != 0 &&
	    (errno == EOPNOTSUPP || errno == ENOSYS))
		__atomic_store_n(&hk_prealloc_on, 0, __ATOMIC_RELAXED);
	t->alloc_end = t->bin_off + n + ahead;
}

/* The file's last write is done: the blocks allocated past its end go
 * back (a truncation to the same size frees them). */
HK_NOINSTR static void hk_trim(struct hk_thread *t)
{
	if (t->alloc_end <= t->bin_off)
		return;
	if (ftruncate(t->fd, (off_t)t->bin_off) != 0)
		perror("hookit: trimming a thread file");
	t->alloc_end = t->bin_off;
}

/* The buffer's records after its header, written to the thread file
 * (one pwrite per HK_BUF bytes: no system call per event), then cleared,
 * then the header moves on: a tail file whose header offset is below the
 * thread file's size was already written (a kill between the two). */
HK_NOINSTR static int flush_buffer(struct hk_thread *t)
{
	size_t n = (size_t)(t->pos - HK_TAIL_WORDS) * sizeof(uint64_t);

	if (n)
		hk_prealloc(t, n);
	if (n && pwrite(t->fd, &t->win[HK_TAIL_WORDS], n, (off_t)t->bin_off) != (ssize_t)n)
		return -1;
	t->bin_off += n;
	memset(&t->win[HK_TAIL_WORDS], 0, n);
	hk_barrier();
	t->win[1] = t->bin_off;
	t->pos = HK_TAIL_WORDS;
	t->need_wall = 1; /* a wall-clock anchor per buffer at least */
	return 0;
}

/* hookit-PID-TID.EXT, or hookit-PID-TID.LIFE.EXT for a thread attached
 * again to an OS thread whose earlier thread ended. */
HK_NOINSTR static void thread_path(char *path, size_t n, const struct hk_thread *t, const char *ext)
{
	if (t->life > 1)
		snprintf(path, n, "hookit-%d-%d.%u.%s", (int)hk_pid, (int)t->tid, t->life, ext);
	else
		snprintf(path, n, "hookit-%d-%d.%s", (int)hk_pid, (int)t->tid, ext);
}

/* Create name in the directory, mode 0600, replacing a file of that name
 * (one a process of the same pid left): the directory is the user's own
 * and closed to others (hk_open_dir), so the name cannot be planted again
 * between the unlink and the exclusive create, and a symbolic link there
 * is never followed. */
HK_NOINSTR static int hk_create(const char *name, int flags)
{
	if (unlinkat(hk_dirfd, name, 0) != 0 && errno != ENOENT)
		return -1;
	return openat(hk_dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* DIR/hookit-PID.threads: "TID NAME" lines, the thread's name (comm)
 * when its file opens and again at the end (a later line wins). */
static int hk_threads_fd = -1;

HK_NOINSTR static void note_thread_name(pid_t tid)
{
	char path[64], line[64];
	int fd, n, k;

	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || hk_threads_fd < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	k = snprintf(line, sizeof(line), "%d ", (int)tid);
	n = (int)read(fd, line + k, sizeof(line) - (size_t)k - 1);
	close(fd);
	if (n <= 0)
		return;
	n += k;
	if (line[n - 1] != '\n')
		line[n++] = '\n';
	/* One write of a whole line (O_APPEND): lines never mix. */
	if (write(hk_threads_fd, line, (size_t)n) != n)
		return;
}

/* Set (under hk_mu) when finish_files has run: no thread file opens after. */
static int hk_finished;

HK_NOINSTR static struct hk_thread *thread_open(void)
{
	struct hk_thread *t = hk_calloc(1, sizeof(*t));
	struct hk_rec head[2];
	char path[4200];
	void *p;

	if (!t)
		return NULL;
	t->tid = gettid_();
	t->life = hk_ended + 1;
	thread_path(path, sizeof(path), t, "bin");
	t->fd = hk_create(path, O_WRONLY);
	if (t->fd < 0)
		goto fail_free;
	/* The header: records 0 and 1. */
	head[0].tag = HK_MAGIC;
	head[0].d = ((uint64_t)(uint32_t)hk_pid << 32) | (uint32_t)t->tid;
	head[1].tag = HK_VERSION;
	head[1].d = 0;
	if (pwrite(t->fd, head, sizeof(head), 0) != (ssize_t)sizeof(head))
		goto fail_close;
	t->bin_off = sizeof(head);
	thread_path(path, sizeof(path), t, "tail");
	t->tail_fd = hk_create(path, O_RDWR);
	if (t->tail_fd < 0)
		goto fail_close;
	if (ftruncate(t->tail_fd, HK_BUF) != 0)
		goto fail_tail;
	p = mmap(NULL, HK_BUF, PROT_READ | PROT_WRITE, MAP_SHARED, t->tail_fd, 0);
	if (p == MAP_FAILED)
		goto fail_tail;
	t->win = p;
	t->win[1] = t->bin_off;
	t->win[0] = HK_TAIL_MAGIC;
	t->pos = HK_TAIL_WORDS;
	t->cap = HK_BUF / sizeof(uint64_t);
	t->need_sync = 1;
	t->need_wall = 1;
	PttThreadInit();
	pthread_mutex_lock(&hk_mu);
	if (hk_finished) {
		/* the files were finished meanwhile (a shutdown): this thread,
		 * first seen during it, records nothing and leaves no file */
		pthread_mutex_unlock(&hk_mu);
		munmap(t->win, HK_BUF);
		unlinkat(hk_dirfd, path, 0);
		close(t->tail_fd);
		thread_path(path, sizeof(path), t, "bin");
		unlinkat(hk_dirfd, path, 0);
		close(t->fd);
		hk_free(t);
		return NULL;
	}
	t->next = hk_threads;
	hk_threads = t;
	pthread_mutex_unlock(&hk_mu);
	note_thread_name(t->tid);
	return t;
fail_tail:
	close(t->tail_fd);
	unlinkat(hk_dirfd, path, 0);
fail_close:
	close(t->fd);
fail_free:
	hk_free(t);
	return NULL;
}

/* The thread's records are all in its file: the tail file goes. */
HK_NOINSTR static void thread_close(struct hk_thread *t)
{
	char path[4200];

	munmap(t->win, HK_BUF);
	t->win = NULL;
	close(t->tail_fd);
	hk_trim(t);
	close(t->fd);
	thread_path(path, sizeof(path), t, "tail");
	unlinkat(hk_dirfd, path, 0);
}

/* Store a two-word record: d, then the tag (a reader of a killed
 * process's tail file stops at the first zero tag). */
HK_NOINSTR static inline void hk_put2(struct hk_thread *t, uint64_t tag, uint64_t d)
{
	uint64_t *r = &t->win[t->pos];

	r[1] = d;
	hk_barrier();
	r[0] = tag;
	t->pos += 2;
}

/* Store one event (the caller made room for 6 words): its interval, the
 * previous event's hook time and its stack pointer step, or a sync first
 * when one of them does not fit. The tag is stored last. */
HK_NOINSTR static inline void hk_put(struct hk_thread *t, uint64_t tag, uint64_t sp, uint64_t early)
{
	uint64_t iv = early - t->last_late;
	uint64_t hook = t->last_late - t->last_early;
	uint64_t dsp = sp - t->last_sp;
	int64_t spd = (int64_t)dsp >> 3;
	uint64_t d;

	if (!sp) /* API events: no stack pointer */
		spd = 0, dsp = 0;
	if (__builtin_expect((iv >> 32) | (hook >> 16) | (dsp & 7) | t->need_sync |
				     (uint64_t)(spd < -32768 || spd > 32767),
			     0)) {
		uint64_t *s = &t->win[t->pos];

		s[2] = early;
		s[3] = sp;
		s[1] = t->last_late;
		hk_barrier();
		s[0] = (uint64_t)HK_SYNC << HK_KIND_SHIFT;
		t->pos += 4;
		t->need_sync = 0;
		d = 0;
	} else {
		d = iv | hook << HK_HOOK_SHIFT | (uint64_t)(uint16_t)spd << HK_SPD_SHIFT;
	}
	hk_put2(t, tag, d);
	t->last_early = early;
	if (sp)
		t->last_sp = sp;
}

/* An entry or exit event (a hook's, or hookit_enter/exit's): a short
 * record (one word: the function's slot, the stack pointer's step or the
 * method type, the interval) where the slot already holds the function
 * and the previous event took no hook time (one read per hook); else the
 * full record, and the slot takes the function. Half the bytes for most
 * events: writing them is most of what a hook costs after its clock read. */
HK_NOINSTR static inline __attribute__((always_inline)) void hk_put_short(struct hk_thread *t, uint64_t tag, uint64_t sp,
									 uint64_t early)
{
	uint64_t fn = tag & HK_FN_MASK;
	unsigned h = HK_SLOT(fn);
	uint64_t iv = early - t->last_late;
	uint64_t api = tag >> HK_API_SHIFT & 1;
	uint64_t mid, odd = 0;

	if (api) {
		mid = (tag >> HK_TYPE_SHIFT & HK_TYPE_MASK) << HK_SHORT_SPD_SHIFT;
	} else {
		uint64_t dsp = sp - t->last_sp;
		int64_t spd = (int64_t)dsp >> 3;

		mid = (uint64_t)(uint16_t)spd << HK_SHORT_SPD_SHIFT;
		odd = (dsp & 7) | (uint64_t)(spd < -32768 || spd > 32767);
	}
	if (__builtin_expect(t->fns[h] == fn && !((iv >> 32) | (t->last_late - t->last_early) | odd | t->need_sync), 1)) {
		t->win[t->pos++] = HK_SHORT_TAG((tag >> HK_KIND_SHIFT) == HK_EXIT, h) | api << HK_SHORT_API_SHIFT |
				   (tag >> HK_INL_SHIFT & 1) << HK_SHORT_INL_SHIFT | mid | iv;
		t->last_early = early;
		if (!api)
			t->last_sp = sp;
		return;
	}
	t->fns[h] = fn;
	hk_put(t, tag, sp, early);
}

/* The end of a thread's records: a sync with the last late read. */
HK_NOINSTR static void hk_put_end(struct hk_thread *t)
{
	uint64_t *s = &t->win[t->pos];

	s[2] = HK_END;
	s[3] = HK_END;
	s[1] = t->last_late;
	hk_barrier();
	s[0] = (uint64_t)HK_SYNC << HK_KIND_SHIFT;
	t->pos += 4;
}

/* Whether each hook reads the metric twice (early and late: the hook's
 * work between is charged to no one) or once (its work is then in the
 * intervals, which the calibration takes off). Two with the pitrace
 * module, where the read is cheap and the metric may be instructions
 * (exact per function); one elsewhere: half the reads per call. */
static int hk_two_reads;

/* The hook's work after its early read: store the event. Returns where
 * the late read goes, or NULL when the hook takes no late read (its early
 * read stands for both, set here): with one read per hook when the work
 * was the common one. Slow work (a thread's first event, a buffer
 * written, a marker, a wall-clock anchor) is always closed by a late
 * read, so that it is charged to no one. */
HK_NOINSTR static inline __attribute__((always_inline)) uint64_t *hk_event(uint64_t tag, void *sp, uint64_t early,
									   int shortable, void *site, void *from)
{
	struct hk_thread *t = hk_self;
	int slow = hk_two_reads;

	if (__builtin_expect(!hk_ready, 0))
		return NULL;
	if (__builtin_expect(t == NULL, 0)) {
		if (!hk_on || hk_noopen) /* off, or opening failed before */
			return NULL;
		if (hk_opening) { /* a signal handler's, while the files open */
			__atomic_add_fetch(&hk_dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
		hk_opening = 1;
		hk_barrier();
		t = thread_open();
		hk_barrier();
		hk_opening = 0;
		if (!t && __atomic_load_n(&hk_finished, __ATOMIC_RELAXED))
			return NULL; /* after a shutdown: nothing to record */
		if (!t) {
			hk_noopen = 1;
			__atomic_add_fetch(&hk_dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
		hk_self = t;
		/* The early read of the thread's first event came before its
		 * counters existed: take a fresh one (nothing is charged before
		 * the first event). */
		early = hk_now();
		slow = 1;
	}
	if (__builtin_expect(t->busy, 0)) { /* a signal handler inside the hook */
		__atomic_add_fetch(&hk_dropped, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	t->busy = 1;
	/* Against finish_files (another thread): busy is stored before
	 * closing is read; the finisher's membarrier orders both sides. */
	hk_barrier();
	if (__builtin_expect(__atomic_load_n(&t->closing, __ATOMIC_RELAXED), 0)) {
		__atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
		return NULL;
	}
	/* The thread's system calls before this hook makes any of its own
	 * (a buffer written): those in the interval this event ends. */
	const volatile struct pitrace_ptt_sys *sy = hk_sys ? hk_sys_area() : NULL;
	uint32_t nsys = sy ? sy->syscalls : 0;
	uint64_t ksys = sy ? sy->sys_time[0] : 0;
	uint32_t nflt = sy ? sy->faults : 0;
	uint64_t kflt = sy ? sy->fault_time[0] : 0;
	uint32_t nres = sy ? sy->resumes : 0;
	uint64_t kres = sy ? sy->resume_time[0] : 0;

	/* Room for a sync, a marker, a sync, the event, a DSIN, a SYS, a
	 * FLT, a wall-clock anchor and the end (26 words); the buffer's write
	 * is inside this hook: between the reads, not charged. */
	if (__builtin_expect(t->pos + 26 >= t->cap, 0)) {
		slow = 1;
		if (flush_buffer(t) != 0) {
			__atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
			hk_self = NULL;
			hk_noopen = 1;
			__atomic_add_fetch(&hk_dropped, 1, __ATOMIC_RELAXED);
			return NULL;
		}
	}
	/* Control changes (rtdriver start/end/reset) since this thread's last
	 * event: a marker says the state, with the reset count. */
	unsigned gen = hk_gen;
	if (__builtin_expect(t->gen != gen, 0)) {
		t->gen = gen;
		hk_put(t, ((uint64_t)HK_MARK << HK_KIND_SHIFT) | (hk_resets << 8 & HK_FN_MASK) |
				  (hk_on ? HK_MARK_START : HK_MARK_END),
		       0, early);
		t->last_late = early;
		slow = 1;
	}
	if (__builtin_expect(!hk_on && (tag >> HK_KIND_SHIFT) != HK_MARK, 0)) {
		__atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
		return NULL;
	}
	const volatile struct pitrace_ptt_area *a = hk_dsin ? PttSelf->c[0].page : NULL;

	if (a) { /* no area: the thread's PTT set-up failed */
		uint32_t ds = a->dispatches, in = a->interrupts;

		if (__builtin_expect((ds != t->ds || in != t->in) && !t->need_sync, 0)) {
			slow = 1;
			hk_put2(t, (uint64_t)HK_DSIN << HK_KIND_SHIFT,
				(uint64_t)(ds - t->ds) | (uint64_t)(in - t->in) << 32);
		}
		t->ds = ds;
		t->in = in;
	}
	/* A resume (the rseq update after a switch) goes with the system
	 * calls: after a blocking one it is the rest of its way out. */
	if (sy && __builtin_expect((nsys != t->nsys || nres != t->nres) && !t->need_sync, 0)) {
		slow = 1;
		hk_put2(t, ((uint64_t)HK_SYS << HK_KIND_SHIFT) | (nsys - t->nsys),
			ksys - t->sys_time + hk_sys_glue * (nsys - t->nsys) + kres - t->res_time +
				hk_resume_glue * (nres - t->nres));
	}
	if (sy && __builtin_expect(nflt != t->nflt && !t->need_sync, 0)) {
		slow = 1;
		hk_put2(t, ((uint64_t)HK_FLT << HK_KIND_SHIFT) | (nflt - t->nflt),
			kflt - t->flt_time + hk_fault_glue * (nflt - t->nflt));
	}
	/* The wall clock (CLOCK_MONOTONIC) at this event's early read, where
	 * the metric may have drifted from it: the thread's first event, each
	 * buffer, and after the thread was scheduled out and in (time metrics
	 * run with the wall clock in between). */
	uint64_t sm = hk_sched_mark();

	if (__builtin_expect(t->need_wall | (sm != t->sched), 0)) {
		hk_put2(t, (uint64_t)HK_WALL << HK_KIND_SHIFT, mono_ns());
		t->need_wall = 0;
		t->sched = sm;
		slow = 1;
	}
	if (site) { /* a hook's entry: inlined into the function on top? */
		int inl;

		if (__builtin_expect(((uint64_t)sp == t->in_sp) & ((uint64_t)site == t->in_site) &
					     ((uint64_t)from == t->in_from), 1)) {
			/* The thread's previous entry again (a loop calling one
			 * function, or one inlined callee): marked as it was. */
			inl = t->in_inl;
		} else {
			/* The frame's entry at this stack pointer (HK_FRAME), or the
			 * previous entry: its call site, its hook called from
			 * elsewhere. An unmarked entry opens a frame: noted. */
			struct hk_frame *f = HK_FRAME(t, (uint64_t)sp);
			uint64_t key = HK_FRAME_KEY((uint64_t)sp, (uint64_t)site);

			inl = (((uint64_t)sp == t->in_sp) & ((uint64_t)site == t->in_site)) |
			      ((key == f->key) & ((uint64_t)from != f->from));
			if (!inl) {
				f->key = key;
				f->from = (uint64_t)from;
			}
			t->in_sp = (uint64_t)sp;
			t->in_site = (uint64_t)site;
			t->in_from = (uint64_t)from;
		}
		t->in_inl = inl;
		tag |= (uint64_t)inl << HK_INL_SHIFT;
	}
	if (shortable)
		hk_put_short(t, tag, (uint64_t)sp, early);
	else
		hk_put(t, tag, (uint64_t)sp, early);
	if (sy) { /* after the hook's own (a buffer written): charged to no one */
		t->nsys = sy->syscalls;
		t->sys_time = sy->sys_time[0];
		t->nflt = sy->faults;
		t->flt_time = sy->fault_time[0];
		t->nres = sy->resumes;
		t->res_time = sy->resume_time[0];
	}
	__atomic_store_n(&t->busy, 0, __ATOMIC_RELEASE);
	if (slow)
		return &t->last_late;
	t->last_late = early;
	return NULL;
}

/*
 * The hooks. The stack pointer of the event (the hook's frame address: a
 * fixed distance below the instrumented function's frame) is stored in
 * place of the call site: the reader repairs the call stack with it after
 * a longjmp, an exception or an exit from a deep stack. An entry at the
 * stack pointer of an open frame closes that frame — unless it is marked
 * inlined: gcc calls the hooks of a function inlined into another from
 * the other's frame with the other's call site, so an entry with the
 * stack pointer and call site of the entry that opened the frame at that
 * stack pointer (hk_thread.frames), whose hook was called from another
 * place, is a callee inlined there (as is one repeating the thread's
 * previous entry, marked: a loop over an inlined callee). (A function left by longjmp and called again
 * from the same call site calls its hook from the same place: not marked,
 * it closes the frame it left.)
 */
HK_VIS HK_NOINSTR void __cyg_profile_func_enter(void *fn, void *site)
{
	uint64_t early = hk_now();
	uint64_t *late;

	late = hk_event(((uint64_t)HK_ENTER << HK_KIND_SHIFT) | ((uint64_t)(uintptr_t)fn & HK_FN_MASK),
			__builtin_frame_address(0), early, 1, site, __builtin_return_address(0));
	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

HK_VIS HK_NOINSTR void __cyg_profile_func_exit(void *fn, void *site)
{
	uint64_t early = hk_now();
	uint64_t *late;

	(void)site;
	late = hk_event(((uint64_t)HK_EXIT << HK_KIND_SHIFT) | ((uint64_t)(uintptr_t)fn & HK_FN_MASK),
			__builtin_frame_address(0), early, 1, NULL, NULL);
	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

/*
 * The in-process API (hookit_api.h): the same early read / work / late
 * read. The tag is computed before the early read and nothing branches
 * after the late read; type >= 8 is folded to 0 without a branch.
 */
#define HK_API_TAG(kind, type) \
	(((uint64_t)(kind) << HK_KIND_SHIFT) | (1ULL << HK_API_SHIFT) | \
	 (((uint64_t)(type) & HK_TYPE_MASK) * ((type) < HOOKIT_NTYPES) << HK_TYPE_SHIFT))

HK_VIS HK_NOINSTR void hookit_enter(uint64_t id, unsigned type)
{
	uint64_t tag = HK_API_TAG(HK_ENTER, type);
	uint64_t early = hk_now();
	uint64_t *late = hk_event(tag | (id & HK_FN_MASK), NULL, early, 1, NULL, NULL);

	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

HK_VIS HK_NOINSTR void hookit_exit(uint64_t id, unsigned type)
{
	uint64_t tag = HK_API_TAG(HK_EXIT, type);
	uint64_t early = hk_now();
	uint64_t *late = hk_event(tag | (id & HK_FN_MASK), NULL, early, 1, NULL, NULL);

	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

HK_VIS HK_NOINSTR void hookit_exception_exit(uint64_t id, unsigned type)
{
	uint64_t tag = HK_API_TAG(HK_EXC_EXIT, type);
	uint64_t early = hk_now();
	uint64_t *late = hk_event(tag | (id & HK_FN_MASK), NULL, early, 0, NULL, NULL);

	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

/* A marker record (start, end, reset, flush) in the calling thread. */
HK_NOINSTR static void hk_mark(uint64_t what)
{
	uint64_t early = hk_now();
	uint64_t *late = hk_event(((uint64_t)HK_MARK << HK_KIND_SHIFT) | (hk_resets << 8 & HK_FN_MASK) | what, NULL, early, 0, NULL, NULL);
	if (__builtin_expect(late != NULL, 0))
		*late = hk_now();
}

/* ---- calibration: inner and outer time, measured with the hooks ---- */

struct hk_calib {
	double t_inner, t_outer;       /* minimum of the batch averages */
	double t_inner_med, t_outer_med; /* median of the batch averages */
	double t_plain;                /* the same loop uninstrumented, per call (minimum) */
};

static struct hk_calib hk_cal, hk_cal_api;

HK_NOINSTR static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The buffer's events since the last write are dropped: the next event
 * starts with a sync and a wall-clock anchor, and no slot names a
 * function a dropped record gave it. */
HK_NOINSTR static void discard_events(struct hk_thread *t)
{
	memset(&t->win[HK_TAIL_WORDS], 0, (size_t)(t->pos - HK_TAIL_WORDS) * sizeof(uint64_t));
	memset(t->fns, 0, sizeof(t->fns));
	t->pos = HK_TAIL_WORDS;
	t->need_sync = 1;
	t->need_wall = 1;
}

/* A calibration batch's n enter/exit pairs from word p0 of the buffer:
 * adds the intervals inside the function (the exits') to *in and the hook
 * times after the batch's first event to *hooks. -1 when the batch holds
 * anything else (a sync: a value did not fit). */
HK_NOINSTR static int batch_sums(const struct hk_thread *t, uint32_t p0, int n, uint64_t *in, uint64_t *hooks)
{
	uint32_t i = p0;

	for (int j = 0; j < 2 * n; j++) {
		uint64_t w, d;
		unsigned kind;

		if (i >= t->pos)
			return -1;
		w = t->win[i];
		if (w >> HK_SHORT_SHIFT == HK_SHORT) {
			kind = (w >> HK_SHORT_EXIT_SHIFT & 1) ? HK_EXIT : HK_ENTER;
			d = w & 0xffffffff; /* no hook time */
			i++;
		} else {
			kind = (unsigned)(w >> HK_KIND_SHIFT);
			d = t->win[i + 1];
			i += 2;
		}
		if (kind != ((j & 1) ? HK_EXIT : HK_ENTER))
			return -1;
		if (j > 0)
			*hooks += (d >> HK_HOOK_SHIFT) & 0xffff;
		if (j & 1)
			*in += d & 0xffffffff;
	}
	return i == t->pos ? 0 : -1;
}

/* 100 batches of 100 empty pairs after a warm-up of 1,000, through the
 * same entry points the program calls; the records are then discarded. */
HK_NOINSTR static void calibrate(struct hk_calib *c, void (*calls)(int), void (*plain_calls)(int))
{
	enum { WARM = 1000, BATCH = 100, NBATCH = 100 };
	double inner[NBATCH], outer[NBATCH];
	struct hk_thread *t;

	calls(WARM);
	t = hk_self;
	if (!t) {
		memset(c, 0, sizeof(*c));
		return;
	}
	for (int b = 0, tries = 0; b < NBATCH && tries < 100 * NBATCH; tries++) {
		/* Stay inside the buffer (no write in a batch); the records
		 * are discarded. */
		if (t->pos + 4 * BATCH + 32 >= t->cap) {
			discard_events(t);
			calls(1); /* the sync goes before the batch */
		}
		uint32_t p0 = t->pos;
		uint64_t t0 = hk_read();
		calls(BATCH);
		uint64_t t1 = hk_read();
		uint64_t in = 0, hooks = t->last_late - t->last_early;

		if (batch_sums(t, p0, BATCH, &in, &hooks) != 0) /* a sync in the batch: a value did not fit */
			continue;
		inner[b] = (double)in / BATCH;
		outer[b] = ((double)(t1 - t0) - (double)in - (double)hooks) / BATCH;
		b++;
	}
	/* Discard the calibration events. */
	discard_events(t);
	if (t->bin_off != 2 * sizeof(struct hk_rec)) {
		t->bin_off = 2 * sizeof(struct hk_rec);
		if (ftruncate(t->fd, (off_t)t->bin_off) != 0)
			perror("hookit: truncating a thread file");
		t->alloc_end = 0; /* the truncation freed them */
		t->win[1] = t->bin_off;
	}
	/* The loop and the call without the hooks: the caller's own work,
	 * which outer counted too (minimum and median the same way). */
	double plain[NBATCH];

	plain_calls(WARM);
	for (int b = 0; b < NBATCH; b++) {
		uint64_t t0 = hk_read();

		plain_calls(BATCH);
		plain[b] = (double)(hk_read() - t0) / BATCH;
	}
	qsort(inner, NBATCH, sizeof(double), cmp_double);
	qsort(outer, NBATCH, sizeof(double), cmp_double);
	qsort(plain, NBATCH, sizeof(double), cmp_double);
	c->t_plain = plain[0];
	c->t_inner = inner[0];
	c->t_outer = outer[0] > plain[0] ? outer[0] - plain[0] : 0;
	c->t_inner_med = inner[NBATCH / 2];
	c->t_outer_med = outer[NBATCH / 2] > plain[NBATCH / 2] ? outer[NBATCH / 2] - plain[NBATCH / 2] : 0;
}

/*
 * The kernel's work per system call outside the module's window (its
 * entry code up to sys_enter, its exit code after sys_exit): batches of
 * getppid through the syscall instruction against the same code with a
 * nop in its place, the same number of user instructions; the difference
 * is the whole system call, less the module's window. Each side's least
 * batch (an interrupt's or a dispatch's way in and out only adds: struct
 * hk_glue). Under QEMU -icount it is a constant number of instructions.
 */
HK_NOINSTR __attribute__((noinline)) static void hk_sys_one(void)
{
	long r;

	__asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_getppid) : "rcx", "r11", "memory");
}

HK_NOINSTR __attribute__((noinline)) static void hk_nosys_one(void)
{
	long r;

	__asm__ volatile("nop" : "=a"(r) : "0"((long)SYS_getppid) : "rcx", "r11", "memory");
}

HK_NOINSTR __attribute__((noinline)) static uint64_t hk_sys_batch(void (*volatile f)(void), int n,
								   const volatile struct pitrace_ptt_sys *sy, uint32_t *calls,
								   uint64_t *ktime)
{
	struct PttThreadState *s = PttSelf;
	uint32_t n0 = sy->syscalls;
	uint64_t k0 = sy->sys_time[0];
	uint64_t t0 = s->read1(s);

	for (int i = 0; i < n; i++)
		f();
	uint64_t t1 = s->read1(s);

	*calls = sy->syscalls - n0;
	*ktime = sy->sys_time[0] - k0;
	return t1 - t0;
}

/* The glue calibrations' minima: the least metric (less the module's
 * windows) of a batch with the events, and of a batch of the same code
 * without them, each over its own batches. An interrupt only adds to a
 * batch, on either side: the least difference of pairs of batches would
 * take a batch without the events that an interrupt hit (a timer tick in
 * the -icount VM: ~5,000 cycles, 260 a call of a batch of 20) as its
 * floor. -1: no batch yet. */
struct hk_glue {
	double with, without;
};

HK_NOINSTR static void glue_with(struct hk_glue *g, double v)
{
	if (g->with < 0 || v < g->with)
		g->with = v;
}

HK_NOINSTR static void glue_without(struct hk_glue *g, double v)
{
	if (g->without < 0 || v < g->without)
		g->without = v;
}

/* The work per event of a batch of n: the difference of the minima, 0
 * when a side had no batch or the difference is not positive. */
HK_NOINSTR static uint64_t glue_per(const struct hk_glue *g, int n)
{
	if (g->with < 0 || g->without < 0 || g->with <= g->without)
		return 0;
	return (uint64_t)((g->with - g->without) / n + 0.5);
}

HK_NOINSTR static uint64_t calibrate_sys(void)
{
	enum { WARM = 20, BATCH = 20, NBATCH = 50 };
	const volatile struct pitrace_ptt_sys *sy;
	struct hk_glue g = {-1, -1};
	uint32_t calls;
	uint64_t k;

	if (PttThreadInit() != 0 || !(sy = hk_sys_area()) || !sy->sys_on)
		return 0;
	hk_sys_batch(hk_sys_one, WARM, sy, &calls, &k);
	hk_sys_batch(hk_nosys_one, WARM, sy, &calls, &k);
	for (int b = 0; b < NBATCH; b++) {
		uint64_t with = hk_sys_batch(hk_sys_one, BATCH, sy, &calls, &k);
		uint32_t c2;
		uint64_t k2, without = hk_sys_batch(hk_nosys_one, BATCH, sy, &c2, &k2);

		if (calls == BATCH && with >= k)
			glue_with(&g, (double)(with - k));
		if (c2 == 0)
			glue_without(&g, (double)without);
	}
	return glue_per(&g, BATCH);
}

/*
 * The kernel's work per user page fault outside the module's window (the
 * exception's entry up to page_fault_user, the way back to user mode
 * after handle_mm_fault returns): batches of one write to each of BATCH
 * pages just dropped (MADV_DONTNEED: each write faults a fresh zero page
 * in) against the same writes again (the pages present). The difference
 * less the module's windows is that work; each side's least batch, as
 * for system calls. The pages are the runtime's own mapping
 * (unlocked: mlockall(MCL_FUTURE) would fault them in at mmap).
 */
HK_NOINSTR __attribute__((noinline)) static void hk_touch(volatile char *p, int n, long step)
{
	for (int i = 0; i < n; i++)
		p[(long)i * step] = 1;
}

HK_NOINSTR __attribute__((noinline)) static uint64_t hk_fault_batch(volatile char *p, int n, long step,
								     const volatile struct pitrace_ptt_sys *sy,
								     uint32_t *faults, uint64_t *ktime)
{
	struct PttThreadState *s = PttSelf;
	uint32_t n0 = sy->faults;
	uint64_t k0 = sy->fault_time[0];
	uint64_t t0 = s->read1(s);

	hk_touch(p, n, step);
	uint64_t t1 = s->read1(s);

	*faults = sy->faults - n0;
	*ktime = sy->fault_time[0] - k0;
	return t1 - t0;
}

HK_NOINSTR static uint64_t calibrate_fault(void)
{
	enum { BATCH = 20, NBATCH = 50 };
	const volatile struct pitrace_ptt_sys *sy;
	long pg = sysconf(_SC_PAGESIZE);
	struct hk_glue g = {-1, -1};

	if (pg <= 0 || !(sy = hk_sys_area()) || !sy->faults_on)
		return 0;
	hk_faults = 1;
	size_t len = (size_t)pg * BATCH;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return 0;
	munlock(p, len);
#ifdef MADV_NOHUGEPAGE
	madvise(p, len, MADV_NOHUGEPAGE); /* one fault per page */
#endif
	for (int b = 0; b <= NBATCH; b++) {
		uint32_t f, f2;
		uint64_t k, k2;

		if (madvise(p, len, MADV_DONTNEED) != 0)
			break;
		uint64_t with = hk_fault_batch(p, BATCH, pg, sy, &f, &k);
		uint64_t without = hk_fault_batch(p, BATCH, pg, sy, &f2, &k2);

		/* the first batch warms the code (and may fill page tables) */
		if (b == 0)
			continue;
		if (f == BATCH && with >= k)
			glue_with(&g, (double)(with - k));
		if (f2 == 0)
			glue_without(&g, (double)without);
	}
	munmap(p, len);
	return glue_per(&g, BATCH);
}

/*
 * The kernel's work per rseq update after a switch outside the module's
 * resume windows (the exit-to-user loop that calls it, the probes' own
 * way in and out): batches of a short nanosleep through the
 * syscall instruction (each blocks: the thread is switched out and in,
 * one resume on the way out) against getppid through the same
 * instructions (no switch). The difference less both batches' system-call
 * windows and the resume windows is that work; each side's least batch,
 * as for system calls. Under QEMU -icount it is a constant
 * number of instructions (the sleep itself is another thread's: idle's).
 */
static const struct timespec hk_short_sleep = {0, 50000};

HK_NOINSTR __attribute__((noinline)) static void hk_sleep_one(void)
{
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_nanosleep), "D"(&hk_short_sleep), "S"(0L)
			 : "rcx", "r11", "memory");
}

HK_NOINSTR __attribute__((noinline)) static void hk_nosleep_one(void)
{
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_getppid), "D"(&hk_short_sleep), "S"(0L)
			 : "rcx", "r11", "memory");
}

HK_NOINSTR __attribute__((noinline)) static uint64_t hk_res_batch(void (*volatile f)(void), int n,
								   const volatile struct pitrace_ptt_sys *sy, uint32_t *resumes,
								   uint64_t *ktime)
{
	struct PttThreadState *s = PttSelf;
	uint32_t n0 = sy->syscalls, r0 = sy->resumes;
	uint64_t k0 = sy->sys_time[0] + sy->resume_time[0];
	uint64_t t0 = s->read1(s);

	for (int i = 0; i < n; i++)
		f();
	uint64_t t1 = s->read1(s);

	*resumes = sy->resumes - r0;
	*ktime = sy->sys_time[0] + sy->resume_time[0] - k0;
	return sy->syscalls - n0 == (uint32_t)n ? t1 - t0 : 0;
}

HK_NOINSTR static uint64_t calibrate_resume(void)
{
	enum { BATCH = 10, NBATCH = 10 };
	const volatile struct pitrace_ptt_sys *sy;
	struct hk_glue g = {-1, -1};

	if (!(sy = hk_sys_area()) || !sy->resumes_on)
		return 0;
	hk_resumes = 1;
	for (int b = 0; b <= NBATCH; b++) {
		uint32_t r, r2;
		uint64_t k, k2;
		uint64_t with = hk_res_batch(hk_sleep_one, BATCH, sy, &r, &k);
		uint64_t without = hk_res_batch(hk_nosleep_one, BATCH, sy, &r2, &k2);

		/* the first batch warms the code; a sleep that did not block
		 * (no resume) or a switch among the getppids spoils its side */
		if (b == 0)
			continue;
		if (r == BATCH && with && with >= k)
			glue_with(&g, (double)(with - k));
		if (r2 == 0 && without && without >= k2)
			glue_without(&g, (double)(without - k2));
	}
	return glue_per(&g, BATCH);
}

/* ---- the process files: info and maps ---- */

HK_NOINSTR static void copy_maps(void)
{
	char path[4200], buf[8192];
	ssize_t n;

	snprintf(path, sizeof(path), "hookit-%d.maps", (int)hk_pid);
	int in = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	int out = hk_create(path, O_WRONLY);

	if (in >= 0 && out >= 0)
		while ((n = read(in, buf, sizeof(buf))) > 0)
			if (write(out, buf, (size_t)n) != n)
				break;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

static double hk_ns_per_unit; /* the metric's nanoseconds per unit; 0: not a time */

/* The info file, written with snprintf and one write (no stdio stream: its
 * buffer would come from the program's allocator). */
/* The backend the info file names (a forked child writes its own). */
static const char *hk_backend = "?";

HK_NOINSTR static void write_info(const struct hk_calib *c, const struct hk_calib *api, const char *backend)
{
	char path[4200], exe[4096], buf[8192];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int k;

	exe[n > 0 ? n : 0] = 0;
	snprintf(path, sizeof(path), "hookit-%d.info", (int)hk_pid);
	int fd = hk_create(path, O_WRONLY);
	if (fd < 0)
		return;
	k = snprintf(buf, sizeof(buf),
		     "version=%d\npid=%d\nexe=%s\nmetric=%s\nbackend=%s\n"
		     "t_inner=%.3f\nt_outer=%.3f\nt_inner_median=%.3f\nt_outer_median=%.3f\n"
		     "dsin=%s\n"
		     "t_inner_api=%.3f\nt_outer_api=%.3f\nt_inner_api_median=%.3f\nt_outer_api_median=%.3f\n"
		     "reads=%d\nns_per_unit=%.9f\nt_plain=%.3f\nt_plain_api=%.3f\n"
		     "sys=%s\nsys_glue=%llu\nfaults=%s\nfault_glue=%llu\nresumes=%s\nresume_glue=%llu\n",
		     HK_VERSION, (int)hk_pid, exe, hk_metric, backend, c->t_inner, c->t_outer, c->t_inner_med,
		     c->t_outer_med, hk_dsin ? "kmod" : "none", api->t_inner, api->t_outer, api->t_inner_med,
		     api->t_outer_med, hk_two_reads ? 2 : 1, hk_ns_per_unit, c->t_plain, api->t_plain,
		     !hk_sys ? "none" : hk_user ? "out" : "in", (unsigned long long)hk_sys_glue,
		     !hk_faults ? "none" : hk_user ? "out" : "in", (unsigned long long)hk_fault_glue,
		     !hk_resumes ? "none" : hk_user ? "out" : "in", (unsigned long long)hk_resume_glue);
	if (k > 0 && write(fd, buf, (size_t)(k < (int)sizeof(buf) ? k : (int)sizeof(buf) - 1)) < 0)
		perror("hookit: writing the info file");
	close(fd);
}

/* The events dropped (hk_dropped: signal handlers inside a hook or a
 * thread's opening, threads whose files could not be opened), appended
 * to the info file at the end for the reports: dropped=N. */
HK_NOINSTR static void note_dropped(void)
{
	char path[64], line[64];
	uint64_t n = __atomic_load_n(&hk_dropped, __ATOMIC_RELAXED);
	int fd, k;

	if (!n)
		return;
	snprintf(path, sizeof(path), "hookit-%d.info", (int)hk_pid);
	fd = openat(hk_dirfd, path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	k = snprintf(line, sizeof(line), "dropped=%llu\n", (unsigned long long)n);
	if (write(fd, line, (size_t)k) != k)
		perror("hookit: writing the info file");
	close(fd);
}

/* A full memory barrier in every thread of the process (membarrier):
 * what a thread stored before it is seen by the caller, what it loads
 * after it sees the caller's stores. Registered at start-up for the
 * cheap private command; else the global one (no registration, slower:
 * shutdown only); 0 when neither is there. */
#ifndef MEMBARRIER_CMD_GLOBAL
#define MEMBARRIER_CMD_GLOBAL (1 << 0)
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED (1 << 3)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED (1 << 4)
#endif
static int hk_membarrier_private;

HK_NOINSTR static int hk_membarrier(void)
{
	if (hk_membarrier_private && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return 1;
	return syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0;
}

/* Make every thread's file end exactly at its last record. A thread
 * inside a hook meanwhile (another thread of the program, at shutdown or
 * exit) finishes its event first: closing is set, the membarrier makes
 * sure each thread either sees it before recording or is seen busy, and
 * busy threads are waited for (a second at most; a thread stopped inside
 * a hook keeps its file without the end mark, which the reader reports
 * as cut short). Before, the end could land under a thread's last event:
 * "a record after the end" (TestCalltreeRtdriver, once in CI). */
HK_NOINSTR static void finish_files(void)
{
	pthread_mutex_lock(&hk_mu);
	__atomic_store_n(&hk_finished, 1, __ATOMIC_RELAXED);
	for (struct hk_thread *t = hk_threads; t; t = t->next)
		__atomic_store_n(&t->closing, 1, __ATOMIC_RELAXED);
	(void)hk_membarrier();
	for (struct hk_thread *t = hk_threads; t; t = t->next) {
		char path[4200];

		if (!t->win || t->busy == 2)
			continue;
		/* (without membarrier a thread may yet start an event after
		 * this look: the old race, no worse) */
		for (int i = 0; i < 1000 && __atomic_load_n(&t->busy, __ATOMIC_ACQUIRE) == 1; i++) {
			struct timespec ms = {0, 1000000};

			nanosleep(&ms, NULL);
		}
		if (__atomic_load_n(&t->busy, __ATOMIC_ACQUIRE) == 1) {
			fprintf(stderr, "hookit: thread %d stayed inside a hook for a second at shutdown: its file ends without the end mark\n",
				(int)t->tid);
			continue;
		}
		/* The buffer stays mapped: a thread still running writes into
		 * it, unrecorded (busy). */
		t->busy = 2;
		note_thread_name(t->tid);
		if (t->pos + 4 <= t->cap)
			hk_put_end(t);
		if (flush_buffer(t) != 0)
			perror("hookit: writing a thread file");
		hk_trim(t);
		thread_path(path, sizeof(path), t, "tail");
		unlinkat(hk_dirfd, path, 0);
	}
	pthread_mutex_unlock(&hk_mu);
	note_dropped();
}

HK_NOINSTR static void flush_files(void)
{
	pthread_mutex_lock(&hk_mu);
	for (struct hk_thread *t = hk_threads; t; t = t->next)
		if (t->win)
			msync(t->win, HK_BUF, MS_ASYNC);
	pthread_mutex_unlock(&hk_mu);
}

/* Reset: each thread's next event is preceded by a reset marker, from
 * which the reports count again (the call stack is kept). */
HK_NOINSTR static void reset_files(void)
{
	__atomic_add_fetch(&hk_resets, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&hk_gen, 1, __ATOMIC_SEQ_CST);
}

HK_NOINSTR static void set_on(int on)
{
	hk_on = on;
	__atomic_add_fetch(&hk_gen, 1, __ATOMIC_SEQ_CST);
}

HK_NOINSTR static void after_fork_child(void)
{
	/* The child's events go to its own files; the parent's mappings are
	 * left alone (they are shared with the parent). */
	struct hk_thread *t = hk_threads;

	hk_threads = NULL;
	hk_self = NULL;
	hk_noopen = 0;
	hk_opening = 0;
	hk_dropped = 0;
	hk_cs = NULL; /* the parent's counters: the child's thread gets its own */
	hk_last_tsc = 0;
	hk_ended = 0;
	hk_pid = getpid();
	while (t) {
		struct hk_thread *n = t->next;

		if (t->win)
			munmap(t->win, HK_BUF);
		close(t->fd);
		close(t->tail_fd);
		hk_free(t);
		t = n;
	}
	if (hk_threads_fd >= 0) { /* the child's thread names: its own file */
		char path[64];

		close(hk_threads_fd);
		snprintf(path, sizeof(path), "hookit-%d.threads", (int)hk_pid);
		hk_threads_fd = hk_create(path, O_WRONLY | O_APPEND);
	}
	write_info(&hk_cal, &hk_cal_api, hk_backend); /* the same calibration, its own pid */
	copy_maps();
}

/* ---- control: rtdriver's socket ---- */

static int hk_ctl_fd = -1;

/* Called by the control thread after a flush, before the answer
 * (hookit_on_flush: an agent writes its reports there). */
static void (*hk_flush_fn)(void);

/* A control connection has this long to send its command and take the
 * answer: one that stays silent holds the (single) control thread no
 * longer than that. */
#define HK_CTL_DEADLINE_S 2

/* Whether the peer of control connection c may drive this process: the
 * same user, or root. */
HK_NOINSTR static int ctl_peer_ok(int c)
{
	struct ucred cr;
	socklen_t n = sizeof(cr);

	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &n) != 0 || n != sizeof(cr))
		return 0;
	return cr.uid == 0 || cr.uid == geteuid();
}

HK_NOINSTR static void *control_loop(void *arg)
{
	(void)arg;
	for (;;) {
		char buf[64];
		struct timeval tv = {.tv_sec = HK_CTL_DEADLINE_S};
		int c = accept4(hk_ctl_fd, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		ssize_t n = read(c, buf, sizeof(buf) - 1);
		const char *reply = "error: unknown command (start, end, flush, reset, shutdown)\n";

		if (n > 0 && !ctl_peer_ok(c)) {
			/* (the command is read first: closing on unread data would
			 * reset the connection before the peer reads why) */
			reply = "error: another user's process: only its owner or root may drive it\n";
		} else if (n > 0) {
			buf[n] = 0;
			buf[strcspn(buf, "\r\n ")] = 0;
			if (!strcmp(buf, "start")) {
				set_on(1);
				reply = "ok start\n";
			} else if (!strcmp(buf, "end")) {
				set_on(0);
				flush_files();
				reply = "ok end\n";
			} else if (!strcmp(buf, "flush")) {
				void (*fn)(void) = __atomic_load_n(&hk_flush_fn, __ATOMIC_ACQUIRE);

				flush_files();
				if (fn)
					fn();
				reply = "ok flush\n";
			} else if (!strcmp(buf, "reset")) {
				reset_files();
				reply = "ok reset (events before this point are marked)\n";
			} else if (!strcmp(buf, "shutdown")) {
				set_on(0);
				finish_files();
				reply = "ok shutdown\n";
			}
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			close(c); /* silent past the deadline */
			continue;
		}
		if (write(c, reply, strlen(reply)) < 0)
			perror("hookit: control reply");
		close(c);
	}
}

/* The control socket, DIR/hookit-PID.sock, mode 0600: bound through the
 * opened directory (its /proc/self/fd name), so it lands in the directory
 * hk_open_dir checked; made 0600 before it listens, so no connection is
 * accepted while it has the umask's mode. Each connection's peer is
 * checked (ctl_peer_ok) besides. */
HK_NOINSTR static void start_control(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	pthread_t th;
	sigset_t all, old;
	char name[64];

	snprintf(name, sizeof(name), "hookit-%d.sock", (int)hk_pid);
	snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", hk_dirfd, name);
	if (unlinkat(hk_dirfd, name, 0) != 0 && errno != ENOENT)
		return;
	hk_ctl_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (hk_ctl_fd < 0)
		return;
	if (bind(hk_ctl_fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		fprintf(stderr, "hookit: cannot create the control socket %s/%s: %s (rtdriver cannot reach this process)\n",
			hk_dir, name, strerror(errno));
		goto fail;
	}
	if (fchmodat(hk_dirfd, name, 0600, 0) != 0 || listen(hk_ctl_fd, 4) != 0) {
		unlinkat(hk_dirfd, name, 0);
		goto fail;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&th, NULL, control_loop, NULL) == 0)
		pthread_detach(th);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return;
fail:
	close(hk_ctl_fd);
	hk_ctl_fd = -1;
}

HK_NOINSTR static void hk_exit(void)
{
	if (!hk_ready || __atomic_exchange_n(&hk_exited, 1, __ATOMIC_SEQ_CST))
		return;
	if (hk_self) /* (a thread that recorded nothing gets no file for it) */
		hk_mark(HK_MARK_EXIT);
	hk_on = 0;
	copy_maps();
	finish_files();
	if (hk_ctl_fd >= 0) {
		char p[4200];

		snprintf(p, sizeof(p), "hookit-%d.sock", (int)hk_pid);
		unlinkat(hk_dirfd, p, 0);
	}
	hk_ready = 0; /* events after the shutdown are not recorded (nor dropped) */
}

/* ---- start-up ---- */

static pthread_mutex_t hk_init_mu = PTHREAD_MUTEX_INITIALIZER;
static char hk_err[4400];
static int hk_names_fd = -1;

/* Open hk_dir (created 0700 if missing) and check it is the user's own
 * and not writable by group or others: the files go there by name, and
 * a directory another user can write is one where they can plant links.
 * 0 or -1 with hk_err set. */
HK_NOINSTR static int hk_open_dir(void)
{
	struct stat st;

	if (mkdir(hk_dir, 0700) != 0 && errno != EEXIST) {
		snprintf(hk_err, sizeof(hk_err), "cannot create %s: %s (set HOOKIT_DIR or dir= to a writable directory)",
			 hk_dir, strerror(errno));
		return -1;
	}
	hk_dirfd = open(hk_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (hk_dirfd < 0 || fstat(hk_dirfd, &st) != 0) {
		snprintf(hk_err, sizeof(hk_err), "cannot open the directory %s: %s (set HOOKIT_DIR or dir= to a directory of yours)",
			 hk_dir, strerror(errno));
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		snprintf(hk_err, sizeof(hk_err), "%s belongs to uid %u, not to you (uid %u): give a directory of your own (HOOKIT_DIR, dir=, run.hookit -o)",
			 hk_dir, (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(hk_err, sizeof(hk_err), "%s is writable by %s (mode %03o): others could plant links there; chmod go-w it or give a new directory",
			 hk_dir, st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	return 0;
fail:
	if (hk_dirfd >= 0)
		close(hk_dirfd);
	hk_dirfd = -1;
	return -1;
}

/* The TSC's rate against CLOCK_MONOTONIC, over 5 ms (each end the
 * tightest of 5 reads), into hk_mult32, hk_tsc0, hk_mono0: 0, or -1 where
 * the kernel's clock is not the TSC (the scaled TSC would not follow it). */
HK_NOINSTR static void tsc_pair(uint64_t *tsc, uint64_t *mono)
{
	uint64_t best = ~0ULL;

	*tsc = *mono = 0;
	for (int i = 0; i < 5; i++) {
		uint64_t a = __rdtsc(), m = mono_ns(), b = __rdtsc();

		if (b - a < best)
			best = b - a, *tsc = a + (b - a) / 2, *mono = m;
	}
}

HK_NOINSTR static int tsc_rate(void)
{
	char cs[32] = "";
	uint64_t t0 = 0, m0 = 0, t1 = 0, m1 = 0;
	int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = read(fd, cs, sizeof(cs) - 1);

		cs[n > 0 ? n : 0] = 0;
		close(fd);
	}
	if (strcmp(cs, "tsc\n") != 0)
		return -1;
	tsc_pair(&t0, &m0);
	do
		tsc_pair(&t1, &m1);
	while (m1 - m0 < 5000000);
	if (t1 <= t0)
		return -1;
	hk_mult32 = (uint64_t)(((unsigned __int128)(m1 - m0) << 32) / (t1 - t0));
	hk_tsc0 = t0;
	hk_mono0 = m0 + HK_FAST_MARGIN;
	return 0;
}

/* Whether read_ptt_fast agrees with libperfutil's read on this thread
 * (within 50 us, less the margin). */
HK_NOINSTR static int fast_read_ok(void)
{
	struct PttThreadState *s = PttSelf;

	if (PttThreadInit() != 0 || s == NULL || (s = PttSelf)->status != 0 || !s->c[0].data)
		return 0;
	for (int i = 0; i < 5; i++) {
		uint64_t a = s->read1(s), f = read_ptt_fast() - HK_FAST_MARGIN, b = s->read1(s);

		if (f + 50000 >= a && f <= b + 50000)
			return 1;
	}
	return 0;
}

/* Start the runtime with dir, metric, start ("on"/"off"); 0 or -1 with
 * hk_err set. Called once, under hk_init_mu. */
HK_NOINSTR static int hk_start(const char *dir, const char *metric, const char *start)
{
	const char *backend = "rdtsc";
	char path[4200];

	if (dir && *dir)
		snprintf(hk_dir, sizeof(hk_dir), "%s", dir);
	if (metric && *metric)
		snprintf(hk_metric, sizeof(hk_metric), "%s", metric);
	hk_pid = getpid();
	if (hk_open_dir() != 0)
		return -1;
	if (!strcmp(hk_metric, "rdtsc")) {
		hk_read = read_tsc;
		hk_read_kind = 1;
		if (tsc_rate() == 0)
			hk_ns_per_unit = (double)hk_mult32 / 4294967296.0;
	} else {
		/* tsc-user: tsc with the module's system-call figures taken
		 * off; tsc has them too where the module gives them (SYS). */
		hk_user = !strcmp(hk_metric, "tsc-user");
		const char *ms[1] = {hk_user ? "tsc" : hk_metric};
		int want_sys = hk_user || !strcmp(hk_metric, "tsc");
		int rc = PttInitFlags(ms, 1, want_sys ? PTT_SYSCALL_TIMES : 0);

		if (rc && want_sys && !hk_user)
			rc = PttInit(ms, 1); /* an older module: tsc without SYS */
		else
			hk_sys = want_sys && !rc;
		if (rc) {
			snprintf(hk_err, sizeof(hk_err), "metric %s: %s (try metric task-clock or rdtsc)", hk_metric,
				 PttStrerror(rc));
			return -1;
		}
		backend = PttBackend();
		hk_read = read_ptt;
		hk_dsin = backend && !strcmp(backend, "kmod");
		hk_two_reads = hk_dsin;
		hk_sched_kind = hk_dsin ? 2 : 1;
		if (!strcmp(hk_metric, "task-clock") || !strcmp(hk_metric, "cpu-clock"))
			hk_ns_per_unit = 1;
		if (!hk_dsin && hk_ns_per_unit == 1 && tsc_rate() == 0 && fast_read_ok()) {
			hk_read = read_ptt_fast;
			hk_read_kind = 2;
			hk_sched_kind = 3;
		}
		if (hk_dsin && !strcmp(ms[0], "tsc") && tsc_rate() == 0)
			hk_ns_per_unit = (double)hk_mult32 / 4294967296.0;
		if (hk_sys) {
			hk_sys_glue = calibrate_sys();
			hk_fault_glue = calibrate_fault();
			hk_resume_glue = calibrate_resume();
		}
		if (hk_user)
			hk_read = read_ptt_user;
	}
	snprintf(path, sizeof(path), "hookit-%d.names", (int)hk_pid);
	hk_names_fd = hk_create(path, O_WRONLY | O_APPEND);
	snprintf(path, sizeof(path), "hookit-%d.threads", (int)hk_pid);
	hk_threads_fd = hk_create(path, O_WRONLY | O_APPEND);
	hk_membarrier_private = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
	hk_ready = 1;
	calibrate(&hk_cal, hk_calib_calls, hk_calib_plain_calls);
	calibrate(&hk_cal_api, hk_calib_api_calls, hk_calib_plain_api_calls);
	hk_backend = backend ? backend : "?";
	write_info(&hk_cal, &hk_cal_api, hk_backend);
	copy_maps();
	pthread_atfork(NULL, NULL, after_fork_child);
	atexit(hk_exit);
	start_control();
	if (start && !strcmp(start, "off"))
		hk_on = 0;
	return 0;
}

/* The HOOKIT_* variables, taken out of the environment at load: the
 * program sees the environment it would have had without the runtime
 * (its getenv scans, its children: a program it executes is not traced). */
static char hk_env_dir[4096], hk_env_metric[64], hk_env_start[8];
static int hk_env_has_dir;

HK_NOINSTR static const char *env_or_null(const char *v, int has)
{
	return has ? v : NULL;
}

HK_NOINSTR static void take_env(void)
{
	static const struct {
		const char *name;
		char *buf;
		size_t n;
	} vars[] = {
		{"HOOKIT_DIR", hk_env_dir, sizeof(hk_env_dir)},
		{"HOOKIT_METRIC", hk_env_metric, sizeof(hk_env_metric)},
		{"HOOKIT_START", hk_env_start, sizeof(hk_env_start)},
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i].name);

		if (!v)
			continue;
		snprintf(vars[i].buf, vars[i].n, "%s", v);
		if (i == 0)
			hk_env_has_dir = 1;
		unsetenv(vars[i].name);
	}
}

/* This library's entry in LD_PRELOAD (run.hookit puts it there), taken
 * out in place (a shorter value in the same string: no allocation); the
 * variable goes when nothing else is preloaded. */
extern char **environ;

HK_NOINSTR static int is_self(const char *p, size_t n)
{
	static const char me[] = "libhookit.so";
	size_t m = sizeof(me) - 1;

	return n >= m && !memcmp(p + n - m, me, m) && (n == m || p[n - m - 1] == '/');
}

HK_NOINSTR static void take_preload(void)
{
	for (char **e = environ; e && *e; e++) {
		char *v, *w, *r;

		if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
			continue;
		v = *e + 11;
		w = v;
		for (r = v; *r;) {
			size_t n = strcspn(r, ": ");

			if (n && !is_self(r, n)) {
				if (w != v)
					*w++ = ':';
				memmove(w, r, n);
				w += n;
			}
			r += n;
			r += *r != 0;
		}
		*w = 0;
		if (!*v)
			unsetenv("LD_PRELOAD");
		return;
	}
}

/* Preloaded (or linked) with HOOKIT_DIR set: start from the environment.
 * Without it the library waits for hookit_init (an agent's options). */
HK_NOINSTR __attribute__((constructor)) static void hk_init(void)
{
	take_env();
	if (!hk_env_has_dir)
		return;
	take_preload();
	pthread_mutex_lock(&hk_init_mu);
	if (!hk_ready && hk_start(hk_env_dir, hk_env_metric, hk_env_start) != 0)
		fprintf(stderr, "hookit: %s\n", hk_err);
	pthread_mutex_unlock(&hk_init_mu);
}

HK_NOINSTR __attribute__((destructor)) static void hk_fini(void)
{
	hk_exit();
	hk_ready = 0;
}

/* ---- the public API (hookit_api.h) ---- */

/* The value of key in a "k=v,k=v" list (into out), or def. */
HK_NOINSTR static const char *opt(const char *opts, const char *key, char *out, size_t n, const char *def)
{
	size_t kl = strlen(key);

	for (const char *p = opts; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l > kl && !strncmp(p, key, kl) && p[kl] == '=') {
			size_t vl = l - kl - 1;

			if (vl >= n)
				vl = n - 1;
			memcpy(out, p + kl + 1, vl);
			out[vl] = 0;
			return out;
		}
		p = e ? e + 1 : NULL;
	}
	return def;
}

HK_VIS HK_NOINSTR int hookit_init(const char *options)
{
	char dir[4096], metric[64], start[8];
	int rc = 0;

	pthread_mutex_lock(&hk_init_mu);
	hk_err[0] = 0;
	for (const char *p = options; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (!(l > 4 && !strncmp(p, "dir=", 4)) && !(l > 7 && !strncmp(p, "metric=", 7)) &&
		    !(l > 6 && !strncmp(p, "start=", 6))) {
			snprintf(hk_err, sizeof(hk_err), "unknown option '%.*s' (dir=PATH, metric=NAME, start=on|off)",
				 (int)(l > 200 ? 200 : l), p);
			rc = -1;
			break;
		}
		p = e ? e + 1 : NULL;
	}
	if (!rc && hk_exited) {
		snprintf(hk_err, sizeof(hk_err), "hookit was shut down: it cannot start again in this process");
		rc = -1;
	}
	if (!rc && !hk_ready)
		rc = hk_start(opt(options, "dir", dir, sizeof(dir), env_or_null(hk_env_dir, hk_env_has_dir)),
			      opt(options, "metric", metric, sizeof(metric), env_or_null(hk_env_metric, *hk_env_metric)),
			      opt(options, "start", start, sizeof(start), env_or_null(hk_env_start, *hk_env_start)));
	pthread_mutex_unlock(&hk_init_mu);
	return rc;
}

HK_VIS HK_NOINSTR const char *hookit_error(void)
{
	return hk_err;
}

HK_VIS HK_NOINSTR int hookit_name(uint64_t id, const char *name)
{
	char small[4096], *line = small;
	size_t len, cap;
	int n, rc;

	if (hk_names_fd < 0 || !name)
		return -1;
	/* the whole name, however long (a Java signature may run to 64 KB):
	 * a cut could make two names one */
	len = strlen(name);
	cap = len + 32;
	if (cap > sizeof(small) && !(line = hk_malloc(cap)))
		return -1;
	if (cap <= sizeof(small))
		cap = sizeof(small);
	n = snprintf(line, cap, "%llx %s", (unsigned long long)(id & HK_FN_MASK), name);
	if (n < 0 || (size_t)n >= cap - 1) {
		if (line != small)
			hk_free(line);
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	/* One write of a whole line (O_APPEND): lines from threads never mix. */
	rc = write(hk_names_fd, line, (size_t)n) == n ? 0 : -1;
	if (line != small)
		hk_free(line);
	return rc;
}

HK_VIS HK_NOINSTR void hookit_thread_end(void)
{
	struct hk_thread *t = hk_self;

	if (!t)
		return;
	pthread_mutex_lock(&hk_mu);
	for (struct hk_thread **pp = &hk_threads; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	pthread_mutex_unlock(&hk_mu);
	hk_self = NULL;
	hk_noopen = 1; /* this thread records nothing more */
	hk_ended++;	/* (a thread attached later, hookit_thread_start, gets a file of its own) */
	if (t->busy != 2) { /* not finished by a shutdown already */
		if (t->pos + 4 <= t->cap)
			hk_put_end(t);
		if (flush_buffer(t) != 0)
			perror("hookit: writing a thread file");
	}
	thread_close(t);
	hk_free(t);
}

HK_VIS HK_NOINSTR void hookit_thread_start(void)
{
	if (!hk_self && hk_ended)
		hk_noopen = 0;
}

HK_VIS HK_NOINSTR void hookit_shutdown(void)
{
	hk_exit();
}

HK_VIS HK_NOINSTR void hookit_start(void)
{
	set_on(1);
}

HK_VIS HK_NOINSTR void hookit_end(void)
{
	set_on(0);
}

HK_VIS HK_NOINSTR void hookit_flush(void)
{
	flush_files();
}

HK_VIS HK_NOINSTR void hookit_on_flush(void (*fn)(void))
{
	__atomic_store_n(&hk_flush_fn, fn, __ATOMIC_RELEASE);
}

HK_VIS HK_NOINSTR uint64_t hookit_last_tsc(void)
{
	return hk_read_kind == 2 ? hk_last_tsc : 0;
}

HK_VIS HK_NOINSTR uint64_t hookit_dropped(void)
{
	return hk_dropped;
}
