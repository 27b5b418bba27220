/*
 * JProf's calltree mode (docs/jprof.md): JVMTI MethodEntry / MethodExit of
 * every Java thread recorded on the call-flow runtime (libhookit's
 * in-process API, hookit_api.h): per-thread metric reads, PI's 8 method
 * types × 3 transitions as the calibration key, names of the jmethodIDs in
 * the names file, rtdriver control. The reports are bin/hookit report's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hookit_api.h"
#include "jprof.h"

/*
 * Methods by jmethodID: looked up on every event without a lock (the id is
 * stored last, with release order), inserted under a mutex.
 */
#define M_SLOTS (1u << 18)
#define M_INCLUDED	0x100	/* events of this method are recorded */
#define M_TYPE_MASK	0xff

static struct method {
	uint64_t id;
	uint32_t info;		/* hookit type | M_INCLUDED */
} methods[M_SLOTS];
static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long m_count;

static char **includes, **excludes;
static int n_includes, n_excludes;
static int report_at_exit = 1;		/* report=off: leave the raw files */
static char report_dir[PATH_MAX] = ".";

extern char **environ;

static unsigned mslot(uint64_t id)
{
	return (unsigned)((id >> 3) * 0x9E3779B97F4A7C15ULL >> 46) & (M_SLOTS - 1);
}

static int m_find(uint64_t id, uint32_t *info)
{
	unsigned i, n;

	for (i = mslot(id), n = 0; n < M_SLOTS; i = (i + 1) & (M_SLOTS - 1), n++) {
		uint64_t v = __atomic_load_n(&methods[i].id, __ATOMIC_ACQUIRE);

		if (v == id) {
			*info = methods[i].info;
			return 1;
		}
		if (!v)
			return 0;
	}
	return 0;
}

static void m_insert(uint64_t id, uint32_t info)
{
	unsigned i, n;

	pthread_mutex_lock(&m_lock);
	for (i = mslot(id), n = 0; n < M_SLOTS; i = (i + 1) & (M_SLOTS - 1), n++) {
		uint64_t v = methods[i].id;

		if (v == id)
			break;
		if (!v) {
			if (m_count + 1 >= M_SLOTS * 3 / 4)
				break;	/* full: the method is looked up again each time */
			methods[i].info = info;
			__atomic_store_n(&methods[i].id, id, __ATOMIC_RELEASE);
			m_count++;
			break;
		}
	}
	pthread_mutex_unlock(&m_lock);
}

static int matches(char **pats, int n, const char *cls)
{
	for (int i = 0; i < n; i++)
		if (!fnmatch(pats[i], cls, 0))
			return 1;
	return 0;
}

/*
 * Each thread's own cache in front of methods[] (whose slots are spread
 * over 4 MB, a cache miss each): direct-mapped, M_CACHE words of
 * id << 16 | info, allocated at the thread's first event, freed at its
 * end. An id that does not fit 48 bits is not cached.
 */
#define M_CACHE 4096
static __thread uint64_t *m_cache __attribute__((tls_model("initial-exec")));

static uint32_t m_info_slow(jvmtiEnv *jvmti, jmethodID m);

static inline uint32_t m_info(jvmtiEnv *jvmti, jmethodID m)
{
	uint64_t id = (uint64_t)(uintptr_t)m, *c = m_cache, e;
	uint32_t info;

	if (__builtin_expect(c != NULL, 1) && ((e = c[(id >> 3) & (M_CACHE - 1)]) >> 16) == id)
		return (uint32_t)(e & 0xffff);
	info = m_info_slow(jvmti, m);
	if (!c && (c = calloc(M_CACHE, sizeof(*c))) != NULL)
		m_cache = c;
	if (c && id < (1ULL << 48) && info)
		c[(id >> 3) & (M_CACHE - 1)] = id << 16 | info;
	return info;
}

static void m_cache_free(void)
{
	free(m_cache);
	m_cache = NULL;
}

/* The method's type, name and selection, found once and kept. */
static uint32_t m_info_slow(jvmtiEnv *jvmti, jmethodID m)
{
	uint64_t id = (uint64_t)(uintptr_t)m;
	uint32_t info;
	jint mods = 0;
	char *name, *cls;
	unsigned type;
	const char *dot;

	if (m_find(id, &info))
		return info;
	name = jprof_method_name(m);
	if (!name)
		return 0;	/* no memory: not recorded, looked up again next time */
	/* the class: before the method's dot (a signature has none), dotted */
	dot = strchr(name, '(');
	for (dot = dot ? dot : name + strlen(name); dot > name && *dot != '.'; dot--)
		;
	cls = strndup(name, *dot == '.' ? (size_t)(dot - name) : strlen(name));
	if (!cls) {
		free(name);
		return 0;
	}
	for (char *p = cls; *p; p++)
		if (*p == '/')
			*p = '.';
	(*jvmti)->GetMethodModifiers(jvmti, m, &mods);
	if (mods & 0x0100)	/* ACC_NATIVE */
		type = mods & 0x0008 ? HOOKIT_TYPE_NATIVE_STATIC : HOOKIT_TYPE_NATIVE;
	else if (jprof_is_compiled(id))
		type = mods & 0x0008 ? HOOKIT_TYPE_JITTED_STATIC : HOOKIT_TYPE_JITTED;
	else
		type = mods & 0x0008 ? HOOKIT_TYPE_INTERPRETED_STATIC : HOOKIT_TYPE_INTERPRETED;
	info = type;
	if ((!n_includes || matches(includes, n_includes, cls)) && !matches(excludes, n_excludes, cls))
		info |= M_INCLUDED;
	if (info & M_INCLUDED) {
		hookit_name(id, name);
		jprof_trace_method(id, name);
	}
	free(cls);
	free(name);
	m_insert(id, info);
	return info;
}

static void JNICALL on_method_entry(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jmethodID m)
{
	uint32_t info = m_info(jvmti, m);

	(void)jni; (void)th;
	if (info & M_INCLUDED) {
		hookit_enter((uint64_t)(uintptr_t)m, info & M_TYPE_MASK);
		jprof_trace_event((uint64_t)(uintptr_t)m, info & M_TYPE_MASK, 0, hookit_last_tsc());
	}
}

static void JNICALL on_method_exit(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jmethodID m, jboolean by_exception, jvalue rv)
{
	uint32_t info = m_info(jvmti, m);

	(void)jni; (void)th; (void)rv;
	if (!(info & M_INCLUDED))
		return;
	if (by_exception)
		hookit_exception_exit((uint64_t)(uintptr_t)m, info & M_TYPE_MASK);
	else
		hookit_exit((uint64_t)(uintptr_t)m, info & M_TYPE_MASK);
	/* the trace's record after the call flow's, at the time it read */
	jprof_trace_event((uint64_t)(uintptr_t)m, info & M_TYPE_MASK, 1, hookit_last_tsc());
}

static void JNICALL on_thread_end(jvmtiEnv *jvmti, JNIEnv *jni, jthread th)
{
	(void)jvmti; (void)jni; (void)th;
	hookit_thread_end();
	m_cache_free();
}

/* A thread attached to an OS thread whose thread ended (DestroyJavaVM on
 * main's, a JNI detach and attach): recorded as a thread of its own. */
static void JNICALL on_thread_start(jvmtiEnv *jvmti, JNIEnv *jni, jthread th)
{
	(void)jvmti; (void)jni; (void)th;
	hookit_thread_start();
}

static int add_pattern(char ***list, int *n, const char *p)
{
	char **l = realloc(*list, sizeof(char *) * (size_t)(*n + 1));

	if (!l)
		return -1;
	*list = l;
	l[(*n)++] = strdup(p);
	return 0;
}

int calltree_option(const char *tok)
{
	if (!strcmp(tok, "report=off") || !strcmp(tok, "report=on")) {
		report_at_exit = tok[8] == 'n';
		return 0;
	}
	if (!strncmp(tok, "include=", 8))
		return add_pattern(&includes, &n_includes, tok + 8);
	if (!strncmp(tok, "exclude=", 8))
		return add_pattern(&excludes, &n_excludes, tok + 8);
	return 1;
}

int calltree_start(jvmtiEnv *jvmti, const char *hookit_opts, jvmtiEventCallbacks *cb)
{
	jvmtiCapabilities caps;

	if (hookit_init(hookit_opts) != 0) {
		fprintf(stderr, "jprof: %s\n", hookit_error());
		return -1;
	}
	memset(&caps, 0, sizeof(caps));
	caps.can_generate_method_entry_events = 1;
	caps.can_generate_method_exit_events = 1;
	if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE) {
		fprintf(stderr, "jprof: the JVM refuses method entry/exit events\n");
		return -1;
	}
	cb->MethodEntry = on_method_entry;
	cb->MethodExit = on_method_exit;
	cb->ThreadEnd = on_thread_end;
	cb->ThreadStart = on_thread_start;
	hookit_on_flush(jprof_flush);
	return 0;
}

void calltree_enable(jvmtiEnv *jvmti)
{
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_METHOD_ENTRY, NULL);
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_METHOD_EXIT, NULL);
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_END, NULL);
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_START, NULL);
}

void calltree_report_dir(const char *dir)
{
	snprintf(report_dir, sizeof(report_dir), "%s", dir);
}

/*
 * PI's reports when the JVM ends: bin/hookit report (next to this agent,
 * else hookit on the PATH) on the thread files, its output on stderr, the
 * JVM's end waiting for it.
 */
static void write_reports(void)
{
	char exe[PATH_MAX] = "hookit";
	char *argv[] = { exe, "report", "-i", report_dir, "--cal", "minima", NULL };
	posix_spawn_file_actions_t fa;
	Dl_info di;
	pid_t pid;
	int st = 0, err;
	const char *slash;

	if (dladdr((void *)write_reports, &di) && di.dli_fname && (slash = strrchr(di.dli_fname, '/')) &&
	    (size_t)(slash - di.dli_fname) + 8 < sizeof(exe)) {
		snprintf(exe, sizeof(exe), "%.*s/hookit", (int)(slash - di.dli_fname), di.dli_fname);
		if (access(exe, X_OK) != 0)
			snprintf(exe, sizeof(exe), "hookit");
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);	/* the program's stdout stays its own */
	err = posix_spawnp(&pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err == 0) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (err != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fprintf(stderr, "jprof: the reports were not written (%s): run hookit report -i %s --cal minima\n",
			err ? strerror(err) : "hookit report failed", report_dir);
}

void calltree_reports(void)
{
	if (report_at_exit)
		write_reports();
}

void calltree_stop(void)
{
	hookit_shutdown();
	if (report_at_exit)
		write_reports();
}
