/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hookit_api.h - the in-process runtime API of libhookit (perfinsp call
 * flows, docs/callflow.md), for agents that see method entries and exits
 * themselves (the JProf JVMTI agent, docs/jprof.md) instead of
 * -finstrument-functions.
 *
 * Link bin/libhookit.so (or bin/libhookit.a, PIC objects, into an agent .so).
 * Every event takes an early metric read at its start and a late read at its
 * end, exactly as the -finstrument-functions hooks do; the work between them
 * is never charged. Events go to the calling thread's file
 * DIR/hookit-PID-TID.bin; bin/hookit report (analysis/callflow) builds the
 * calibrated call tree per thread, with sequence minima keyed by the method
 * type and the transition of each event.
 *
 * This API only grows: nothing here changes meaning.
 */
#ifndef HOOKIT_API_H
#define HOOKIT_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Method types (the sequence-minima key of the patent "Compensating for
 * instrumentation overhead using sequences of events" and PI's paper
 * §4.1): 0..7. PI as shipped uses all 8 (× 3 transitions: entry, exit,
 * exception exit); the patent uses the 6 Java types 1..6 (× 2 transitions: an exception exit
 * counts as an exit). bin/hookit report --seq-key chooses the key width.
 * Code that is not Java (the -finstrument-functions hooks) is type 0.
 */
enum hookit_type {
	HOOKIT_TYPE_OTHER = 0,              /* C/C++ functions, anything else */
	HOOKIT_TYPE_JITTED = 1,
	HOOKIT_TYPE_JITTED_STATIC = 2,
	HOOKIT_TYPE_INTERPRETED = 3,
	HOOKIT_TYPE_INTERPRETED_STATIC = 4,
	HOOKIT_TYPE_NATIVE = 5,
	HOOKIT_TYPE_NATIVE_STATIC = 6,
	HOOKIT_TYPE_COMPILING = 7,          /* the JIT compiling (PI's 8th type) */
};
#define HOOKIT_NTYPES 8

/* Ids: any non-zero value below 2^48 (a code address, a jmethodID). */
#define HOOKIT_ID_MAX ((1ULL << 48) - 1)

/*
 * Start-up, for an agent that is not preloaded. options: NULL (take the
 * environment: HOOKIT_DIR, HOOKIT_METRIC, HOOKIT_START) or a comma-separated
 * list that overrides it: "dir=PATH,metric=NAME,start=on|off". Runs the
 * start-up calibration (inner/outer time of the -finstrument-functions
 * path and of this API's path) and writes DIR/hookit-PID.info and .maps.
 * Returns 0 (also when already started: the library starts by itself when
 * HOOKIT_DIR is set in the environment), -1 on error with the reason in
 * hookit_error(). Call it from one thread before the first event.
 */
int hookit_init(const char *options);

/* The reason of the last hookit_init failure ("" if none). */
const char *hookit_error(void);

/*
 * Events of the calling thread. type: enum hookit_type (values >= 8 are
 * stored as 0). An exception exit pops the frame of id (and any frame
 * above it) like an exit, but is its own transition in the minima key.
 * Each is safe from any thread once hookit_init returned 0; before that
 * (or when tracing is off) they only cost the two reads.
 */
void hookit_enter(uint64_t id, unsigned type);
void hookit_exit(uint64_t id, unsigned type);
void hookit_exception_exit(uint64_t id, unsigned type);

/*
 * A name for an id that is not a code address (a Java method): written to
 * DIR/hookit-PID.names, which the report reads before resolving addresses
 * with A2N. Call it once per id, before or after its events; newlines in
 * name are replaced. Returns 0, or -1 if the names file cannot be written.
 */
int hookit_name(uint64_t id, const char *name);

/* The calling thread ends: its file is finished and closed (optional: at
 * shutdown every file is finished anyway; call it when threads come and go
 * by the thousand, to release their descriptors and mappings). Events on
 * the same OS thread after it are not recorded, until hookit_thread_start. */
void hookit_thread_end(void);

/*
 * A thread starts on the calling OS thread (a JVMTI ThreadStart): after a
 * hookit_thread_end there (a JVM's DestroyJavaVM attached to main's OS
 * thread, a native thread detached and attached again), its events are
 * recorded again, into a file of their own: DIR/hookit-PID-TID.N.bin for
 * the OS thread's Nth thread (N >= 2). No effect otherwise.
 */
void hookit_thread_start(void);

/*
 * Shutdown: records the end of every open frame, copies the memory map,
 * finishes every thread file (its size = its records) and removes the
 * control socket; events after it are not recorded. Also done at exit.
 */
void hookit_shutdown(void);

/* Tracing on / off (as rtdriver start / end), and msync of the files. */
void hookit_start(void);
void hookit_end(void);
void hookit_flush(void);

/*
 * fn runs on the runtime's control thread after each rtdriver "flush" has
 * synced the files, before the answer: rtdriver flush returns once it
 * returned (an agent writes its reports there). NULL: none.
 */
void hookit_on_flush(void (*fn)(void));

/* Events not recorded (a thread file could not be opened or grown, or an
 * event arrived inside the runtime from a signal handler). */
uint64_t hookit_dropped(void);

/*
 * The TSC value of the calling thread's last event's metric read, where
 * that read is task-clock's through the TSC (the default metric, without
 * the module); 0 elsewhere, or before the thread's first event. A caller
 * that times the same event (JProf's trace records) takes it instead of
 * a TSC read of its own.
 */
uint64_t hookit_last_tsc(void);

#ifdef __cplusplus
}
#endif

#endif
