/*
 * libjprof.so: PI's JProf, a JVMTI agent (docs/jprof.md).
 *
 *   java -agentpath:bin/libjprof.so=tprof[,jstacks=off|HZ][,jitdump][,lock][,wall[=MS]][,dir=DIR][,sig][,verbose] ...
 *   java -agentpath:bin/libjprof.so=lock[,wall[=MS]]|wall[=MS][,dir=DIR][,sig][,verbose] ...
 *   java -agentpath:bin/libjprof.so=calltree[,start=off][,include=GLOB]
 *        [,exclude=GLOB][,metric=NAME][,dir=DIR][,report=off][,trace][,sig][,verbose] ...
 *   jcmd PID JVMTI.agent_load /path/libjprof.so tprof[,lock][,wall[=MS]][,sig][,verbose] | stop | flush
 *   bin/jprof --pid PID [--duration D] [--dir DIR] [OPTIONS]   (the front end: tools/jprof/cmd/jprof)
 *
 * tprof mode adds no entry/exit hooks: compiled-method loads and unloads
 * and the JVM's generated code (the interpreter, stubs) go into the trace as
 * JIT_LOAD / JIT_UNLOAD records with their time, so that tprof names the
 * JIT-compiled methods (A2N applies the records in time order) without a
 * perf map file; and the Java stacks of the running threads are sampled
 * (jstacks.c) into DIR/jprof-PID.jstk, for post to name the ticks in the
 * interpreter by the method it runs; with jitdump the code with its bytes
 * goes into DIR/jit-PID.dump too (jitdump.c). calltree mode (calltree.c) records method entry/exit of
 * every Java thread on the call-flow runtime (libhookit). In any mode, or
 * alone, lock and wall profile where Java threads wait (waits.c) into the
 * agent's own pprof profile DIR/jprof-PID.pb.gz (jprofile.c).
 */
#define _GNU_SOURCE
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "jittrace.h"
#include "jprof.h"

static jvmtiEnv *jvmti;
static JavaVM *the_vm;
static int verbose;
static int tracing;		/* JIT records into the trace */
static int trace_events;	/* calltree,trace: method events too */
static int calltree;
static int sig_names;		/* sig: PI's names, with the signature */
static int dead;
static int stopped;		/* detached ("stop"): reported already */
static int flusher;		/* the trace's flusher thread runs */
/* The outputs (reports, the lock/wall profile) are written by one thread at
 * a time: an rtdriver flush, the JVM's end, an attach's stop. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned jstacks_hz = 1000;	/* tprof: Java stacks sampled (0: off) */
static int jstacks;		/* the sampler is set up */
static int jitdump;		/* tprof,jitdump: DIR/jit-PID.dump */
static int lock_events;		/* lock: monitor contention */
static unsigned wall_ms;	/* wall[=MS]: the wall-clock sampler's interval (0: off) */
static int waits;		/* lock or wall set up */
static unsigned long loads, unloads, stubs;

/* Code blobs by start address, for the unload's size. */
#define CODE_SLOTS (1u << 16)
static struct {
	unsigned long long addr, size;
} code[CODE_SLOTS];
static pthread_mutex_t code_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot(unsigned long long a)
{
	return (unsigned)((a >> 4) * 0x9E3779B97F4A7C15ULL >> 48) & (CODE_SLOTS - 1);
}

static void code_put(unsigned long long addr, unsigned long long size)
{
	unsigned i, n;

	pthread_mutex_lock(&code_lock);
	for (i = slot(addr), n = 0; n < CODE_SLOTS; i = (i + 1) & (CODE_SLOTS - 1), n++) {
		if (code[i].addr == 0 || code[i].addr == addr || code[i].size == 0) {
			code[i].addr = addr;
			code[i].size = size;
			break;
		}
	}
	pthread_mutex_unlock(&code_lock);
}

/* The size of the blob at addr (0 if unknown); its slot is freed. */
static unsigned long long code_take(unsigned long long addr)
{
	unsigned long long size = 0;
	unsigned i, n;

	pthread_mutex_lock(&code_lock);
	for (i = slot(addr), n = 0; n < CODE_SLOTS && code[i].addr; i = (i + 1) & (CODE_SLOTS - 1), n++) {
		if (code[i].addr == addr && code[i].size) {
			size = code[i].size;
			code[i].size = 0;	/* a tombstone: probing goes on past it */
			break;
		}
	}
	pthread_mutex_unlock(&code_lock);
	return size;
}

/* jmethodIDs that have compiled code (for the method types of calltree). */
static uint64_t compiled[CODE_SLOTS];

static void compiled_put(uint64_t id)
{
	unsigned i, n;

	pthread_mutex_lock(&code_lock);
	for (i = slot(id), n = 0; n < CODE_SLOTS / 2; i = (i + 1) & (CODE_SLOTS - 1), n++) {
		if (compiled[i] == id)
			break;
		if (!compiled[i]) {
			__atomic_store_n(&compiled[i], id, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&code_lock);
}

int jprof_is_compiled(uint64_t id)
{
	unsigned i, n;

	for (i = slot(id), n = 0; n < CODE_SLOTS / 2; i = (i + 1) & (CODE_SLOTS - 1), n++) {
		uint64_t v = __atomic_load_n(&compiled[i], __ATOMIC_ACQUIRE);

		if (v == id)
			return 1;
		if (!v)
			return 0;
	}
	return 0;
}

static unsigned gettid_(void)
{
	static __thread unsigned tid __attribute__((tls_model("initial-exec")));

	if (!tid)
		tid = (unsigned)syscall(SYS_gettid);
	return tid;
}

void jprof_trace_method(uint64_t id, const char *name)
{
	if (trace_events)
		jt_method(id, name);
}

void jprof_trace_event(uint64_t id, unsigned type, int exit, uint64_t tsc)
{
	if (trace_events)
		jt_event(type == 1 || type == 2 ? 0x50 : 0x30, exit, gettid_(), id, tsc);
}

/*
 * "Lpkg/Class;" + "method" -> "pkg.Class.method"; with the sig option PI's
 * form, the JVM's class name and the method's signature:
 * "pkg/Class.method(Ljava/lang/String;)V" (overloads apart). The whole
 * name, however long (a signature may run to 64 KB): malloc'd, the
 * caller frees it; NULL only when memory runs out.
 */
char *jprof_method_name(jmethodID m)
{
	char *mname = NULL, *msig = NULL, *csig = NULL, *out = NULL;
	jclass cls = NULL;
	size_t o = 0, n;
	const char *c;

	if ((*jvmti)->GetMethodName(jvmti, m, &mname, sig_names ? &msig : NULL, NULL) != JVMTI_ERROR_NONE) {
		if (asprintf(&out, "method@%p", (void *)m) < 0)
			return NULL;
		return out;
	}
	if ((*jvmti)->GetMethodDeclaringClass(jvmti, m, &cls) == JVMTI_ERROR_NONE &&
	    (*jvmti)->GetClassSignature(jvmti, cls, &csig, NULL) == JVMTI_ERROR_NONE && csig) {
		n = strlen(csig) + 1 + strlen(mname) + (msig ? strlen(msig) : 0) + 1;
		if ((out = malloc(n)) != NULL) {
			c = csig[0] == 'L' ? csig + 1 : csig;
			for (; *c && *c != ';'; c++)
				out[o++] = *c == '/' && !sig_names ? '.' : *c;
			snprintf(out + o, n - o, ".%s%s", mname, msig ? msig : "");
		}
	} else if (asprintf(&out, "%s%s", mname, msig ? msig : "") < 0) {
		out = NULL;
	}
	(*jvmti)->Deallocate(jvmti, (unsigned char *)mname);
	if (msig)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)msig);
	if (csig)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)csig);
	return out;
}

static void JNICALL on_compiled_load(jvmtiEnv *env, jmethodID m, jint size, const void *addr,
				     jint map_len, const jvmtiAddrLocationMap *map, const void *info)
{
	char *name;

	(void)env; (void)map_len; (void)map; (void)info;
	if (dead || size <= 0)
		return;
	compiled_put((uint64_t)(uintptr_t)m);
	if (!tracing)
		return;
	name = jprof_method_name(m);
	code_put((unsigned long long)(uintptr_t)addr, (unsigned long long)size);
	jt_load(gettid_(), (unsigned long long)(uintptr_t)addr, (unsigned long long)size, name ? name : "?");
	if (jitdump)
		jitdump_load(name ? name : "?", addr, (uint64_t)size);
	free(name);
	jt_kick();
	__atomic_add_fetch(&loads, 1, __ATOMIC_RELAXED);
}

static void JNICALL on_compiled_unload(jvmtiEnv *env, jmethodID m, const void *addr)
{
	unsigned long long size;

	(void)env; (void)m;
	if (dead || !tracing)
		return;
	size = code_take((unsigned long long)(uintptr_t)addr);
	if (size)
		jt_unload((unsigned long long)(uintptr_t)addr, size);
	__atomic_add_fetch(&unloads, 1, __ATOMIC_RELAXED);
}

static void JNICALL on_dynamic_code(jvmtiEnv *env, const char *name, const void *addr, jint len)
{
	(void)env;
	if (dead || len <= 0 || !tracing)
		return;
	jt_load(gettid_(), (unsigned long long)(uintptr_t)addr, (unsigned long long)len, name);
	if (jitdump)
		jitdump_load(name, addr, (uint64_t)len);
	__atomic_add_fetch(&stubs, 1, __ATOMIC_RELAXED);
}

static void JNICALL on_class_prepare(jvmtiEnv *env, JNIEnv *jni, jthread th, jclass klass)
{
	if (!dead)
		jstacks_class_prepare(env, jni, th, klass);
}

/* AsyncGetCallTrace walks nothing (-1) unless ClassLoad events are on */
static void JNICALL on_class_load(jvmtiEnv *env, JNIEnv *jni, jthread th, jclass klass)
{
	(void)env; (void)jni; (void)th; (void)klass;
}

static void JNICALL on_thread_start(jvmtiEnv *env, JNIEnv *jni, jthread th)
{
	(void)env; (void)jni; (void)th;
	if (jstacks && !dead)
		jstacks_thread_start();
}

static void JNICALL on_thread_end(jvmtiEnv *env, JNIEnv *jni, jthread th)
{
	(void)env; (void)jni; (void)th;
	if (jstacks)
		jstacks_thread_end();
}

static void JNICALL on_vm_init(jvmtiEnv *env, JNIEnv *jni, jthread th)
{
	(void)env; (void)jni; (void)th;
	if (jstacks && jstacks_start() != 0)
		jstacks = 0;
	if (waits)
		waits_start();
}

static void report(void)
{
	unsigned long sent, failed;
	unsigned long long send_ns;
	const char *err;

	if (!tracing)
		return;
	jt_flush();
	jt_stats(&sent, &failed, &err, &send_ns);
	if (verbose || failed)
		fprintf(stderr, "jprof: %lu compiled-method loads, %lu unloads, %lu stubs; %lu records written to the trace, %lu not%s%s; sending took %.1f ms\n",
			loads, unloads, stubs, sent, failed, failed ? ": " : "", failed ? err : "", send_ns / 1e6);
	if (failed && strstr(err, "not on"))
		fprintf(stderr, "jprof: %lu records lost: tracing was not on (a buffer that fills stops it in normal mode: "
			"give more with swtrace init -t SIZE, or use swtrace mode cont)\n", failed);
}

static void JNICALL on_vm_death(jvmtiEnv *env, JNIEnv *jni)
{
	(void)env; (void)jni;
	pthread_mutex_lock(&out_mu);
	if (jstacks)
		jstacks_end(verbose);
	jitdump_close(verbose);	/* (open if an attach asked for it) */
	if (waits)
		waits_end(verbose);
	if (!stopped)
		report();
	if (calltree)
		calltree_stop();
	dead = 1;
	pthread_mutex_unlock(&out_mu);
}

/*
 * rtdriver flush (calltree: the call-flow runtime's control thread, after
 * it synced the thread files): PI's reports and the lock/wall profile of
 * what was recorded so far, as at the JVM's end, the recording going on.
 * The control thread is attached to the JVM once (a daemon thread): the
 * profile's methods are named through JVMTI.
 */
void jprof_flush(void)
{
	JavaVMAttachArgs args = { JNI_VERSION_1_6, "jprof flush", NULL };
	JNIEnv *env = NULL;
	int attached;

	attached = waits && the_vm &&
		((*the_vm)->GetEnv(the_vm, (void **)&env, JNI_VERSION_1_6) == JNI_OK ||
		 (*the_vm)->AttachCurrentThreadAsDaemon(the_vm, (void **)&env, &args) == JNI_OK);
	pthread_mutex_lock(&out_mu);
	if (!dead) {
		if (tracing && !stopped)
			jt_flush();
		if (attached)
			waits_flush(verbose);
		else if (waits)
			fprintf(stderr, "jprof: flush: the lock/wall profile is written at the JVM's end (the flush could not attach to the JVM)\n");
		if (calltree)
			calltree_reports();
	}
	pthread_mutex_unlock(&out_mu);
}

static int usage(const char *opts)
{
	fprintf(stderr, "jprof: bad options \"%s\": use -agentpath:libjprof.so=tprof[,jstacks=off|HZ][,jitdump][,dir=DIR][,sig][,verbose] or\n"
		"  =calltree[,start=off][,include=GLOB][,exclude=GLOB][,metric=NAME][,dir=DIR][,report=off][,trace][,sig][,verbose]\n"
		"  and in either mode or alone: lock, wall[=MS] (=lock,wall=20,dir=DIR ...)\n"
		"  (lock: each contended monitor entry, its wait in ns charged to the waiting thread's Java stack;\n"
		"   wall: every Java thread's stack and state every MS (50) ms, running or not, charged the time elapsed;\n"
		"   both into DIR/jprof-PID.pb.gz (pprof: lock-contentions, lock-wait, wall-samples, wall) and\n"
		"   DIR/jprof-PID-lock.folded, -wall.folded, written when the JVM ends, at an attach's stop and on\n"
		"   rtdriver flush with calltree; DIR /tmp unless dir=, . for calltree)\n"
		"  (sig: names as PI shows them, pkg/Class.method(args)ret)\n"
		"  (jstacks: Java stacks sampled at HZ (1000) of the process's CPU time into DIR/jprof-PID.jstk,\n"
		"   DIR /tmp unless dir=, for post to name interpreted methods; off: none)\n"
		"  (jitdump: the JVM's code with its bytes into DIR/jit-PID.dump, for perf inject --jit and post)\n"
		"  (GLOB: a class name pattern such as java.util.* ; docs/jprof.md)\n"
		"  or attached: jcmd PID JVMTI.agent_load /path/libjprof.so tprof[,lock][,wall[=MS]][,sig][,verbose] | stop | flush\n"
		"  (bin/jprof --pid PID [OPTIONS] attaches, records, stops)\n",
		opts ? opts : "");
	return JNI_ERR;
}

static const jvmtiEvent code_events[] = {
	JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_COMPILED_METHOD_UNLOAD, JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
};

static void code_events_mode(jvmtiEventMode mode)
{
	for (size_t i = 0; i < sizeof(code_events) / sizeof(code_events[0]); i++)
		(*jvmti)->SetEventNotificationMode(jvmti, mode, code_events[i], NULL);
}

/*
 * Attached to a running JVM: the code that exists already goes into the
 * trace too. GenerateEvents replays a CompiledMethodLoad for every
 * compiled method and a DynamicCodeGenerated for every stub (the
 * interpreter among them), through the same callbacks, then everything is
 * sent before the attach returns.
 */
static void replay(void)
{
	unsigned long before = loads, sb = stubs;

	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
	(*jvmti)->GenerateEvents(jvmti, JVMTI_EVENT_COMPILED_METHOD_LOAD);
	jt_flush();
	if (verbose)
		fprintf(stderr, "jprof: attached: %lu compiled methods and %lu stubs that existed named in the trace\n",
			loads - before, stubs - sb);
}

/* A sampling rate, 1..10000 Hz: 0, or -1 when s is none. */
static int parse_hz(const char *s, unsigned *hz)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (end == s || *end || v < 1 || v > 10000)
		return -1;
	*hz = (unsigned)v;
	return 0;
}

/* The wall sampler's interval, 1..60000 ms. */
static int parse_ms(const char *s, unsigned *ms)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (end == s || *end || v < 1 || v > 60000)
		return -1;
	*ms = (unsigned)v;
	return 0;
}

/* Options to mode flags; 0, or JNI_ERR after saying what is wrong. */
static int parse(const char *options, char *buf, size_t n, const char **dir, const char **metric, const char **start)
{
	char *tok, *save = NULL;

	if (!options || !*options || strlen(options) >= n)
		return usage(options);
	tracing = calltree = trace_events = jitdump = lock_events = 0;	/* an attach refused before */
	wall_ms = 0;
	jstacks_hz = 1000;
	snprintf(buf, n, "%s", options);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "tprof"))
			tracing = 1;
		else if (!strcmp(tok, "calltree"))
			calltree = 1;
		else if (!strcmp(tok, "verbose"))
			verbose = 1;
		else if (!strcmp(tok, "sig"))
			sig_names = 1;
		else if (!strcmp(tok, "trace"))
			tracing = trace_events = 1;
		else if (!strncmp(tok, "dir=", 4) && tok[4])
			*dir = tok + 4;
		else if (!strcmp(tok, "jitdump"))
			jitdump = 1;
		else if (!strcmp(tok, "lock"))
			lock_events = 1;
		else if (!strcmp(tok, "wall"))
			wall_ms = 50;
		else if (!strncmp(tok, "wall=", 5) && parse_ms(tok + 5, &wall_ms) == 0)
			;
		else if (!strcmp(tok, "jstacks=off"))
			jstacks_hz = 0;
		else if (!strncmp(tok, "jstacks=", 8) && parse_hz(tok + 8, &jstacks_hz) == 0)
			;
		else if (!strncmp(tok, "metric=", 7) && tok[7])
			*metric = tok + 7;
		else if (!strcmp(tok, "start=on") || !strcmp(tok, "start=off"))
			*start = tok + 6;
		else if (calltree_option(tok) != 0)
			return usage(options);
	}
	if ((calltree && tracing && !trace_events) || (trace_events && !calltree))
		return usage(options);	/* one mode */
	if (!calltree && !tracing && !lock_events && !wall_ms)
		return usage(options);	/* some mode */
	return 0;
}

/* The callbacks of every mode, at load and at attach. */
static void base_callbacks(jvmtiEventCallbacks *cb)
{
	memset(cb, 0, sizeof(*cb));
	cb->CompiledMethodLoad = on_compiled_load;
	cb->CompiledMethodUnload = on_compiled_unload;
	cb->DynamicCodeGenerated = on_dynamic_code;
	cb->VMDeath = on_vm_death;
	cb->VMInit = on_vm_init;
	cb->ClassPrepare = on_class_prepare;
	cb->ClassLoad = on_class_load;
}

static jint start(JavaVM *vm, char *options, int live)
{
	jvmtiCapabilities caps;
	jvmtiEventCallbacks cb;
	char buf[1024], hk[1200];
	const char *dir = NULL, *metric = NULL, *start = "on";
	pthread_t th;

	if (parse(options, buf, sizeof(buf), &dir, &metric, &start) != 0)
		return JNI_ERR;
	the_vm = vm;
	if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK || !jvmti) {
		fprintf(stderr, "jprof: this JVM has no JVMTI 1.2\n");
		jvmti = NULL;
		return JNI_ERR;
	}
	memset(&caps, 0, sizeof(caps));
	caps.can_generate_compiled_method_load_events = 1;
	if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE) {
		fprintf(stderr, "jprof: the JVM refuses compiled-method load events\n");
		return JNI_ERR;
	}
	base_callbacks(&cb);
	if (calltree) {
		if (!dir)
			dir = ".";
		snprintf(hk, sizeof(hk), "dir=%s,start=%s%s%s", dir, start, metric ? ",metric=" : "", metric ? metric : "");
		if (calltree_start(jvmti, hk, &cb) != 0)
			return JNI_ERR;
		calltree_report_dir(dir);
	}
	/* tprof mode: Java stacks beside the ticks (the perf-map directory by default) */
	if (tracing && !calltree && jstacks_hz && jstacks_init(vm, jvmti, dir ? dir : "/tmp", jstacks_hz) == 0) {
		jstacks = 1;
		cb.ThreadStart = on_thread_start;
		cb.ThreadEnd = on_thread_end;
	}
	if (jitdump && (calltree || jitdump_open(dir ? dir : "/tmp") != 0))
		jitdump = 0;
	if (lock_events || wall_ms) {
		if (waits_init(vm, jvmti, lock_events, wall_ms, dir ? dir : calltree ? "." : "/tmp", &cb) != 0)
			return JNI_ERR;
		waits = 1;
	}
	(*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof(cb));
	if (calltree)
		calltree_enable(jvmti);
	if (waits) {
		waits_enable();
		if (live)
			waits_start();
		else
			(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL);
	}
	code_events_mode(JVMTI_ENABLE);
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, NULL);
	if (jstacks) {
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_PREPARE, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_LOAD, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_START, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_END, NULL);
		if (live) {
			if (jstacks_start() != 0)
				jstacks = 0;
		} else {
			(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL);
		}
	}
	if (tracing && pthread_create(&th, NULL, jt_flusher, &dead) == 0) {
		pthread_detach(th);
		flusher = 1;
	}
	if (live)
		replay();
	return JNI_OK;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
	(void)reserved;
	return start(vm, options, 0);
}

/*
 * An attach's "stop": the lock/wall profile written, the code events and
 * the Java stack sampler off, what is pending sent to the trace. The agent
 * stays loaded (a JVM loads a library once), detached, until an attach
 * starts it again.
 */
static void detach(void)
{
	pthread_mutex_lock(&out_mu);
	if (waits) {
		waits_end(verbose);
		waits = 0;
	}
	if (tracing) {
		code_events_mode(JVMTI_DISABLE);
		if (jstacks)
			jstacks_pause();
		report();
	}
	stopped = 1;
	pthread_mutex_unlock(&out_mu);
}

/*
 * An attach to a detached agent: its options taken afresh, as at a first
 * attach (the Java stacks' file stays where the first attach put it).
 */
static jint reattach(char *options)
{
	char buf[1024];
	const char *dir = NULL, *metric = NULL, *st = "on";
	jvmtiEventCallbacks cb;
	pthread_t th;

	if (parse(options, buf, sizeof(buf), &dir, &metric, &st) != 0)
		return JNI_ERR;
	if (calltree) {		/* Agent_OnAttach refused it: defensive */
		calltree = 0;
		return JNI_ERR;
	}
	base_callbacks(&cb);
	cb.ThreadStart = on_thread_start;
	cb.ThreadEnd = on_thread_end;
	if (tracing && jstacks_hz && !jstacks && jstacks_init(the_vm, jvmti, dir ? dir : "/tmp", jstacks_hz) == 0)
		jstacks = 1;
	if (jitdump && jitdump_open(dir ? dir : "/tmp") != 0)
		jitdump = 0;
	if (lock_events || wall_ms) {
		if (waits_init(the_vm, jvmti, lock_events, wall_ms, dir ? dir : "/tmp", &cb) != 0)
			return JNI_ERR;
		waits = 1;
	}
	(*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof(cb));
	if (waits) {
		waits_enable();
		waits_start();
	}
	stopped = 0;
	if (!tracing)
		return JNI_OK;
	if (jstacks) {
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_PREPARE, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_LOAD, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_START, NULL);
		(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_THREAD_END, NULL);
		if (jstacks_hz)
			jstacks_start();
	}
	jt_resume();
	code_events_mode(JVMTI_ENABLE);
	if (!flusher && pthread_create(&th, NULL, jt_flusher, &dead) == 0) {
		pthread_detach(th);
		flusher = 1;
	}
	replay();
	return JNI_OK;
}

/*
 * jcmd PID JVMTI.agent_load /path/libjprof.so tprof[,lock][,wall[=MS]][,dir=DIR][,sig][,verbose] | stop | flush
 * The JVM loads the library once; a later attach calls this again in the
 * same agent: "stop" detaches (the lock/wall profile written, the events
 * off: the JVM runs on as if never attached), an attach after a stop
 * starts the agent again with its own options, and "tprof" while attached
 * in tprof mode names the existing code once more (for a new trace);
 * "flush" writes what rtdriver flush writes (any mode: the lock/wall
 * profile and calltree's reports of the run so far) and goes on.
 */
JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved)
{
	(void)reserved;
	if (options && (!strncmp(options, "calltree", 8) || strstr(options, ",calltree"))) {
		/* HotSpot offers can_generate_method_entry_events only at start */
		fprintf(stderr, "jprof: calltree mode needs the agent from the JVM's start (-agentpath:libjprof.so=calltree...): "
			"method entry/exit cannot be turned on in a running JVM; attach in tprof mode\n");
		return JNI_ERR;
	}
	if (!jvmti && options && !strcmp(options, "flush")) {
		fprintf(stderr, "jprof: flush: the agent is not running in this JVM\n");
		return JNI_ERR;
	}
	if (!jvmti)
		return options && !strcmp(options, "stop") ? JNI_OK : start(vm, options, 1);
	if (dead)
		return JNI_ERR;
	if (options && !strcmp(options, "stop")) {
		if (!stopped)
			detach();
		return JNI_OK;
	}
	if (options && !strcmp(options, "flush")) {
		jprof_flush();	/* as rtdriver flush, whatever the mode */
		return JNI_OK;
	}
	if (calltree) {
		fprintf(stderr, "jprof: the agent runs in calltree mode from the JVM's start: it takes no other attach than \"stop\"\n");
		return JNI_ERR;
	}
	if (stopped)
		return reattach(options);
	if (!tracing || !options || (strcmp(options, "tprof") && strncmp(options, "tprof,", 6))) {
		fprintf(stderr, "jprof: already attached in %s mode: attach again with \"tprof\" (name the code in a new trace) or \"stop\" first\n",
			tracing ? "tprof" : "lock/wall");
		return JNI_ERR;
	}
	if (strstr(options, ",verbose"))
		verbose = 1;
	jt_resume();
	code_events_mode(JVMTI_ENABLE);
	if (jstacks)
		jstacks_start();
	replay();
	return JNI_OK;
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm)
{
	(void)vm;
	if (!dead) {	/* the lock/wall profile needs JVMTI: written at VMDeath only */
		if (jstacks)
			jstacks_end(verbose);
		if (jitdump)
			jitdump_close(verbose);
		report();
		if (calltree)
			calltree_stop();
	}
	dead = 1;
}
