/*
 * JProf's records into the trace facility (docs/jprof.md): JIT code loads
 * and unloads, method names, method entry/exit.  With the pitrace module
 * (/dev/pitrace exists, or $PERFINSP_BACKEND=kmod; not with =daemon)
 * JIT_LOAD / JIT_UNLOAD / JIT_METHOD are one PITRACE_IOC_JIT each and a
 * method entry/exit one PITRACE_IOC_METHOD, written at once by the calling
 * thread (the module takes the pid, tid and time).  Otherwise through
 * pitraced's "jprof" op, with
 * libperfutil's agent client (libperfutil/c/agentconn.c, compiled in):
 * records are batched on one connection, each with its own time
 * (CLOCK_MONOTONIC, the facility's clock) and CPU.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "agentconn.h"
#include "../../../kmod/uapi/pitrace.h"

#include "jittrace.h"

/*
 * The daemon path. Records are the trace's own binary layouts
 * (libperfutil/trace, kmod/uapi/pitrace.h: the 12-byte header, the fixed
 * fields, a name), never text: each thread appends them to a chunk of its
 * own (a TIME_HIGH record first and wherever the time's high half changes,
 * so that a chunk is a stream trace.Reader reads) without a lock or an
 * atomic read-modify-write: it writes past the chunk's published length,
 * then publishes the new length with the chunk's record count (one
 * release store of both), so the sender counts what it sends without
 * reading the records. A full chunk goes to the
 * send queue and the thread takes an empty one. The flusher thread
 * (jt_flusher) sends queued chunks at once, and every 20 ms or on a kick (a
 * compiled method's code is about to run) the published bytes of the
 * threads' current chunks too, which their threads go on filling: one
 * request per piece, a binary frame of op "jprof" holding the chunk's CPU
 * and its bytes as they are (daemonproto.JProfFrameHead), a piece that
 * does not begin the chunk preceded by the TIME_HIGH in force there. What
 * of a chunk was sent (and the TIME_HIGH there) only the sender, under
 * jt_send_lock, reads and writes; a chunk returns to the pool only there,
 * once queued (its thread done with it) and sent. Only when every chunk is
 * in use does an appending thread send the queue itself.
 */
#define JT_CHUNK	(256 * 1024)	/* one frame: a quarter of daemonproto.MaxRequest */
#define JT_CHUNKS	256		/* 64 MB of chunks at most, touched as written */
#define JT_NAME_MAX	1024		/* pitraced keeps 1024 bytes of a name (jt_fit: fewer) */

struct jt_chunk {
	struct jt_chunk *next;
	uint64_t pub;			/* published: records << 32 | bytes (the owner's release store) */
	uint32_t high;			/* the owner's: the time-high in force at len */
	int has_high;
	int cpu;			/* the CPU whose buffer takes the chunk */
	uint32_t sent;			/* the sender's: bytes sent */
	uint32_t sent_high;		/* the sender's: the time-high in force at sent */
	uint32_t sent_nrec;		/* the sender's: records sent (of pub's count) */
	uint32_t high_off;		/* the last TIME_HIGH's offset (the owner's; relaxed) */
	uint64_t anchor_tsc, anchor_ns;	/* the owner's: jt_time's last pair (0: none) */
	uint64_t last_ns;		/* the owner's: the last record's time */
	unsigned char data[JT_CHUNK];
};

struct jt_slot {
	int free;			/* its thread ended: another may take it */
	struct jt_chunk *cur;		/* set by the owner only (release) */
	struct jt_slot *next;		/* all slots; never freed */
};

static pthread_mutex_t jt_lock = PTHREAD_MUTEX_INITIALIZER;	/* below */
static pthread_cond_t jt_cond = PTHREAD_COND_INITIALIZER;
static struct jt_chunk *jt_queue, **jt_qtail = &jt_queue;	/* full chunks */
static struct jt_chunk *jt_pool;				/* empty chunks */
static int jt_nchunks;
static int jt_kicked;		/* send the partial chunks now */
static struct jt_slot *jt_slots;	/* pushed atomically */
static pthread_key_t jt_key;
static pthread_once_t jt_key_once = PTHREAD_ONCE_INIT;
static __thread struct jt_slot *jt_my __attribute__((tls_model("initial-exec")));
static __thread int jt_ended __attribute__((tls_model("initial-exec")));	/* its slot went back */

static int jt_down;		/* the daemon refused or is absent: stop trying */
static unsigned long jt_dropped;	/* records not appended (atomic) */

static pthread_mutex_t jt_send_lock = PTHREAD_MUTEX_INITIALIZER;	/* below */
static int jt_fd = -1;
static unsigned long jt_sent, jt_failed;
static unsigned long long jt_send_ns;	/* time spent sending chunks */
static unsigned long long jt_pause_until;	/* tracing is off: send nothing until then */
static char jt_err[256];

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/*
 * A record's time: CLOCK_MONOTONIC (the facility's clock), read through
 * the TSC where the kernel's clock source is the TSC: a TSC read and a
 * multiplication instead of the vDSO's clock_gettime (more than twice as
 * long; with one per method event it was the agent's largest cost). Each
 * chunk keeps a pair (TSC, CLOCK_MONOTONIC) taken at most JT_ANCHOR_NS
 * before, and a record's time is the pair's plus the TSC's step times
 * jt_mult32 (ns per TSC cycle << 32), measured between the first pair
 * any thread took and the newest (the longer apart, the closer), once
 * JT_RATE_NS apart; until then, and where the clock source is another,
 * each record reads the clock. Within a chunk (one thread's records)
 * times never go back.
 */
#define JT_ANCHOR_NS	2000000ULL	/* a new pair every 2 ms */
#define JT_RATE_NS	10000000ULL	/* the rate from pairs 10 ms apart at least */

static int jt_tsc = -1;			/* the clock source is the TSC: 1, 0, unknown -1 */
static uint64_t jt_base_tsc, jt_base_ns;	/* the first pair (jt_base_lock; jt_base_ns also atomic) */
static uint64_t jt_mult32;		/* 0 until measured (atomic) */
static uint64_t jt_anchor_cyc;		/* JT_ANCHOR_NS in TSC cycles (atomic) */
static pthread_mutex_t jt_base_lock = PTHREAD_MUTEX_INITIALIZER;

static int jt_tsc_source(void)
{
	char cs[32] = "";
	int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t n = read(fd, cs, sizeof(cs) - 1);

		cs[n > 0 ? n : 0] = 0;
		close(fd);
	}
	return !strcmp(cs, "tsc\n");
}

/* A pair (TSC, CLOCK_MONOTONIC) read together: the closest of three. */
static void jt_pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = ~0ULL;

	for (int i = 0; i < 3; i++) {
		uint64_t a = __rdtsc(), m = now_ns(), b = __rdtsc();

		if (b - a < best) {
			best = b - a;
			*tsc = a + (b - a) / 2;
			*ns = m;
		}
	}
}

/* A new pair for c: also the rate's newest, once far enough from the first. */
static uint64_t jt_anchor(struct jt_chunk *c)
{
	uint64_t tsc = 0, ns = 0;

	if (__atomic_load_n(&jt_tsc, __ATOMIC_RELAXED) < 0)
		__atomic_store_n(&jt_tsc, jt_tsc_source(), __ATOMIC_RELAXED);
	if (!__atomic_load_n(&jt_tsc, __ATOMIC_RELAXED))
		return now_ns();
	jt_pair(&tsc, &ns);
	c->anchor_tsc = tsc;
	c->anchor_ns = ns;
	pthread_mutex_lock(&jt_base_lock);
	if (!jt_base_ns) {
		jt_base_tsc = tsc;
		__atomic_store_n(&jt_base_ns, ns, __ATOMIC_RELAXED);	/* read unlocked by jt_time */
	} else if (ns - jt_base_ns >= JT_RATE_NS && tsc > jt_base_tsc) {
		uint64_t m = (uint64_t)(((unsigned __int128)(ns - jt_base_ns) << 32) / (tsc - jt_base_tsc));

		if (m) {
			__atomic_store_n(&jt_anchor_cyc, (JT_ANCHOR_NS << 32) / m, __ATOMIC_RELAXED);
			__atomic_store_n(&jt_mult32, m, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&jt_base_lock);
	return ns;
}

/* The time of c's next record (see above), at TSC value tsc (0: now). */
static uint64_t jt_time(struct jt_chunk *c, uint64_t tsc)
{
	uint64_t m = __atomic_load_n(&jt_mult32, __ATOMIC_RELAXED), t;

	if (m && c->anchor_ns) {
		int64_t d = (int64_t)((tsc ? tsc : __rdtsc()) - c->anchor_tsc);

		if (d < 0)	/* a value read just before the pair */
			d = 0;
		if ((uint64_t)d < __atomic_load_n(&jt_anchor_cyc, __ATOMIC_RELAXED))
			t = c->anchor_ns + (uint64_t)(((unsigned __int128)d * m) >> 32);
		else
			t = jt_anchor(c);
	} else if (!m && __atomic_load_n(&jt_base_ns, __ATOMIC_RELAXED) &&
		   (t = now_ns()) - __atomic_load_n(&jt_base_ns, __ATOMIC_RELAXED) < JT_RATE_NS) {
		/* no rate yet: the clock (t) */
	} else {
		t = jt_anchor(c);
		if (!__atomic_load_n(&jt_mult32, __ATOMIC_RELAXED))
			c->anchor_ns = 0;	/* still none: the clock again next time */
	}
	if (t < c->last_ns)
		t = c->last_ns;
	c->last_ns = t;
	return t;
}

/* The process (the daemon takes it from the connection, the module from the caller). */
static uint32_t jt_pid(void)
{
	static uint32_t pid;

	if (!pid)
		pid = (uint32_t)getpid();
	return pid;
}

struct jt_time_high {
	struct pitrace_rec_hdr h;
	struct pitrace_rec_time_high v;
} PITRACE_PACKED;

static void jt_time_high(struct jt_time_high *th, uint32_t high)
{
	memset(th, 0, sizeof(*th));
	th->h.type_len = PITRACE_TYPELEN(PITRACE_LAYOUT_FIXED, sizeof(*th));
	th->h.major = PITRACE_MAJOR_SYS;
	th->h.minor = PITRACE_SYS_TIME_HIGH;
	th->v.high = high;
}

/*
 * The records of data[0, n) (the chunk's own, whole records), counted;
 * *high becomes the last TIME_HIGH among them.
 */
static unsigned long jt_scan(const unsigned char *data, uint32_t n, uint32_t *high)
{
	unsigned long nrec = 0;
	uint32_t off = 0;

	while (off + sizeof(struct pitrace_rec_hdr) <= n) {
		struct pitrace_rec_hdr h;
		uint32_t size;

		memcpy(&h, data + off, sizeof(h));
		size = (uint32_t)(h.type_len & 0xfff) << 2;
		if (size < sizeof(h))
			break;		/* not ours: cannot happen */
		if (h.major == PITRACE_MAJOR_SYS && h.minor == PITRACE_SYS_TIME_HIGH) {
			struct jt_time_high th;

			memcpy(&th, data + off, sizeof(th));
			*high = th.v.high;
		} else {
			nrec++;
		}
		off += size;
	}
	return nrec;
}

/*
 * The TIME_HIGH in force at the end of c's published bytes [from, len):
 * the owner's last TIME_HIGH (whose offset it stores before publishing
 * the length that covers it) when that lies before len, else (a newer
 * one came since len was read) found by reading the records.
 */
static uint32_t jt_high_at(struct jt_chunk *c, uint32_t from, uint32_t len)
{
	uint32_t off = __atomic_load_n(&c->high_off, __ATOMIC_RELAXED), high = c->sent_high;

	if (off < len) {
		struct jt_time_high th;

		memcpy(&th, c->data + off, sizeof(th));
		return th.v.high;
	}
	jt_scan(c->data + from, len - from, &high);
	return high;
}

/* Sends what of c its owner published and was not sent yet; jt_send_lock held. */
static void jt_send_piece(struct jt_chunk *c, unsigned long long t0)
{
	uint64_t pub = __atomic_load_n(&c->pub, __ATOMIC_ACQUIRE);
	uint32_t len = (uint32_t)pub, from = c->sent, high;
	unsigned long nrec = (uint32_t)(pub >> 32) - c->sent_nrec;
	int32_t cpu = c->cpu;
	struct jt_time_high th;
	struct iovec iov[3];
	int n = 0;

	if (len <= from)
		return;
	jt_time_high(&th, c->sent_high);
	iov[n].iov_base = &cpu;
	iov[n++].iov_len = sizeof(cpu);
	if (from > 0) {		/* the TIME_HIGH in force at from */
		iov[n].iov_base = &th;
		iov[n++].iov_len = sizeof(th);
	}
	iov[n].iov_base = c->data + from;
	iov[n++].iov_len = len - from;
	high = jt_high_at(c, from, len);
	c->sent = len;
	c->sent_nrec = (uint32_t)(pub >> 32);
	c->sent_high = high;
	if (t0 < jt_pause_until) {	/* tracing is off: not sent, lost */
		jt_failed += nrec;
		return;
	}
	if (!__atomic_load_n(&jt_down, __ATOMIC_RELAXED) && jt_fd < 0)
		jt_fd = pu_agent_dial(jt_err, sizeof(jt_err));
	if (jt_fd < 0 || pu_agent_call_frame(jt_fd, "jprof", iov, n, jt_err, sizeof(jt_err)) < 0) {
		jt_failed += nrec;
		if (jt_fd >= 0)
			close(jt_fd);
		jt_fd = -1;
		if (!strstr(jt_err, "not on"))
			__atomic_store_n(&jt_down, 1, __ATOMIC_RELAXED);
		else	/* ask again in a second (tracing may be turned on) */
			jt_pause_until = now_ns() + 1000000000ULL;
	} else {
		jt_sent += nrec;
	}
}

/*
 * One round of sending (jt_send_lock held): the queued chunks, then with
 * partial what the threads published of their current chunks. A thread's
 * records go in the order written: its queued chunks before its current
 * one, a chunk's pieces in order.
 */
static void jt_send(int partial)
{
	unsigned long long t0 = now_ns();
	struct jt_chunk *list, *c, *next;
	struct jt_slot *s;

	pthread_mutex_lock(&jt_lock);
	list = jt_queue;
	jt_queue = NULL;
	jt_qtail = &jt_queue;
	pthread_mutex_unlock(&jt_lock);
	for (c = list; c; c = c->next)
		jt_send_piece(c, t0);
	if (list) {
		pthread_mutex_lock(&jt_lock);
		for (c = list; c; c = next) {
			next = c->next;
			c->next = jt_pool;
			jt_pool = c;
		}
		pthread_mutex_unlock(&jt_lock);
	}
	for (s = partial ? __atomic_load_n(&jt_slots, __ATOMIC_ACQUIRE) : NULL; s; s = s->next) {
		/*
		 * Pairs with the owner's release store of cur: the chunk's
		 * reset (pub, sent) is seen. A chunk queued since stays out of
		 * the pool until a later round (this lock).
		 */
		c = __atomic_load_n(&s->cur, __ATOMIC_ACQUIRE);
		if (c)
			jt_send_piece(c, t0);
	}
	jt_send_ns += now_ns() - t0;
}

/* Sends every record appended so far. */
void jt_flush(void)
{
	pthread_mutex_lock(&jt_send_lock);
	jt_send(1);
	pthread_mutex_unlock(&jt_send_lock);
}

void jt_resume(void)
{
	pthread_mutex_lock(&jt_send_lock);
	__atomic_store_n(&jt_down, 0, __ATOMIC_RELAXED);
	jt_pause_until = 0;
	jt_err[0] = 0;
	pthread_mutex_unlock(&jt_send_lock);
}

void *jt_flusher(void *stop)
{
	while (!*(volatile int *)stop) {
		struct timespec ts;
		int partial;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&jt_lock);
		if (!jt_queue && !jt_kicked)
			partial = pthread_cond_timedwait(&jt_cond, &jt_lock, &ts) != 0;
		else
			partial = 0;
		partial |= jt_kicked;
		jt_kicked = 0;
		pthread_mutex_unlock(&jt_lock);
		pthread_mutex_lock(&jt_send_lock);
		jt_send(partial);
		pthread_mutex_unlock(&jt_send_lock);
	}
	return NULL;
}

/* An empty chunk: from the pool, new, or (all in use) after sending the queue. */
static struct jt_chunk *jt_chunk_get(void)
{
	struct jt_chunk *c;

	for (;;) {
		pthread_mutex_lock(&jt_lock);
		c = jt_pool;
		if (c)
			jt_pool = c->next;
		else if (jt_nchunks < JT_CHUNKS && (c = malloc(sizeof(*c))) != NULL)
			jt_nchunks++;
		pthread_mutex_unlock(&jt_lock);
		if (c)
			break;
		pthread_mutex_lock(&jt_send_lock);	/* the flusher is behind */
		jt_send(0);
		pthread_mutex_unlock(&jt_send_lock);
	}
	c->next = NULL;
	c->pub = 0;
	c->sent = c->sent_high = c->sent_nrec = 0;
	c->has_high = 0;
	c->anchor_tsc = c->anchor_ns = c->last_ns = 0;
	c->high_off = 0;
	c->cpu = sched_getcpu();
	return c;
}

/* c's owner is done with it: to the send queue (which returns it to the pool). */
static void jt_queue_chunk(struct jt_chunk *c)
{
	c->next = NULL;
	pthread_mutex_lock(&jt_lock);
	*jt_qtail = c;
	jt_qtail = &c->next;
	pthread_cond_signal(&jt_cond);
	pthread_mutex_unlock(&jt_lock);
}

/* A thread ends: its chunk goes to the queue, its slot to the next thread. */
static void jt_thread_end(void *p)
{
	struct jt_slot *s = p;
	struct jt_chunk *c = s->cur;

	__atomic_store_n(&s->cur, NULL, __ATOMIC_RELEASE);
	if (c)
		jt_queue_chunk(c);
	/* a record the thread writes from here on is dropped: the slot is another's */
	jt_my = NULL;
	jt_ended = 1;
	__atomic_store_n(&s->free, 1, __ATOMIC_RELEASE);
}

static void jt_key_make(void)
{
	pthread_key_create(&jt_key, jt_thread_end);
}

static struct jt_slot *jt_slot(void)
{
	struct jt_slot *s = jt_my;

	if (s)
		return s;
	if (jt_ended)
		return NULL;
	pthread_once(&jt_key_once, jt_key_make);
	for (s = __atomic_load_n(&jt_slots, __ATOMIC_ACQUIRE); s; s = s->next) {
		int one = 1;

		if (__atomic_load_n(&s->free, __ATOMIC_RELAXED) &&
		    __atomic_compare_exchange_n(&s->free, &one, 0, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			break;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		s->next = __atomic_load_n(&jt_slots, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(&jt_slots, &s->next, s, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			;
	}
	pthread_setspecific(jt_key, s);
	jt_my = s;
	return s;
}

/*
 * Appends one record of n bytes (header and fields in rec, the header's
 * type_len holding only the layout: its length and time are filled in
 * here) and its string (padded with NULs to 4 bytes).
 */
static inline __attribute__((always_inline)) void jt_append(void *rec, size_t n, const char *str, size_t slen,
						      uint64_t tsc)
{
	size_t size = n + (str ? (slen + 1 + 3) & ~(size_t)3 : 0);
	struct pitrace_rec_hdr h;
	unsigned long long t;
	struct jt_slot *s;
	struct jt_chunk *c;
	uint32_t high, len, time_lo;
	uint64_t pub;
	uint16_t type_len;

	if (__atomic_load_n(&jt_down, __ATOMIC_RELAXED) || !(s = jt_slot())) {
		__atomic_add_fetch(&jt_dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	c = s->cur;
	if (!c || (uint32_t)c->pub + size + sizeof(struct jt_time_high) > JT_CHUNK) {
		if (c) {
			__atomic_store_n(&s->cur, NULL, __ATOMIC_RELEASE);
			jt_queue_chunk(c);
		}
		c = jt_chunk_get();
		/* Pairs with the sender's acquire load: the reset chunk is seen. */
		__atomic_store_n(&s->cur, c, __ATOMIC_RELEASE);
	}
	t = jt_time(c, tsc);
	high = (uint32_t)(t >> 32);
	pub = c->pub;
	len = (uint32_t)pub;
	if (!c->has_high || c->high != high) {
		struct jt_time_high th;

		jt_time_high(&th, high);
		memcpy(c->data + len, &th, sizeof(th));
		/* before the length that covers it is published (below) */
		__atomic_store_n(&c->high_off, len, __ATOMIC_RELAXED);
		len += sizeof(th);
		c->high = high;
		c->has_high = 1;
	}
	/* The record as given, then its length and time over its header's
	 * (stored in place: a header built on the stack and copied had its
	 * 2-byte field read back as part of 8, a stalled store forward) */
	memcpy(&h, rec, sizeof(h));
	memcpy(c->data + len, rec, n);
	type_len = PITRACE_TYPELEN(h.type_len, size);	/* type_len held the layout */
	time_lo = (uint32_t)t;
	memcpy(c->data + len + offsetof(struct pitrace_rec_hdr, type_len), &type_len, sizeof(type_len));
	memcpy(c->data + len + offsetof(struct pitrace_rec_hdr, time_lo), &time_lo, sizeof(time_lo));
	if (str) {
		memcpy(c->data + len + n, str, slen);
		memset(c->data + len + n + slen, 0, size - n - slen);
	}
	/* Pairs with the sender's acquire load of len: the bytes (and
	 * high_off) are written. */
	__atomic_store_n(&c->pub, ((pub >> 32) + 1) << 32 | (len + (uint32_t)size), __ATOMIC_RELEASE);
}

/*
 * The module: -1 not decided yet, -2 not used (the daemon), else its fd.
 * Decided once; a module without PITRACE_IOC_JIT (ENOTTY) hands over to
 * the daemon.
 */
static int jt_kfd = -1;
static pthread_once_t jt_kfd_once = PTHREAD_ONCE_INIT;
static unsigned long jt_k_sent, jt_k_failed;	/* atomics */
static int jt_k_errno;				/* the last refusal */

static void jt_kfd_open(void)
{
	const char *b = getenv("PERFINSP_BACKEND");
	int fd;

	if (b && !strcmp(b, "daemon")) {
		jt_kfd = -2;
		return;
	}
	if (!(b && !strcmp(b, "kmod")) && access(PITRACE_DEVICE, F_OK) != 0) {
		jt_kfd = -2;
		return;
	}
	fd = open(PITRACE_DEVICE, O_RDWR | O_CLOEXEC);
	jt_kfd = fd >= 0 ? fd : -2;
	if (fd < 0)
		jt_k_errno = errno;
}

/* 1: written (or refused) by the module; 0: use the daemon. */
static int jt_kmod(unsigned minor, unsigned long long addr, unsigned long long size, const char *name)
{
	struct pitrace_jit_arg a;
	size_t n = name ? strnlen(name, PITRACE_JIT_NAME_MAX) : 0;
	int fd;

	pthread_once(&jt_kfd_once, jt_kfd_open);
	fd = __atomic_load_n(&jt_kfd, __ATOMIC_RELAXED);
	if (fd < 0)
		return 0;
	memset(&a, 0, sizeof(a));
	a.minor = minor;
	a.addr = addr;
	a.size = size;
	if (minor != PITRACE_JIT_UNLOAD) {
		if (!n) {
			name = "?";
			n = 1;
		}
		a.name = (unsigned long long)(uintptr_t)name;
		a.name_len = (unsigned)n;
	}
	if (ioctl(fd, PITRACE_IOC_JIT, &a) == 0) {
		__atomic_add_fetch(&jt_k_sent, 1, __ATOMIC_RELAXED);
		return 1;
	}
	if (errno == ENOTTY) {		/* an older module: the daemon then */
		__atomic_store_n(&jt_kfd, -2, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_store_n(&jt_k_errno, errno, __ATOMIC_RELAXED);
	__atomic_add_fetch(&jt_k_failed, 1, __ATOMIC_RELAXED);
	return 1;
}

/*
 * A name as the trace keeps it: whole when it fits a record
 * (PITRACE_JIT_NAME_MAX, the module's limit, the smaller of the two
 * routes'), else its first bytes (whole UTF-8 characters) then "#" and
 * the 64-bit FNV-1a hash of the whole name in hex: two long names that
 * share their beginning (overloads with long signatures) stay two.
 * buf holds PITRACE_JIT_NAME_MAX + 1 bytes.
 */
static const char *jt_fit(const char *name, char *buf)
{
	size_t n = strlen(name), keep = PITRACE_JIT_NAME_MAX - 17;
	uint64_t h = 0xcbf29ce484222325ULL;

	if (n <= PITRACE_JIT_NAME_MAX)
		return name;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)name[i]) * 0x100000001b3ULL;
	while (keep > 0 && ((unsigned char)name[keep] & 0xC0) == 0x80)
		keep--;
	snprintf(buf, PITRACE_JIT_NAME_MAX + 1, "%.*s#%016llx", (int)keep, name, (unsigned long long)h);
	return buf;
}

void jt_load(unsigned tid, unsigned long long addr, unsigned long long size, const char *name)
{
	char fit[PITRACE_JIT_NAME_MAX + 1];
	struct {
		struct pitrace_rec_hdr h;
		struct pitrace_rec_jit_load r;
	} PITRACE_PACKED rec = {
		{ PITRACE_LAYOUT_STRING, PITRACE_MAJOR_JITLOAD, PITRACE_JIT_LOAD, 0 },
		{ jt_pid(), tid, addr, size },
	};

	name = jt_fit(name ? name : "", fit);
	if (jt_kmod(PITRACE_JIT_LOAD, addr, size, name))
		return;
	name = name ? name : "";
	jt_append(&rec, sizeof(rec), name, strnlen(name, JT_NAME_MAX), 0);
}

void jt_kick(void)
{
	pthread_mutex_lock(&jt_lock);
	jt_kicked = 1;
	pthread_cond_signal(&jt_cond);
	pthread_mutex_unlock(&jt_lock);
}

void jt_unload(unsigned long long addr, unsigned long long size)
{
	struct {
		struct pitrace_rec_hdr h;
		struct pitrace_rec_jit_unload r;
	} PITRACE_PACKED rec = {
		{ PITRACE_LAYOUT_FIXED, PITRACE_MAJOR_JITLOAD, PITRACE_JIT_UNLOAD, 0 },
		{ jt_pid(), addr, size },
	};

	if (jt_kmod(PITRACE_JIT_UNLOAD, addr, size, NULL))
		return;
	jt_append(&rec, sizeof(rec), NULL, 0, 0);
}

void jt_method(unsigned long long id, const char *name)
{
	char fit[PITRACE_JIT_NAME_MAX + 1];
	struct {
		struct pitrace_rec_hdr h;
		struct pitrace_rec_jit_method r;
	} PITRACE_PACKED rec = {
		{ PITRACE_LAYOUT_STRING, PITRACE_MAJOR_JITLOAD, PITRACE_JIT_METHOD, 0 },
		{ jt_pid(), id },
	};

	name = jt_fit(name ? name : "", fit);
	if (jt_kmod(PITRACE_JIT_METHOD, 0, id, name))
		return;
	name = name ? name : "";
	jt_append(&rec, sizeof(rec), name, strnlen(name, JT_NAME_MAX), 0);
}

/*
 * Method events through the module: one PITRACE_IOC_METHOD each, stamped
 * by the module at the call (a batch would carry the agent's times, or
 * one time for all).  0 until a module without the ioctl answers ENOTTY:
 * then the daemon, as before.
 */
static int jt_kmeth_gone;

/* 1: written (or refused) by the module; 0: use the daemon. */
static int jt_kmod_event(unsigned major, unsigned minor, unsigned long long id)
{
	struct pitrace_method_arg a;
	int fd;

	pthread_once(&jt_kfd_once, jt_kfd_open);
	fd = __atomic_load_n(&jt_kfd, __ATOMIC_RELAXED);
	if (fd < 0 || __atomic_load_n(&jt_kmeth_gone, __ATOMIC_RELAXED))
		return 0;
	a.major = (__u16)major;
	a.reserved = 0;
	a.minor = minor;
	a.id = id;
	a.reserved2 = 0;
	if (ioctl(fd, PITRACE_IOC_METHOD, &a) == 0) {
		__atomic_add_fetch(&jt_k_sent, 1, __ATOMIC_RELAXED);
		return 1;
	}
	if (errno == ENOTTY) {		/* a module without METHOD */
		__atomic_store_n(&jt_kmeth_gone, 1, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_store_n(&jt_k_errno, errno, __ATOMIC_RELAXED);
	__atomic_add_fetch(&jt_k_failed, 1, __ATOMIC_RELAXED);
	return 1;
}

void jt_event(unsigned major, int exit, unsigned tid, unsigned long long id, unsigned long long tsc)
{
	unsigned minor = exit ? PITRACE_METHOD_EXIT : PITRACE_METHOD_ENTRY;
	struct {
		struct pitrace_rec_hdr h;
		struct pitrace_rec_method r;
	} PITRACE_PACKED rec = {
		{ PITRACE_LAYOUT_WORDS, (uint16_t)major, minor, 0 },
		{ jt_pid(), tid, (uint32_t)id, (uint32_t)(id >> 32) },
	};

	if (jt_kmod_event(major, minor, id))
		return;
	jt_append(&rec, sizeof(rec), NULL, 0, tsc);
}

void jt_stats(unsigned long *sent, unsigned long *failed, const char **err, unsigned long long *send_ns)
{
	pthread_mutex_lock(&jt_send_lock);
	*send_ns = jt_send_ns;
	*sent = jt_sent + __atomic_load_n(&jt_k_sent, __ATOMIC_RELAXED);
	*failed = jt_failed + __atomic_load_n(&jt_k_failed, __ATOMIC_RELAXED) +
		  __atomic_load_n(&jt_dropped, __ATOMIC_RELAXED);
	*err = jt_err;
	if (!jt_err[0] && __atomic_load_n(&jt_k_failed, __ATOMIC_RELAXED))
		snprintf(jt_err, sizeof(jt_err), "pitrace module: %s",
			 strerror(__atomic_load_n(&jt_k_errno, __ATOMIC_RELAXED)));
	pthread_mutex_unlock(&jt_send_lock);
}
