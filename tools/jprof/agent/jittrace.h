/* JProf's trace records: the pitrace module or pitraced (jittrace.c; docs/jprof.md). */
#ifndef JPROF_JITTRACE_H
#define JPROF_JITTRACE_H

/* format/trace/codes.go: MajorJITLoad and its minors */
#define JT_MAJOR_JIT	0x14
#define JT_JIT_LOAD	1
#define JT_JIT_UNLOAD	2
#define JT_JIT_METHOD	3

void jt_load(unsigned tid, unsigned long long addr, unsigned long long size, const char *name);
void jt_unload(unsigned long long addr, unsigned long long size);
void jt_method(unsigned long long id, const char *name);
/* a method entry (exit = 0) or exit of the calling thread: major 0x30
 * (interpreted) or 0x50 (jitted), minor 0x10 / 0x80000010; tsc the TSC
 * value it happened at (the call-flow runtime's read), 0: now */
void jt_event(unsigned major, int exit, unsigned tid, unsigned long long id, unsigned long long tsc);
void jt_flush(void);
/* send again (a new attach: the daemon may be back, tracing on again) */
void jt_resume(void);
/* wake the sender now (the code of a compiled method is about to run) */
void jt_kick(void);
/* the sending thread: runs until *stop is set */
void *jt_flusher(void *stop);
void jt_stats(unsigned long *sent, unsigned long *failed, const char **err, unsigned long long *send_ns);

#endif
