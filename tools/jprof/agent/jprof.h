/* JProf's agent (docs/jprof.md): what its parts share. */
#ifndef JPROF_H
#define JPROF_H

#include <jvmti.h>
#include <stdint.h>

/* jprof.c */
char *jprof_method_name(jmethodID m);	/* the whole name, malloc'd (NULL: no memory) */
int jprof_is_compiled(uint64_t id);
/* calltree mode with the trace option: method names and events into the
 * trace (JIT_METHOD, 0x30 / 0x50 entry / exit) for post --merge; an
 * event's tsc as jt_event's */
void jprof_trace_method(uint64_t id, const char *name);
void jprof_trace_event(uint64_t id, unsigned type, int exit, uint64_t tsc);
/* rtdriver flush: the reports and the lock/wall profile of what was recorded so far */
void jprof_flush(void);

/* calltree.c */
int calltree_option(const char *tok);	/* 0 taken, 1 not a calltree option, -1 error */
int calltree_start(jvmtiEnv *jvmti, const char *hookit_opts, jvmtiEventCallbacks *cb);
void calltree_enable(jvmtiEnv *jvmti);
/* PI's reports (log-rt, log-gen, pprof, folded, Perfetto) into dir when
 * the JVM ends, unless report=off */
void calltree_report_dir(const char *dir);
void calltree_stop(void);
void calltree_reports(void);	/* the reports of the files so far (rtdriver flush) */

/* jstacks.c: tprof mode's Java stack sampler into DIR/jprof-PID.jstk */
int jstacks_init(JavaVM *vm, jvmtiEnv *jvmti, const char *dir, unsigned hz);
int jstacks_start(void);	/* live phase: the timer and the writer */
void jstacks_pause(void);	/* the timer stopped (an attach's "stop") */
void jstacks_end(int verbose);	/* everything written (the JVM ends) */
void jstacks_thread_start(void);	/* a Java thread starts: its timer */
void jstacks_thread_end(void);
void jstacks_class_prepare(jvmtiEnv *jvmti, JNIEnv *jni, jthread th, jclass klass);

/* jitdump.c: DIR/jit-PID.dump, the JVM's code with its bytes (perf inject --jit) */
int jitdump_open(const char *dir);
void jitdump_load(const char *name, const void *addr, uint64_t size);
void jitdump_close(int verbose);

/* jprofile.c: the agent's own profile (lock, wall), aggregated stacks
 * written as DIR/jprof-PID.pb.gz and folded files */
enum { PROF_LOCK, PROF_WALL, PROF_KINDS };
enum { PROF_RUNNABLE, PROF_BLOCKED, PROF_WAITING, PROF_TIMED_WAITING, PROF_STATES };
#define PROF_DEPTH 256			/* frames kept of a stack */
#define PROF_CUT ((jmethodID)(uintptr_t)1)	/* outermost frame of a cut stack */
#define PROF_OVER ((jmethodID)(uintptr_t)2)	/* the stacks past the table's bound */
int prof_init(int kind);	/* the kind in the profile, its table empty */
void prof_reset(void);		/* no kind in the profile (an attach after a stop) */
/* f: leaf first, n <= PROF_DEPTH + 1 (the last PROF_CUT when cut); tag the state */
void prof_add(int kind, unsigned tag, const jvmtiFrameInfo *f, int n, uint64_t count, uint64_t ns);
int prof_write(jvmtiEnv *jvmti, const char *dir, uint64_t duration_ns, int verbose);

/* waits.c: lock contention (MonitorContendedEnter/Entered) and the wall-clock sampler */
int waits_init(JavaVM *vm, jvmtiEnv *jvmti, int lock, unsigned wall_ms, const char *dir, jvmtiEventCallbacks *cb);
void waits_enable(void);	/* the monitor events on */
int waits_start(void);		/* live phase: the wall sampler */
void waits_end(int verbose);	/* events off, sampler stopped, the profile written */
void waits_flush(int verbose);	/* the profile so far written, the recording going on */

#endif
