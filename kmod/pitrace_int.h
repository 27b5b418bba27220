/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pitrace_int.h - internal interfaces of the pitrace module.
 */
#ifndef _PITRACE_INT_H
#define _PITRACE_INT_H

#include <linux/kref.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/version.h>
#include <linux/wait.h>

#include "uapi/pitrace.h"

#define PT_TIME_HIGH_SIZE	(PITRACE_REC_HDR_SIZE + sizeof(struct pitrace_rec_time_high))
/* longest path written in an MTE record (the tail is kept) */
#define PT_MAX_PATH		900

/* One CPU's trace or MTE buffer. */
struct pt_buf {
	struct pitrace_buf_hdr *hdr;	/* first page of the vmap */
	u8 *data;			/* segments */
	void *vaddr;			/* vmap of pages */
	struct page **pages;
	unsigned int npages;
	u32 cpu;
	u32 kind;
	u32 seg_size;
	u32 nseg;
	/* writer state, touched only by the owning CPU with irqs off */
	u32 cur;
	u32 used;
	u32 high;
	bool have_high;
	int busy;			/* nesting guard (NMI inside a write) */
	u64 nested_lost;		/* records dropped by the guard */
};

/* All buffers of one INIT; refcounted by the device and by mappings. */
struct pt_set {
	struct kref ref;
	u32 ncpu;
	u32 mode;
	u64 trace_size;
	u64 mte_size;
	struct pt_buf *trace;		/* [ncpu] */
	struct pt_buf *mte;		/* [ncpu] */
};

/* pitrace_buf.c */
u32 pt_seg_size(u64 size);
struct pt_set *pt_set_alloc(u64 trace_size, u64 mte_size, u32 mode, u32 ncpu);
void pt_set_release(struct kref *ref);
void pt_set_reset(struct pt_set *s, u32 mode);
void pt_set_finish(struct pt_set *s);
u64 pt_buf_used(struct pt_buf *b);
bool pt_write(u32 kind, u16 major, u32 minor, int layout, const void *fields,
	      u32 flen, const char *str, u32 slen);
bool pt_write_buf(struct pt_set *s, struct pt_buf *b, u16 major, u32 minor,
		  int layout, const void *fields, u32 flen, const char *str,
		  u32 slen);
u64 pt_mem_limit(void);

/* pt_write_begin .. pt_write_end: records with one time stamp, in a row */
struct pt_wsess {
	unsigned long flags;
	struct pt_set *s;
	struct pt_buf *b;
	u64 t;
};

bool pt_write_begin(struct pt_wsess *w, u32 kind);
bool pt_write_rec(struct pt_wsess *w, u16 major, u32 minor, int layout,
		  const void *fields, u32 flen, const char *str, u32 slen);
void pt_write_end(struct pt_wsess *w);

/* pitrace_src.c */
int pt_src_init(void);
void pt_src_exit(void);
int pt_src_start(void);
void pt_src_stop(void);
void pt_describe_live(bool segments);
int pt_tprof_check_event(u32 type, u64 config, u64 period);
u32 pt_src_features(void);
u64 pt_bench_tprof(u32 count);
int pt_src_stack_arg(const struct pitrace_majors *m, bool on);
int pt_src_cpu_online(unsigned int cpu);
int pt_src_cpu_offline(unsigned int cpu);

/* pitrace_ptt.c: per-thread metric virtualization (ctx: per open file) */
long pt_ptt_ioctl(void **ctx, unsigned int cmd, void *arg);	/* arg: kernel copy */
int pt_ptt_cpu_online(unsigned int cpu);
int pt_ptt_cpu_offline(unsigned int cpu);
int pt_ptt_mmap(void **ctx, struct vm_area_struct *vma);
void pt_ptt_release(void *ctx);
void pt_ptt_exit(void);

/* pitrace_ptt.c: may the caller watch (and so ITrace) t? */
bool ptt_may_watch(struct task_struct *t);
/* pitrace_ptt.c: does the exec at sched_process_exec change who may watch? */
struct linux_binprm;
bool pt_exec_secure(const struct linux_binprm *bprm);

/*
 * pitrace_itrace.c: single-step ITrace.  pt_itrace_pids copies the pid
 * array of ITRACE_ON / _OFF in before pt.lock is taken; ITRACE_ON / _OFF
 * run with it held.
 */
s32 *pt_itrace_pids(unsigned int kcmd, const void *arg);
long pt_itrace_on(struct pitrace_itrace_on *a, const s32 *pids);
long pt_itrace_off(struct pitrace_itrace_off *a, const s32 *pids);
long pt_itrace_stats(struct pitrace_itrace_stats *a);
void pt_itrace_stop_all(void);
void pt_itrace_exit(void);

/* pitrace_msr.c: PITRACE_IOC_MSR_READ / _WRITE (process context, no lock) */
long pt_msr_ioctl(unsigned int cmd, void __user *arg);

/* pitrace_main.c: facility state shared with the writers */
struct pt_state {
	struct mutex lock;		/* serializes control */
	u32 state;
	u32 mode;
	u64 trace_size;
	u64 mte_size;
	char path[PITRACE_PATH_MAX];
	u64 enabled[4];
	u32 rate_hz;
	u32 event_type;
	u64 event_config;
	char event[PITRACE_EVENT_NAME];
	bool use_event;
	bool unsaved;
	u64 start_wall;
	u64 start_clock;
	u64 on_count;
	struct pt_set *set;		/* control's reference */
	spinlock_t set_lock;		/* guards set for mmap (no pt.lock there) */
	struct file *drainer;
	pid_t drainer_pid;
	wait_queue_head_t wq;
	atomic_t wake_gen;
};

extern struct pt_state pt;
extern struct pt_set __rcu *pt_live_set;	/* what writers use */
extern int pt_active;				/* writers accept records */
extern int pt_stopped_full;			/* normal mode: a buffer filled */

void pt_wake(void);		/* any context, NMI included */
void pt_buffer_full(void);	/* any context, NMI included */

static inline bool pt_major_enabled(u16 major)
{
	if (major >= 256)
		return true;
	return pt.enabled[major / 64] & (1ULL << (major % 64));
}

/* vm_flags became read-only in 6.3: use the helpers there. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
#define pt_vm_flags_set(vma, f)		vm_flags_set(vma, f)
#define pt_vm_flags_clear(vma, f)	vm_flags_clear(vma, f)
#else
#define pt_vm_flags_set(vma, f)		((vma)->vm_flags |= (f))
#define pt_vm_flags_clear(vma, f)	((vma)->vm_flags &= ~(f))
#endif

#endif /* _PITRACE_INT_H */
