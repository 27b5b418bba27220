/*
 * JProf's records into the trace facility (docs/jprof.md): JIT code loads
 * and unloads, method names, through pitraced's "jprof" op. The daemon
 * client (dial(), call(): one JSON request per line on the control socket)
 * is libperfutil/c/itrace.c's, compiled in here so that there is one copy.
 * Records are batched (at most JT_BATCH per request) on one connection,
 * each with its own time (CLOCK_MONOTONIC, the facility's clock) and CPU.
 */
#include "../../../libperfutil/c/itrace.c"

#include <pthread.h>
#include <stdarg.h>

#include "jittrace.h"

#define JT_BATCH	64
#define JT_BUF		(JT_BATCH * 600 + 256)

static pthread_mutex_t jt_lock = PTHREAD_MUTEX_INITIALIZER;
static char jt_buf[JT_BUF];
static size_t jt_len;
static int jt_count;
static int jt_fd = -1;
static int jt_down;		/* the daemon refused or is absent: stop trying */
static unsigned long jt_sent, jt_failed;
static char jt_err[256];

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* Sends the batch; called with jt_lock held. */
static void jt_flush_locked(void)
{
	if (!jt_count)
		return;
	if (jt_len + 4 >= sizeof(jt_buf))
		jt_len = sizeof(jt_buf) - 4;
	memcpy(jt_buf + jt_len, "]}}\n", 5);
	if (!jt_down && jt_fd < 0)
		jt_fd = dial();
	if (jt_fd < 0 || call(jt_fd, jt_buf) < 0) {
		jt_failed += (unsigned long)jt_count;
		snprintf(jt_err, sizeof(jt_err), "%s", itrace_err);
		if (jt_fd >= 0)
			close(jt_fd);
		jt_fd = -1;
		if (!strstr(jt_err, "not on"))
			jt_down = 1;
	} else {
		jt_sent += (unsigned long)jt_count;
	}
	jt_count = 0;
	jt_len = 0;
}

void jt_flush(void)
{
	pthread_mutex_lock(&jt_lock);
	jt_flush_locked();
	pthread_mutex_unlock(&jt_lock);
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

static void jt_add(unsigned major, unsigned minor, const char *fmt, ...)
{
	char rec[600];
	va_list ap;
	int n;

	n = snprintf(rec, sizeof(rec), "{\"cpu\":%d,\"time\":%llu,\"major\":%u,\"minor\":%u,",
		     sched_getcpu(), now_ns(), major, minor);
	va_start(ap, fmt);
	n += vsnprintf(rec + n, sizeof(rec) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(rec) - 2)
		return;
	rec[n++] = '}';
	rec[n] = 0;
	pthread_mutex_lock(&jt_lock);
	if (jt_down) {
		jt_failed++;
		pthread_mutex_unlock(&jt_lock);
		return;
	}
	if (!jt_count)
		jt_len = (size_t)snprintf(jt_buf, sizeof(jt_buf), "{\"op\":\"jprof\",\"args\":{\"records\":[");
	else
		jt_buf[jt_len++] = ',';
	memcpy(jt_buf + jt_len, rec, (size_t)n + 1);
	jt_len += (size_t)n;
	if (++jt_count >= JT_BATCH)
		jt_flush_locked();
	pthread_mutex_unlock(&jt_lock);
}

void jt_load(unsigned tid, unsigned long long addr, unsigned long long size, const char *name)
{
	char e[512];

	esc(e, sizeof(e), name);
	jt_add(JT_MAJOR_JIT, JT_JIT_LOAD, "\"tid\":%u,\"addr\":%llu,\"size\":%llu,\"name\":\"%s\"", tid, addr, size, e);
}

void jt_unload(unsigned long long addr, unsigned long long size)
{
	jt_add(JT_MAJOR_JIT, JT_JIT_UNLOAD, "\"addr\":%llu,\"size\":%llu", addr, size);
}

void jt_method(unsigned long long id, const char *name)
{
	char e[512];

	esc(e, sizeof(e), name);
	jt_add(JT_MAJOR_JIT, JT_JIT_METHOD, "\"id\":%llu,\"name\":\"%s\"", id, e);
}

void jt_event(unsigned major, int exit, unsigned tid, unsigned long long id)
{
	jt_add(major, exit ? 0x80000010u : 0x10u, "\"tid\":%u,\"id\":%llu", tid, id);
}

void jt_stats(unsigned long *sent, unsigned long *failed, const char **err)
{
	pthread_mutex_lock(&jt_lock);
	*sent = jt_sent;
	*failed = jt_failed;
	*err = jt_err;
	pthread_mutex_unlock(&jt_lock);
}
