/*
 * Where Java threads wait (docs/jprof.md, "Lock contention and wall
 * clock"), into the agent's own profile (jprofile.c):
 *
 * lock: JVMTI MonitorContendedEnter (the thread is about to block on a
 * monitor another thread holds) takes the thread's Java stack
 * (GetStackTrace of the current thread: no safepoint) and the time
 * (CLOCK_MONOTONIC); MonitorContendedEntered (it holds the monitor now)
 * charges the time between to that stack: one contention, its wait in ns.
 *
 * wall[=MS]: a sampler thread takes the stacks of all Java threads every MS
 * (50) milliseconds with GetAllStackTraces, running or not, and charges each
 * thread's stack and state (RUNNABLE, BLOCKED, WAITING, TIMED_WAITING) with
 * the time measured since its previous round. GetAllStackTraces stops the
 * threads at a safepoint: a running thread is seen at its next safepoint
 * poll (safepoint bias), a waiting one exactly where it waits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jprof.h"

static JavaVM *w_vm;
static jvmtiEnv *w_jvmti;
static int w_lock;			/* contention events */
static unsigned w_wall_ms;		/* 0: no wall sampler */
static char w_dir[4096];
static uint64_t w_t0;			/* the profile's start */
static int w_ended;

static pthread_key_t w_key;		/* the thread's pending contention */
static int w_key_ok;

struct pending {
	uint64_t t0;
	int n, armed;
	jvmtiFrameInfo f[PROF_DEPTH + 1];
};

static pthread_t w_thread;
static int w_running, w_stop;
static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cv;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A stack of PROF_DEPTH + 1 frames was cut: its outermost says so. */
static int cut(jvmtiFrameInfo *f, jint n)
{
	if (n > PROF_DEPTH) {
		f[PROF_DEPTH].method = PROF_CUT;
		f[PROF_DEPTH].location = 0;
		return PROF_DEPTH + 1;
	}
	return n;
}

static void JNICALL on_contended_enter(jvmtiEnv *env, JNIEnv *jni, jthread th, jobject obj)
{
	uint64_t t0 = mono_ns();
	struct pending *p = pthread_getspecific(w_key);
	jint n = 0;

	(void)jni; (void)th; (void)obj;
	if (!p) {
		if (!(p = malloc(sizeof(*p))) || pthread_setspecific(w_key, p) != 0) {
			free(p);
			return;
		}
	}
	if ((*env)->GetStackTrace(env, NULL, 0, PROF_DEPTH + 1, p->f, &n) != JVMTI_ERROR_NONE)
		n = 0;
	p->n = cut(p->f, n);
	p->t0 = t0;
	p->armed = 1;
}

static void JNICALL on_contended_entered(jvmtiEnv *env, JNIEnv *jni, jthread th, jobject obj)
{
	struct pending *p = pthread_getspecific(w_key);

	(void)env; (void)jni; (void)th; (void)obj;
	if (!p || !p->armed)
		return;	/* the wait began before the events went on */
	p->armed = 0;
	prof_add(PROF_LOCK, 0, p->f, p->n, 1, mono_ns() - p->t0);
}

static int state_of(jint st)
{
	switch (st & JVMTI_JAVA_LANG_THREAD_STATE_MASK) {
	case JVMTI_JAVA_LANG_THREAD_STATE_RUNNABLE:
		return PROF_RUNNABLE;
	case JVMTI_JAVA_LANG_THREAD_STATE_BLOCKED:
		return PROF_BLOCKED;
	case JVMTI_JAVA_LANG_THREAD_STATE_WAITING:
		return PROF_WAITING;
	case JVMTI_JAVA_LANG_THREAD_STATE_TIMED_WAITING:
		return PROF_TIMED_WAITING;
	}
	return -1;	/* new or ended */
}

/* One round: every Java thread but this one, with Java frames, charged ns. */
static void wall_round(JNIEnv *env, jthread self, uint64_t *last)
{
	jvmtiStackInfo *info = NULL;
	jint count = 0;
	uint64_t now, ns;

	if ((*env)->PushLocalFrame(env, 64) != 0)
		return;
	if ((*w_jvmti)->GetAllStackTraces(w_jvmti, PROF_DEPTH + 1, &info, &count) == JVMTI_ERROR_NONE) {
		now = mono_ns();
		ns = now - *last;
		*last = now;
		for (jint i = 0; i < count; i++) {
			int st = state_of(info[i].state);

			if (st < 0 || info[i].frame_count <= 0 || (*env)->IsSameObject(env, info[i].thread, self))
				continue;	/* agent threads have no Java frames */
			prof_add(PROF_WALL, (unsigned)st, info[i].frame_buffer, cut(info[i].frame_buffer, info[i].frame_count), 1, ns);
		}
		(*w_jvmti)->Deallocate(w_jvmti, (unsigned char *)info);
	}
	(*env)->PopLocalFrame(env, NULL);
}

static void *wall_sampler(void *arg)
{
	JNIEnv *env = NULL;
	jthread self = NULL;
	uint64_t last = mono_ns(), next = last;
	struct timespec ts;

	(void)arg;
	if ((*w_vm)->AttachCurrentThreadAsDaemon(w_vm, (void **)&env, NULL) != JNI_OK)
		return NULL;
	(*w_jvmti)->GetCurrentThread(w_jvmti, &self);
	pthread_mutex_lock(&w_mu);
	while (!w_stop) {
		next += (uint64_t)w_wall_ms * 1000000ull;
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		while (!w_stop && pthread_cond_timedwait(&w_cv, &w_mu, &ts) != ETIMEDOUT)
			;
		if (w_stop)
			break;
		pthread_mutex_unlock(&w_mu);
		wall_round(env, self, &last);
		if (last >= next + (uint64_t)w_wall_ms * 1000000ull)
			next = last;	/* a whole interval late: the next one from now */
		pthread_mutex_lock(&w_mu);
	}
	pthread_mutex_unlock(&w_mu);
	(*w_vm)->DetachCurrentThread(w_vm);
	return NULL;
}

int waits_init(JavaVM *vm, jvmtiEnv *jvmti, int lock, unsigned wall_ms, const char *dir, jvmtiEventCallbacks *cb)
{
	jvmtiCapabilities caps;
	pthread_condattr_t ca;

	w_vm = vm;
	w_jvmti = jvmti;
	snprintf(w_dir, sizeof(w_dir), "%s", dir);
	prof_reset();
	if (lock) {
		memset(&caps, 0, sizeof(caps));
		caps.can_generate_monitor_events = 1;
		if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE) {
			fprintf(stderr, "jprof: the JVM refuses monitor events: the lock option needs them\n");
			return -1;
		}
		if (!w_key_ok && pthread_key_create(&w_key, free) != 0)
			return -1;
		w_key_ok = 1;
		if (prof_init(PROF_LOCK) != 0)
			return -1;
		cb->MonitorContendedEnter = on_contended_enter;
		cb->MonitorContendedEntered = on_contended_entered;
	}
	if (wall_ms) {
		if (prof_init(PROF_WALL) != 0)
			return -1;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&w_cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	w_lock = lock;
	w_wall_ms = wall_ms;
	w_t0 = mono_ns();
	w_ended = w_stop = 0;	/* an attach after a stop: a new profile */
	return 0;
}

void waits_enable(void)
{
	if (!w_lock)
		return;
	(*w_jvmti)->SetEventNotificationMode(w_jvmti, JVMTI_ENABLE, JVMTI_EVENT_MONITOR_CONTENDED_ENTER, NULL);
	(*w_jvmti)->SetEventNotificationMode(w_jvmti, JVMTI_ENABLE, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED, NULL);
}

int waits_start(void)
{
	if (!w_wall_ms || w_running || w_ended)
		return 0;
	if (pthread_create(&w_thread, NULL, wall_sampler, NULL) != 0) {
		fprintf(stderr, "jprof: cannot start the wall-clock sampler: %s\n", strerror(errno));
		return -1;
	}
	w_running = 1;
	return 0;
}

void waits_end(int verbose)
{
	if (w_ended || (!w_lock && !w_wall_ms))
		return;
	w_ended = 1;
	if (w_lock) {
		(*w_jvmti)->SetEventNotificationMode(w_jvmti, JVMTI_DISABLE, JVMTI_EVENT_MONITOR_CONTENDED_ENTER, NULL);
		(*w_jvmti)->SetEventNotificationMode(w_jvmti, JVMTI_DISABLE, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED, NULL);
	}
	if (w_running) {
		pthread_mutex_lock(&w_mu);
		w_stop = 1;
		pthread_cond_signal(&w_cv);
		pthread_mutex_unlock(&w_mu);
		pthread_join(w_thread, NULL);
		w_running = 0;
	}
	prof_write(w_jvmti, w_dir, mono_ns() - w_t0, verbose);
}

void waits_flush(int verbose)
{
	if (!w_ended && (w_lock || w_wall_ms))
		prof_write(w_jvmti, w_dir, mono_ns() - w_t0, verbose);
}
