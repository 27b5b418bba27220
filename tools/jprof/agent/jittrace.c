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
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "agentconn.h"
#include "../../../kmod/uapi/pitrace.h"

#include "jittrace.h"

/*
 * The JVM's threads only append records to the pending buffer; the
 * flusher thread (jt_flusher) sends them, at most JT_SEND per request, when
 * JT_BATCH are pending or every 20 ms, so that no compiler or Java thread
 * waits for the daemon. Only when the pending buffer is full does the
 * appending thread send it itself.
 */
#define JT_BATCH	64
#define JT_SEND		256		/* <= daemonproto.JProfMaxRecords */
#define JT_MAXREC	8192
#define JT_CAP		(JT_MAXREC * 160)
#define JT_REC		600

static pthread_mutex_t jt_lock = PTHREAD_MUTEX_INITIALIZER;	/* pending */
static pthread_cond_t jt_cond = PTHREAD_COND_INITIALIZER;
static char jt_buf[JT_CAP];
static size_t jt_len;
static size_t jt_off[JT_MAXREC + 1];
static int jt_count;
static int jt_down;		/* the daemon refused or is absent: stop trying */
static int jt_kicked;		/* send now: a compiled method's code is in use */

static pthread_mutex_t jt_send_lock = PTHREAD_MUTEX_INITIALIZER;	/* below */
static char jt_out[JT_CAP];
static size_t jt_out_off[JT_MAXREC + 1];
static char jt_req[JT_SEND * JT_REC + 256];
static int jt_fd = -1;
static unsigned long jt_sent, jt_failed;
static unsigned long long jt_send_ns;	/* time spent sending batches */
static char jt_err[256];

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* Sends n records of jt_out (offsets jt_out_off); jt_send_lock held. */
static void jt_send(int n)
{
	unsigned long long t0 = now_ns();
	int i, k;

	for (i = 0; i < n; i += k) {
		size_t len;

		k = n - i < JT_SEND ? n - i : JT_SEND;
		len = (size_t)snprintf(jt_req, sizeof(jt_req), "{\"op\":\"jprof\",\"args\":{\"records\":[");
		memcpy(jt_req + len, jt_out + jt_out_off[i], jt_out_off[i + k] - jt_out_off[i]);
		len += jt_out_off[i + k] - jt_out_off[i];
		if (jt_req[len - 1] == ',')
			len--;
		memcpy(jt_req + len, "]}}\n", 5);
		if (!jt_down && jt_fd < 0)
			jt_fd = pu_agent_dial(jt_err, sizeof(jt_err));
		if (jt_fd < 0 || pu_agent_call(jt_fd, jt_req, jt_err, sizeof(jt_err)) < 0) {
			jt_failed += (unsigned long)k;
			if (jt_fd >= 0)
				close(jt_fd);
			jt_fd = -1;
			if (!strstr(jt_err, "not on"))
				__atomic_store_n(&jt_down, 1, __ATOMIC_RELAXED);
		} else {
			jt_sent += (unsigned long)k;
		}
	}
	jt_send_ns += now_ns() - t0;
}

/* Moves the pending records to jt_out and sends them. */
void jt_flush(void)
{
	int n;

	pthread_mutex_lock(&jt_send_lock);
	pthread_mutex_lock(&jt_lock);
	n = jt_count;
	memcpy(jt_out, jt_buf, jt_len);
	memcpy(jt_out_off, jt_off, sizeof(size_t) * ((size_t)n + 1));
	jt_count = 0;
	jt_len = 0;
	pthread_mutex_unlock(&jt_lock);
	if (n)
		jt_send(n);
	pthread_mutex_unlock(&jt_send_lock);
}

void *jt_flusher(void *stop)
{
	while (!*(volatile int *)stop) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&jt_lock);
		if (jt_count < JT_BATCH && !jt_kicked)
			pthread_cond_timedwait(&jt_cond, &jt_lock, &ts);
		jt_kicked = 0;
		pthread_mutex_unlock(&jt_lock);
		jt_flush();
	}
	return NULL;
}

/* JSON string escaping of a name into dst (always terminated). */
static void esc(char *dst, size_t n, const char *s)
{
	size_t o = 0;

	for (; s && *s && o + 7 < n; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			dst[o++] = '\\';
			dst[o++] = (char)c;
		} else if (c < 0x20) {
			o += (size_t)snprintf(dst + o, n - o, "\\u%04x", c);
		} else {
			dst[o++] = (char)c;
		}
	}
	dst[o] = 0;
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

static void jt_add(unsigned major, unsigned minor, const char *fmt, ...)
{
	char rec[JT_REC];
	va_list ap;
	int n, full;

	if (__atomic_load_n(&jt_down, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&jt_send_lock);
		jt_failed++;
		pthread_mutex_unlock(&jt_send_lock);
		return;
	}
	n = snprintf(rec, sizeof(rec), "{\"cpu\":%d,\"time\":%llu,\"major\":%u,\"minor\":%u,",
		     sched_getcpu(), now_ns(), major, minor);
	va_start(ap, fmt);
	n += vsnprintf(rec + n, sizeof(rec) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(rec) - 3)
		return;
	rec[n++] = '}';
	rec[n++] = ',';
	rec[n] = 0;
	for (;;) {
		pthread_mutex_lock(&jt_lock);
		full = jt_count >= JT_MAXREC || jt_len + (size_t)n > sizeof(jt_buf);
		if (!full) {
			memcpy(jt_buf + jt_len, rec, (size_t)n);
			jt_len += (size_t)n;
			jt_off[++jt_count] = jt_len;
			if (jt_count >= JT_BATCH)
				pthread_cond_signal(&jt_cond);
		}
		pthread_mutex_unlock(&jt_lock);
		if (!full)
			return;
		jt_flush();	/* the flusher is behind: send it ourselves */
	}
}

void jt_load(unsigned tid, unsigned long long addr, unsigned long long size, const char *name)
{
	char e[512];

	if (jt_kmod(PITRACE_JIT_LOAD, addr, size, name))
		return;
	esc(e, sizeof(e), name);
	jt_add(JT_MAJOR_JIT, JT_JIT_LOAD, "\"tid\":%u,\"addr\":%llu,\"size\":%llu,\"name\":\"%s\"", tid, addr, size, e);
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
	if (jt_kmod(PITRACE_JIT_UNLOAD, addr, size, NULL))
		return;
	jt_add(JT_MAJOR_JIT, JT_JIT_UNLOAD, "\"addr\":%llu,\"size\":%llu", addr, size);
}

void jt_method(unsigned long long id, const char *name)
{
	char e[512];

	if (jt_kmod(PITRACE_JIT_METHOD, 0, id, name))
		return;
	esc(e, sizeof(e), name);
	jt_add(JT_MAJOR_JIT, JT_JIT_METHOD, "\"id\":%llu,\"name\":\"%s\"", id, e);
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

void jt_event(unsigned major, int exit, unsigned tid, unsigned long long id)
{
	unsigned minor = exit ? PITRACE_METHOD_EXIT : PITRACE_METHOD_ENTRY;

	if (jt_kmod_event(major, minor, id))
		return;
	jt_add(major, minor, "\"tid\":%u,\"id\":%llu", tid, id);
}

void jt_stats(unsigned long *sent, unsigned long *failed, const char **err, unsigned long long *send_ns)
{
	pthread_mutex_lock(&jt_send_lock);
	*send_ns = jt_send_ns;
	*sent = jt_sent + __atomic_load_n(&jt_k_sent, __ATOMIC_RELAXED);
	*failed = jt_failed + __atomic_load_n(&jt_k_failed, __ATOMIC_RELAXED);
	*err = jt_err;
	if (!jt_err[0] && __atomic_load_n(&jt_k_failed, __ATOMIC_RELAXED))
		snprintf(jt_err, sizeof(jt_err), "pitrace module: %s",
			 strerror(__atomic_load_n(&jt_k_errno, __ATOMIC_RELAXED)));
	pthread_mutex_unlock(&jt_send_lock);
}
