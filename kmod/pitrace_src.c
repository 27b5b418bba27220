// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_src.c - where records come from: MTE from scheduler tracepoints
 * (and two optional kprobes), dispatch and interrupt tracepoints, tprof
 * from a per-CPU hrtimer or an in-kernel perf_event counter.
 *
 * Kernel interfaces used (see docs/kmod.md for newer kernels):
 *   tracepoints, found with for_each_kernel_tracepoint() and attached with
 *   tracepoint_probe_register(): sched_process_fork, sched_process_exec,
 *   sched_process_exit, task_rename, sched_switch, irq_handler_entry/exit,
 *   softirq_entry/exit;
 *   kprobes (optional, tolerated missing): do_exit (segments of an exiting
 *   process while its mm still exists), begin_new_exec (segments of the
 *   image an exec replaces), __x64_sys_munmap (unmap of executable
 *   segments), perf_event_mmap (executable segments as they are mapped);
 *   hrtimer (HRTIMER_MODE_REL_PINNED), get_irq_regs();
 *   perf_event_create_kernel_counter() for event-based tprof.
 *
 * Tracepoint and kprobe handlers run with preemption disabled: they never
 * sleep.  Memory maps are read with mmap_read_trylock(); when the lock is
 * busy the segments are not described there (they are at off, where the
 * control thread may sleep).
 */
#include <linux/binfmts.h>
#include <linux/cpu.h>
#include <linux/dcache.h>
#include <linux/file.h>
#include <linux/hrtimer.h>
#include <linux/interrupt.h>
#include <linux/kprobes.h>
#include <linux/mm.h>
#include <linux/mmap_lock.h>
#include <linux/perf_event.h>
#include <linux/pid.h>
#include <linux/ptrace.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/stacktrace.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/tracepoint.h>
#include <linux/utsname.h>
#include <linux/vmalloc.h>
#include <linux/uaccess.h>
#include <asm/irq_regs.h>
#include <asm/msr.h>
#include <asm/unwind.h>

#include "pitrace_int.h"

/* ---- processes already described (parent tree written) ------------------ */

static unsigned long *pt_described;	/* bitmap by tgid, PID_MAX_LIMIT bits */
/*
 * Second half of the same allocation: processes whose executable segments
 * are in the trace and kept current (exec-time segments plus the mmap
 * kprobe).  off skips them: "MTE data not yet written".
 */
static unsigned long *pt_segs_done;
static char *pt_pathbufs;		/* nr_cpu_ids * PATH_MAX, probe use */

static bool pt_mark_described(pid_t tgid)
{
	if (!pt_described || tgid <= 0 || tgid >= PID_MAX_LIMIT)
		return false;
	return test_and_set_bit(tgid, pt_described);
}

static void pt_clear_described(pid_t tgid)
{
	if (pt_described && tgid > 0 && tgid < PID_MAX_LIMIT) {
		clear_bit(tgid, pt_described);
		clear_bit(tgid, pt_segs_done);
	}
}

static bool pt_kp_mmap_on;

/* segments written; they stay current only while mmaps are seen */
static void pt_mark_segs(pid_t tgid)
{
	if (pt_segs_done && pt_kp_mmap_on && tgid > 0 && tgid < PID_MAX_LIMIT)
		set_bit(tgid, pt_segs_done);
}

static bool pt_segs_written(pid_t tgid)
{
	return pt_segs_done && tgid > 0 && tgid < PID_MAX_LIMIT &&
	       test_bit(tgid, pt_segs_done);
}

static void pt_mte_str(u32 minor, const void *f, u32 flen, const char *s)
{
	u32 n = strnlen(s, PT_MAX_PATH);

	pt_write(PITRACE_KIND_MTE, PITRACE_MAJOR_MTE, minor,
		 PITRACE_LAYOUT_STRING, f, flen, s, n);
}

static void pt_mte_fixed(u32 minor, const void *f, u32 flen)
{
	pt_write(PITRACE_KIND_MTE, PITRACE_MAJOR_MTE, minor,
		 PITRACE_LAYOUT_FIXED, f, flen, NULL, 0);
}

/* Caller holds rcu_read_lock() or a reference on p. */
static void pt_write_process(struct task_struct *p)
{
	struct pitrace_rec_process f;
	char comm[TASK_COMM_LEN];
	struct task_struct *leader = READ_ONCE(p->group_leader);
	struct task_struct *parent;

	if (!leader)
		leader = p;
	parent = rcu_dereference(leader->real_parent);
	f.pid = leader->tgid;
	f.ppid = parent ? parent->tgid : 0;
	memcpy(comm, leader->comm, sizeof(comm));
	comm[TASK_COMM_LEN - 1] = 0;
	pt_mte_str(PITRACE_MTE_PROCESS, &f, sizeof(f), comm);
}

static void pt_write_thread(struct task_struct *p)
{
	struct pitrace_rec_task f = { p->tgid, p->pid };
	char comm[TASK_COMM_LEN];

	memcpy(comm, p->comm, sizeof(comm));
	comm[TASK_COMM_LEN - 1] = 0;
	pt_mte_str(PITRACE_MTE_THREAD, &f, sizeof(f), comm);
}

/* The task's process and its ancestors, each once per trace. */
static void pt_describe_tree(struct task_struct *p)
{
	int depth = 0;

	rcu_read_lock();
	while (p && p->tgid > 0 && depth++ < 64) {
		if (!pt_mark_described(p->tgid))
			pt_write_process(p);
		p = rcu_dereference(p->group_leader->real_parent);
		if (p && p->tgid <= 1)
			break;
	}
	rcu_read_unlock();
}

static u32 pt_prot(struct vm_area_struct *vma)
{
	u32 prot = 0;

	if (vma->vm_flags & VM_READ)
		prot |= PITRACE_PROT_READ;
	if (vma->vm_flags & VM_WRITE)
		prot |= PITRACE_PROT_WRITE;
	if (vma->vm_flags & VM_EXEC)
		prot |= PITRACE_PROT_EXEC;
	return prot;
}

static const char *pt_vma_path(struct vm_area_struct *vma, char *buf)
{
	const char *s;
	size_t n;

	if (!vma->vm_file) {
		if (vma->vm_mm && vma->vm_start <= vma->vm_mm->start_stack &&
		    vma->vm_end >= vma->vm_mm->start_stack)
			return "[stack]";
		return "[anon]";
	}
	s = d_path(&vma->vm_file->f_path, buf, PATH_MAX);
	if (IS_ERR(s))
		return "?";
	n = strlen(s);
	if (n > PT_MAX_PATH)
		s += n - PT_MAX_PATH;	/* keep the tail: the file name */
	return s;
}

/*
 * MTE_SEGMENT of vma, and MTE_FILE when it maps a file: the inode it maps
 * (the one /proc/PID/maps and perf's MMAP2 name), by which a reader tells
 * the file traced from one put at its path later.  The caller holds the
 * mmap lock of vma's mm, which keeps vm_file.
 */
static void pt_write_segment(struct vm_area_struct *vma, pid_t tgid, char *buf)
{
	struct pitrace_rec_segment f;
	struct pitrace_rec_file ff;
	const char *path = pt_vma_path(vma, buf);
	struct inode *inode;

	mmap_assert_locked(vma->vm_mm);
	f.pid = tgid;
	f.start = vma->vm_start;
	f.size = vma->vm_end - vma->vm_start;
	f.offset = (u64)vma->vm_pgoff << PAGE_SHIFT;
	f.prot = pt_prot(vma);
	pt_mte_str(PITRACE_MTE_SEGMENT, &f, sizeof(f), path);
	if (!vma->vm_file || path[0] != '/')
		return;
	inode = file_inode(vma->vm_file);
	ff.pid = tgid;
	ff.start = vma->vm_start;
	ff.dev_major = MAJOR(inode->i_sb->s_dev);
	ff.dev_minor = MINOR(inode->i_sb->s_dev);
	ff.ino = inode->i_ino;
	pt_mte_fixed(PITRACE_MTE_FILE, &ff, sizeof(ff));
}

/* One record per executable segment; the caller holds mm's mmap lock. */
static void pt_write_segments_locked(struct mm_struct *mm, pid_t tgid,
				     char *buf)
{
	struct vm_area_struct *vma;
	VMA_ITERATOR(vmi, mm, 0);

	mmap_assert_locked(mm);
	for_each_vma(vmi, vma) {
		if (vma->vm_flags & VM_EXEC)
			pt_write_segment(vma, tgid, buf);
	}
}

/* From probes (atomic): current's segments if the map lock is free. */
static bool pt_segments_atomic(struct mm_struct *mm, pid_t tgid)
{
	char *buf;

	if (!mm || !pt_pathbufs)
		return false;
	if (!mmap_read_trylock(mm))
		return false;
	buf = pt_pathbufs + (size_t)smp_processor_id() * PATH_MAX;
	pt_write_segments_locked(mm, tgid, buf);
	mmap_read_unlock(mm);
	return true;
}

/* ---- tracepoint probes ---------------------------------------------------- */

static void pt_tp_fork(void *data, struct task_struct *parent,
		       struct task_struct *child)
{
	struct pitrace_rec_fork f = {
		.ppid = parent->tgid, .ptid = parent->pid,
		.pid = child->tgid, .tid = child->pid,
		.flags = child->tgid == parent->tgid ? PITRACE_FORK_THREAD : 0,
	};

	if (!READ_ONCE(pt_active))
		return;
	pt_mte_fixed(PITRACE_MTE_FORK, &f, sizeof(f));
	if (f.flags & PITRACE_FORK_THREAD) {
		pt_write_thread(child);
	} else {
		/* a new process (a reused pid is a new process too) */
		pt_clear_described(child->tgid);
		pt_mark_described(child->tgid);
		rcu_read_lock();
		pt_write_process(child);
		rcu_read_unlock();
	}
}

static void pt_tp_exec(void *data, struct task_struct *p, pid_t old_pid,
		       struct linux_binprm *bprm)
{
	struct pitrace_rec_task f = { p->tgid, p->pid };

	const char *path = bprm->filename;

	if (!READ_ONCE(pt_active))
		return;
	/*
	 * The file that runs, as the kernel found it (/usr/bin/true, not
	 * "true" or "./true"; an interpreter for a script): what
	 * /proc/PID/exe shows.  The name as passed when there is no path.
	 */
	if (bprm->file && pt_pathbufs) {
		char *buf = pt_pathbufs + (size_t)smp_processor_id() * PATH_MAX;
		char *d = d_path(&bprm->file->f_path, buf, PATH_MAX);

		if (!IS_ERR(d))
			path = d;
	}
	pt_mte_str(PITRACE_MTE_EXEC, &f, sizeof(f), path);
	/* a new image: its old segments no longer count as written */
	pt_clear_described(p->tgid);
	pt_mark_described(p->tgid);
	rcu_read_lock();
	pt_write_process(p);
	rcu_read_unlock();
	/* the new image (program, interpreter, vdso) after its EXEC record */
	if (p == current && pt_segments_atomic(p->mm, p->tgid))
		pt_mark_segs(p->tgid);
}

static void pt_tp_exit(void *data, struct task_struct *p)
{
	struct pitrace_rec_task f = { p->tgid, p->pid };

	pt_mte_fixed(PITRACE_MTE_EXIT, &f, sizeof(f));
}

static void pt_tp_rename(void *data, struct task_struct *task,
			 const char *comm)
{
	struct pitrace_rec_task f = { task->tgid, task->pid };
	struct task_struct *parent;
	struct pitrace_rec_process pf;

	if (!READ_ONCE(pt_active))
		return;
	pt_mte_str(PITRACE_MTE_THREAD, &f, sizeof(f), comm);
	if (task->pid == task->tgid) {
		rcu_read_lock();
		parent = rcu_dereference(task->real_parent);
		pf.pid = task->tgid;
		pf.ppid = parent ? parent->tgid : 0;
		rcu_read_unlock();
		pt_mte_str(PITRACE_MTE_PROCESS, &pf, sizeof(pf), comm);
	}
}

/* scheduler records: defined with the call stacks below */
static void pt_tp_switch(void *data, bool preempt, struct task_struct *prev,
			 struct task_struct *next, unsigned int prev_state);
static void pt_tp_wakeup(void *data, struct task_struct *p);
static void pt_tp_wakeup_new(void *data, struct task_struct *p);

/* v: struct pitrace_rec_irq or pitrace_rec_softirq, one u32 */
static void pt_intr(u32 minor, u32 v)
{
	BUILD_BUG_ON(sizeof(struct pitrace_rec_irq) != sizeof(v) ||
		     sizeof(struct pitrace_rec_softirq) != sizeof(v));
	if (!READ_ONCE(pt_active) ||
	    !pt_major_enabled(PITRACE_MAJOR_INTERRUPT))
		return;
	pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_INTERRUPT, minor,
		 PITRACE_LAYOUT_FIXED, &v, sizeof(v), NULL, 0);
}

static void pt_tp_irq_entry(void *data, int irq, struct irqaction *action)
{
	pt_intr(PITRACE_INTR_HARD, irq);
}

static void pt_tp_irq_exit(void *data, int irq, struct irqaction *action,
			   int ret)
{
	pt_intr(PITRACE_INTR_HARD | PITRACE_EXIT_BIT, irq);
}

static void pt_tp_softirq_entry(void *data, unsigned int vec)
{
	pt_intr(PITRACE_INTR_SOFT, vec);
}

static void pt_tp_softirq_exit(void *data, unsigned int vec)
{
	pt_intr(PITRACE_INTR_SOFT | PITRACE_EXIT_BIT, vec);
}

/*
 * munmap of an executable segment: describe the task, then the unmap.
 * start/len are the syscall's arguments (user registers).
 */
static void pt_munmap(unsigned long start, unsigned long len)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	unsigned long end = start + len;
	bool any = false;

	if (!mm || end <= start || !pt_pathbufs)
		return;
	if (!mmap_read_trylock(mm))
		return;
	vma = find_vma(mm, start);
	while (vma && vma->vm_start < end) {
		if (vma->vm_flags & VM_EXEC) {
			any = true;
			break;
		}
		vma = find_vma(mm, vma->vm_end);
	}
	if (any) {
		char *buf = pt_pathbufs + (size_t)smp_processor_id() * PATH_MAX;

		pt_describe_tree(current);
		pt_write_segments_locked(mm, current->tgid, buf);
		vma = find_vma(mm, start);
		while (vma && vma->vm_start < end) {
			if (vma->vm_flags & VM_EXEC) {
				struct pitrace_rec_unmap f = {
					current->tgid,
					max(start, vma->vm_start),
					min(end, vma->vm_end) -
						max(start, vma->vm_start),
				};
				pt_mte_fixed(PITRACE_MTE_UNMAP, &f, sizeof(f));
			}
			vma = find_vma(mm, vma->vm_end);
		}
	}
	mmap_read_unlock(mm);
}

struct pt_tp {
	const char *name;
	void *probe;
	bool (*wanted)(void);
	struct tracepoint *tp;
	bool registered;
};

static bool pt_always(void) { return true; }
static bool pt_want_dispatch(void) { return pt_major_enabled(PITRACE_MAJOR_DISPATCH); }
static bool pt_want_intr(void) { return pt_major_enabled(PITRACE_MAJOR_INTERRUPT); }

static struct pt_tp pt_tps[] = {
	{ "sched_process_fork", pt_tp_fork, pt_always },
	{ "sched_process_exec", pt_tp_exec, pt_always },
	{ "sched_process_exit", pt_tp_exit, pt_always },
	{ "task_rename", pt_tp_rename, pt_always },
	{ "sched_switch", pt_tp_switch, pt_want_dispatch },
	{ "sched_wakeup", pt_tp_wakeup, pt_want_dispatch },
	{ "sched_wakeup_new", pt_tp_wakeup_new, pt_want_dispatch },
	{ "irq_handler_entry", pt_tp_irq_entry, pt_want_intr },
	{ "irq_handler_exit", pt_tp_irq_exit, pt_want_intr },
	{ "softirq_entry", pt_tp_softirq_entry, pt_want_intr },
	{ "softirq_exit", pt_tp_softirq_exit, pt_want_intr },
};

static void pt_find_tp(struct tracepoint *tp, void *priv)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(pt_tps); i++)
		if (!strcmp(tp->name, pt_tps[i].name))
			pt_tps[i].tp = tp;
}

/* ---- kprobes (optional) -------------------------------------------------- */

static int pt_kp_exit(struct kprobe *kp, struct pt_regs *regs)
{
	struct task_struct *t = current;

	if (!READ_ONCE(pt_active) || (t->flags & PF_KTHREAD) || !t->mm)
		return 0;
	/* the last thread of a process: describe it while its mm exists */
	if (atomic_read(&t->signal->live) != 1)
		return 0;
	pt_describe_tree(t);
	pt_segments_atomic(t->mm, t->tgid);
	return 0;
}

static int pt_kp_exec(struct kprobe *kp, struct pt_regs *regs)
{
	struct task_struct *t = current;

	if (!READ_ONCE(pt_active) || !t->mm || (t->flags & PF_KTHREAD))
		return 0;
	pt_describe_tree(t);
	pt_segments_atomic(t->mm, t->tgid);
	return 0;
}

/* x86_64 syscall wrappers take the user registers as their argument */
static int pt_kp_munmap(struct kprobe *kp, struct pt_regs *regs)
{
#ifdef CONFIG_X86_64
	struct pt_regs *u = (struct pt_regs *)regs->di;

	if (!READ_ONCE(pt_active) || !u)
		return 0;
	pt_munmap(u->di, u->si);
#endif
	return 0;
}

/* perf_event_mmap(vma): every new mapping; current holds its mmap lock */
static int pt_kp_mmap(struct kprobe *kp, struct pt_regs *regs)
{
#ifdef CONFIG_X86_64
	struct vm_area_struct *vma = (struct vm_area_struct *)regs->di;
	char *buf;

	if (!READ_ONCE(pt_active) || !vma || !(vma->vm_flags & VM_EXEC) ||
	    vma->vm_mm != current->mm || !pt_pathbufs)
		return 0;
	buf = pt_pathbufs + (size_t)smp_processor_id() * PATH_MAX;
	pt_write_segment(vma, current->tgid, buf);
#endif
	return 0;
}

static struct kprobe pt_kp_perf_mmap = {
	.symbol_name = "perf_event_mmap", .pre_handler = pt_kp_mmap,
};

static struct kprobe pt_kp_do_exit = {
	.symbol_name = "do_exit", .pre_handler = pt_kp_exit,
};
static struct kprobe pt_kp_new_exec = {
	.symbol_name = "begin_new_exec", .pre_handler = pt_kp_exec,
};
static struct kprobe pt_kp_sys_munmap = {
	.symbol_name = "__x64_sys_munmap", .pre_handler = pt_kp_munmap,
};
static bool pt_kp_exit_on, pt_kp_exec_on, pt_kp_munmap_on;
static bool pt_kp_tried;
/* the kprobe at schedule(): the user part of switch stacks */
static bool pt_kp_sched_on, pt_kp_sched_tried;

u32 pt_src_features(void)
{
	u32 f = 0;

	if (pt_kp_exit_on)
		f |= PITRACE_FEAT_KPROBE_EXIT;
	if (pt_kp_exec_on)
		f |= PITRACE_FEAT_KPROBE_EXEC;
	if (pt_kp_munmap_on)
		f |= PITRACE_FEAT_UNMAP;
	if (pt_kp_mmap_on)
		f |= PITRACE_FEAT_MMAP;
	if (pt_kp_sched_on)
		f |= PITRACE_FEAT_KPROBE_SCHED;
	return f;
}

/* ---- tprof ----------------------------------------------------------------- */

struct pt_cpu {
	struct hrtimer timer;
	struct perf_event *ev;
	bool timer_on;
};

static DEFINE_PER_CPU(struct pt_cpu, pt_cpus);
static int pt_sampling;
static u64 pt_period_ns;

/* ---- call stacks (UNWIND records, see the uapi header) ----------------- */

/*
 * Sample contexts that can nest on one CPU: the hrtimer (hardirq) or the
 * benchmark (irqs off), and an NMI of event-based tprof over either.
 */
#define PT_STACK_NEST	2

struct pt_stack_scratch {
	int nest;
	u64 pcs[PT_STACK_NEST][PITRACE_MAX_STACK];
};

static struct pt_stack_scratch __percpu *pt_stack_scratch;
static u32 pt_stack_depth = PITRACE_MAX_STACK;	/* ENABLE's stack_depth */
static u32 pt_stack_max;	/* at on: the limit, bounded by a segment */

/* ENABLE's stack_depth (tracing off). */
int pt_src_stack_arg(const struct pitrace_majors *m, bool on)
{
	lockdep_assert_held(&pt.lock);
	if (m->reserved || m->stack_depth > PITRACE_MAX_STACK)
		return -EINVAL;
	if (on && m->stack_depth)
		pt_stack_depth = m->stack_depth;
	return 0;
}

/*
 * The kernel part, as perf_callchain_kernel() takes it: the interrupted
 * PC, then the unwinder's return addresses (ORC on Debian's kernels) from
 * the interrupted registers (or, for registers that are not a hardware
 * frame, from their stack pointer).
 */
static noinline u32 pt_stack_kernel(struct pt_regs *regs, u64 *pcs, u32 max,
			   bool *trunc)
{
	struct unwind_state state;
	unsigned long addr;
	u32 n = 0;

	pcs[n++] = regs->ip;
	if (regs->flags & X86_EFLAGS_FIXED)
		unwind_start(&state, current, regs, NULL);
	else
		unwind_start(&state, current, NULL, (unsigned long *)regs->sp);
	for (; !unwind_done(&state); unwind_next_frame(&state)) {
		addr = unwind_get_return_address(&state);
		if (!addr)
			break;
		if (n == max) {
			*trunc = true;
			break;
		}
		pcs[n++] = addr;
	}
	return n;
}

/*
 * One user frame at fp: the saved rbp and the return address, page faults
 * disabled by the caller (a fault ends the read, it is never served).
 */
static bool pt_user_frame(unsigned long fp, unsigned long frame[2])
{
	const unsigned long __user *p = (const unsigned long __user *)fp;

	if (!user_access_begin(p, 2 * sizeof(*p)))
		return false;
	unsafe_get_user(frame[0], p, fault);
	unsafe_get_user(frame[1], p + 1, fault);
	user_access_end();
	return true;
fault:
	user_access_end();
	return false;
}

/*
 * The user part: the PC, then a frame-pointer walk (saved rbp, return
 * address) with page faults disabled: a frame not in memory ends the
 * stack, nothing sleeps.  Frames must move up the stack (that also ends a
 * loop); a 32-bit task gives its PC only.  In an NMI (event-based tprof)
 * each frame goes through copy_from_user_nofault(), which also checks
 * that the NMI did not come in the middle of an address-space switch; a
 * hardirq (the timer) cannot, and reads the frames directly.
 */
static u32 pt_stack_user(struct pt_regs *regs, u64 *pcs, u32 n, u32 max,
			 bool *trunc)
{
	unsigned long fp, frame[2];
	bool nmi = in_nmi(), ok;

	if (n == max) {
		*trunc = true;
		return n;
	}
	pcs[n++] = regs->ip;
	if (!user_64bit_mode(regs))
		return n;
	pagefault_disable();
	for (fp = regs->bp; fp; fp = frame[0]) {
		if (nmi)
			ok = !copy_from_user_nofault(frame,
					(const void __user *)fp, sizeof(frame));
		else
			ok = pt_user_frame(fp, frame);
		if (!ok || !frame[1])
			break;
		if (n == max) {
			*trunc = true;
			break;
		}
		pcs[n++] = frame[1];
		if (frame[0] <= fp)
			break;
	}
	pagefault_enable();
	return n;
}

/* The UNWIND record of the sample just written (regs: interrupted). */
static noinline void pt_stack(struct task_struct *t, struct pt_regs *regs)
{
	struct pitrace_rec_unwind f = { t->tgid, t->pid, 0 };
	struct pt_stack_scratch *sc;
	u32 n = 0, nk = 0, max = READ_ONCE(pt_stack_max);
	bool trunc = false;
	int level;
	u64 *pcs;

	if (!regs || !max)
		return;
	sc = this_cpu_ptr(pt_stack_scratch);
	level = this_cpu_inc_return(pt_stack_scratch->nest) - 1;
	if (level >= PT_STACK_NEST)
		goto out;
	pcs = sc->pcs[level];
	if (!user_mode(regs)) {
		n = nk = pt_stack_kernel(regs, pcs, max, &trunc);
		/*
		 * the user stack below the kernel's: none for kernel threads,
		 * nor for threads never in user mode (io_uring workers)
		 */
		regs = (t->mm && !(t->flags & PF_KTHREAD) && !trunc) ?
			task_pt_regs(t) : NULL;
		if (regs && !user_mode(regs))
			regs = NULL;
	}
	if (regs)
		n = pt_stack_user(regs, pcs, n, max, &trunc);
	f.flags = (nk << PITRACE_UNWIND_KERN_SHIFT) |
		  (trunc ? PITRACE_UNWIND_TRUNCATED : 0);
	pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_UNWIND, PITRACE_UNWIND_TICK,
		 PITRACE_LAYOUT_BYTES, &f, sizeof(f), (const char *)pcs,
		 n * sizeof(u64));
out:
	this_cpu_dec(pt_stack_scratch->nest);
}

/* The most PCs of a stack: the depth limit, and what one segment holds. */
static u32 pt_stack_limit(void)
{
	/* a segment: TIME_HIGH, LOST, BUFFER_FULL and the record */
	u32 room = pt.set->trace[0].seg_size - 2 * PT_TIME_HIGH_SIZE - 64 -
		   PITRACE_REC_HDR_SIZE - sizeof(struct pitrace_rec_unwind) - 4;

	return min_t(u32, pt_stack_depth, room / sizeof(u64));
}

/* At on: the stacks of tprof ticks wanted, and their limit. */
static void pt_stack_start(void)
{
	u32 max = 0;

	if (pt_stack_scratch && pt.set &&
	    pt_major_enabled(PITRACE_MAJOR_UNWIND))
		max = pt_stack_limit();
	WRITE_ONCE(pt_stack_max, max);
}

/* ---- scheduler records: DISPATCH, WAKEUP, UNWIND_SWITCH ------------------ */

/*
 * The stack of a thread that leaves its CPU to wait (UNWIND_SWITCH, after
 * its DISPATCH): the kernel part is taken at the sched_switch tracepoint
 * (stack_trace_save: no user memory), the user part earlier, at the entry
 * of schedule() (a kprobe), where no lock is held: sched_switch runs under
 * the run-queue lock with interrupts off, and a user page fault must never
 * be taken there, even one that is refused.  The kprobe takes the frame-
 * pointer walk of the thread's user stack (faults disabled, at most the
 * depth limit) into its CPU's slot, tagged with the thread and its switch
 * count; sched_switch takes it when the tag is the thread switching out
 * and the count is one less than now (__schedule counts the switch before
 * the tracepoint): no preemption came between, which would have run other
 * threads there.  Without it (the kprobe missing, or the thread came to
 * __schedule another way) the user part is the user PC alone, read from
 * the registers the thread entered the kernel with.
 *
 * A slot is touched only by its CPU: by the kprobe (preemption off) and by
 * the sched_switch probe (interrupts off), which never interrupt each
 * other (neither calls schedule(), an interrupt does not either), so it
 * needs no lock.  task is compared, never dereferenced.
 */
struct pt_switch_scratch {
	struct task_struct *task;	/* whose user stack, or NULL */
	unsigned long switches;		/* task's nvcsw + nivcsw then */
	u32 nuser;
	bool utrunc;
	u64 user[PITRACE_MAX_STACK];
	u64 pcs[PITRACE_MAX_STACK];	/* the record being made */
};

static struct pt_switch_scratch __percpu *pt_switch_scratch;
/* at on: the depth limit with dispatch and callstack; 0: no switch stacks */
static u32 pt_switch_max;

static int pt_kp_schedule(struct kprobe *kp, struct pt_regs *regs)
{
	struct task_struct *t = current;
	struct pt_switch_scratch *sc;
	struct pt_regs *u;
	u32 max = READ_ONCE(pt_switch_max);
	bool trunc = false;

	if (!max || !READ_ONCE(pt_active) || task_is_running(t) || !t->mm ||
	    (t->flags & PF_KTHREAD))
		return 0;
	u = task_pt_regs(t);
	if (!user_mode(u))
		return 0;	/* never in user mode (io_uring worker) */
	lockdep_assert_preemption_disabled();
	sc = this_cpu_ptr(pt_switch_scratch);
	sc->nuser = pt_stack_user(u, sc->user, 0, max, &trunc);
	sc->utrunc = trunc;
	sc->switches = t->nvcsw + t->nivcsw;
	sc->task = t;
	return 0;
}

static struct kprobe pt_kp_sched = {
	.symbol_name = "schedule", .pre_handler = pt_kp_schedule,
};

/*
 * The kernel part, from the tracepoint's caller on (ret: the probe's
 * return address, in __schedule or the tracepoint's iterator): the frames
 * of this module's probe are left out.
 */
static noinline u32 pt_switch_kernel(u64 *pcs, u32 max, unsigned long ret,
				     bool *trunc)
{
	unsigned long *st = (unsigned long *)pcs;
	u32 n, i, skip = 0;

	BUILD_BUG_ON(sizeof(unsigned long) != sizeof(u64));
	n = stack_trace_save(st, max, 0);
	for (i = 0; i < n && i < 16; i++) {
		if (st[i] == ret) {
			skip = i;
			break;
		}
	}
	if (skip) {
		n -= skip;
		memmove(pcs, pcs + skip, n * sizeof(u64));
	}
	/* a full store may have been cut: the limit was reached */
	*trunc = n + skip == max;
	return n;
}

/* The PCs of prev's UNWIND_SWITCH into sc->pcs; the record's flags. */
static u32 pt_switch_stack(struct task_struct *prev,
			   struct pt_switch_scratch *sc, u32 max,
			   unsigned long ret, u32 *flags)
{
	struct pt_regs *u;
	bool trunc = false;
	u32 nk, n, nu;

	nk = n = pt_switch_kernel(sc->pcs, max, ret, &trunc);
	if (sc->task == prev &&
	    sc->switches + 1 == prev->nvcsw + prev->nivcsw) {
		nu = min(sc->nuser, max - n);
		memcpy(sc->pcs + n, sc->user, nu * sizeof(u64));
		n += nu;
		trunc = trunc || nu < sc->nuser || sc->utrunc;
	} else if (prev->mm && !(prev->flags & PF_KTHREAD) && !trunc) {
		u = task_pt_regs(prev);
		if (user_mode(u) && n < max)
			sc->pcs[n++] = u->ip;
	}
	sc->task = NULL;
	*flags = (nk << PITRACE_UNWIND_KERN_SHIFT) |
		 (trunc ? PITRACE_UNWIND_TRUNCATED : 0);
	return n;
}

/*
 * DISPATCH, and with callstack the UNWIND_SWITCH of a thread leaving to
 * wait, both with one time stamp and nothing between them on this CPU.
 * prev_state: the task's state as __schedule read it, with its exit state
 * (X or Z) added for an exiting thread, as sched_switch's own report does;
 * 0 for a preemption (the thread stays runnable whatever the state says).
 */
static void pt_tp_switch(void *data, bool preempt, struct task_struct *prev,
			 struct task_struct *next, unsigned int prev_state)
{
	struct pitrace_rec_dispatch f = {
		prev->tgid, prev->pid, next->tgid, next->pid,
		preempt ? 0 : prev_state | READ_ONCE(prev->exit_state),
	};
	struct pitrace_rec_unwind uf = { prev->tgid, prev->pid, 0 };
	unsigned long ret = (unsigned long)__builtin_return_address(0);
	u32 max = READ_ONCE(pt_switch_max), n = 0;
	struct pt_switch_scratch *sc = NULL;
	struct pt_wsess w;

	if (!READ_ONCE(pt_active) ||
	    !pt_major_enabled(PITRACE_MAJOR_DISPATCH))
		return;
	lockdep_assert_irqs_disabled();
	if (max && (f.prev_state & 0xff) && prev->pid &&
	    !(f.prev_state & (EXIT_DEAD | EXIT_ZOMBIE))) {
		sc = this_cpu_ptr(pt_switch_scratch);
		n = pt_switch_stack(prev, sc, max, ret, &uf.flags);
	}
	if (!pt_write_begin(&w, PITRACE_KIND_TRACE))
		return;
	if (pt_write_rec(&w, PITRACE_MAJOR_DISPATCH, PITRACE_DISPATCH_SWITCH,
			 PITRACE_LAYOUT_FIXED, &f, sizeof(f), NULL, 0) && n)
		pt_write_rec(&w, PITRACE_MAJOR_UNWIND, PITRACE_UNWIND_SWITCH,
			     PITRACE_LAYOUT_BYTES, &uf, sizeof(uf),
			     (const char *)sc->pcs, n * sizeof(u64));
	pt_write_end(&w);
}

/* WAKEUP: p made runnable by the thread running here (0: the idle task). */
static void pt_wakeup(struct task_struct *p, u32 flags)
{
	struct task_struct *w = current;
	struct pitrace_rec_wakeup f = {
		.pid = p->tgid, .tid = p->pid, .target_cpu = task_cpu(p),
		.waker_pid = w->pid ? w->tgid : 0, .waker_tid = w->pid,
		.flags = flags,
	};

	if (!READ_ONCE(pt_active) ||
	    !pt_major_enabled(PITRACE_MAJOR_DISPATCH))
		return;
	pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_DISPATCH,
		 PITRACE_DISPATCH_WAKEUP, PITRACE_LAYOUT_FIXED, &f, sizeof(f),
		 NULL, 0);
}

static void pt_tp_wakeup(void *data, struct task_struct *p)
{
	pt_wakeup(p, 0);
}

static void pt_tp_wakeup_new(void *data, struct task_struct *p)
{
	pt_wakeup(p, PITRACE_WAKEUP_NEW);
}

/* At on: switch stacks wanted (dispatch and callstack), and their limit. */
static void pt_switch_start(void)
{
	u32 max = 0;

	if (pt_switch_scratch && pt.set &&
	    pt_major_enabled(PITRACE_MAJOR_DISPATCH) &&
	    pt_major_enabled(PITRACE_MAJOR_UNWIND))
		max = pt_stack_limit();
	WRITE_ONCE(pt_switch_max, max);
}

/* inlined: the timer path is as short as without call stacks */
static __always_inline void pt_sample(struct pt_regs *regs, u32 minor,
				      u32 event)
{
	struct task_struct *t = current;
	struct pitrace_rec_tprof_event f;
	u32 flen = sizeof(f);

	f.pid = t->tgid;
	f.tid = t->pid;
	f.ip = regs ? instruction_pointer(regs) : 0;
	f.flags = (regs && !user_mode(regs)) ? PITRACE_TPROF_KERNEL : 0;
	f.event = event;
	/* a tick is an event record without its last field */
	BUILD_BUG_ON(offsetof(struct pitrace_rec_tprof_event, event) !=
		     sizeof(struct pitrace_rec_tprof_tick));
	if (minor == PITRACE_TPROF_TICK)
		flen = sizeof(struct pitrace_rec_tprof_tick);
	if (pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_TPROF, minor,
		     PITRACE_LAYOUT_FIXED, &f, flen, NULL, 0) &&
	    READ_ONCE(pt_stack_max))
		pt_stack(t, regs);
}

static enum hrtimer_restart pt_tick(struct hrtimer *timer)
{
	if (!READ_ONCE(pt_sampling) || !READ_ONCE(pt_active))
		return HRTIMER_NORESTART;
	pt_sample(get_irq_regs(), PITRACE_TPROF_TICK, 0);
	hrtimer_forward_now(timer, ns_to_ktime(pt_period_ns));
	return HRTIMER_RESTART;
}

static void pt_timer_start(void *unused)
{
	struct pt_cpu *c = this_cpu_ptr(&pt_cpus);

	hrtimer_start(&c->timer, ns_to_ktime(pt_period_ns),
		      HRTIMER_MODE_REL_PINNED);
	c->timer_on = true;
}

static void pt_overflow(struct perf_event *ev, struct perf_sample_data *d,
			struct pt_regs *regs)
{
	pt_sample(regs, PITRACE_TPROF_EVENT, (u32)ev->attr.config);
}

static void pt_event_attr(struct perf_event_attr *a, u32 type, u64 config,
			  u64 period)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->type = type;
	a->config = config;
	a->sample_period = period;
	a->pinned = 1;
}

static int pt_event_err(long err)
{
	/* no such PMU or event here: say so with one code */
	if (err == -ENOENT || err == -EOPNOTSUPP || err == -ENODEV ||
	    err == -EINVAL)
		return -ENODEV;
	return (int)err;
}

int pt_tprof_check_event(u32 type, u64 config, u64 period)
{
	struct perf_event_attr a;
	struct perf_event *ev;
	int cpu;

	pt_event_attr(&a, type, config, period);
	a.disabled = 1;
	cpu = get_cpu();
	put_cpu();
	ev = perf_event_create_kernel_counter(&a, cpu, NULL, NULL, NULL);
	if (IS_ERR(ev))
		return pt_event_err(PTR_ERR(ev));
	perf_event_release_kernel(ev);
	return 0;
}

/* this CPU's sampler (process context on the CPU, hot-plug lock held) */
static void pt_tprof_cpu_stop(struct pt_cpu *c)
{
	if (c->timer_on) {
		hrtimer_cancel(&c->timer);
		c->timer_on = false;
	}
	if (c->ev) {
		perf_event_release_kernel(c->ev);
		c->ev = NULL;
	}
}

static void pt_tprof_stop(void)
{
	int cpu;

	cpus_read_lock();
	WRITE_ONCE(pt_sampling, 0);
	WRITE_ONCE(pt_stack_max, 0);
	for_each_possible_cpu(cpu)
		pt_tprof_cpu_stop(per_cpu_ptr(&pt_cpus, cpu));
	cpus_read_unlock();
}

static int pt_tprof_event_start(int cpu)
{
	struct perf_event_attr a;
	struct perf_event *ev;

	pt_event_attr(&a, pt.event_type, pt.event_config, pt.rate_hz);
	ev = perf_event_create_kernel_counter(&a, cpu, NULL, pt_overflow, NULL);
	if (IS_ERR(ev))
		return pt_event_err(PTR_ERR(ev));
	per_cpu_ptr(&pt_cpus, cpu)->ev = ev;
	return 0;
}

/*
 * pt_sampling, pt_use_event and the per-CPU samplers change only under
 * cpus_read_lock: the hot-plug callbacks below see them stable.
 */
static bool pt_use_event;

static int pt_tprof_start(void)
{
	int cpu, err = 0;

	WRITE_ONCE(pt_stack_max, 0);
	if (!pt_major_enabled(PITRACE_MAJOR_TPROF))
		return 0;
	pt_stack_start();
	cpus_read_lock();
	WRITE_ONCE(pt_sampling, 1);
	pt_use_event = pt.use_event;
	if (!pt_use_event) {
		pt_period_ns = NSEC_PER_SEC / pt.rate_hz;
		on_each_cpu(pt_timer_start, NULL, 1);
		cpus_read_unlock();
		return 0;
	}
	for_each_online_cpu(cpu) {
		err = pt_tprof_event_start(cpu);
		if (err)
			break;
	}
	cpus_read_unlock();
	if (err)
		pt_tprof_stop();
	return err;
}

/*
 * CPU hot-plug, on the CPU itself: a CPU coming online while tprof runs
 * starts its timer or event; one going offline stops them (a pinned
 * hrtimer would otherwise move to another CPU and sample it twice, and
 * perf detaches the events of a dead CPU for good).
 */
int pt_src_cpu_online(unsigned int cpu)
{
	if (!READ_ONCE(pt_sampling))
		return 0;
	if (!pt_use_event) {
		pt_timer_start(NULL);
		return 0;
	}
	if (pt_tprof_event_start(cpu))
		pr_warn_ratelimited("pitrace: tprof: no event on CPU %u after it came online\n",
				    cpu);
	return 0;
}

int pt_src_cpu_offline(unsigned int cpu)
{
	pt_tprof_cpu_stop(per_cpu_ptr(&pt_cpus, cpu));
	return 0;
}

/* ---- start / stop ---------------------------------------------------------- */

/*
 * Probes are attached on the first on that needs them and stay attached
 * until the module unloads: they return at once while tracing is off or
 * their record type is disabled.  Attaching patches kernel text
 * (text_poke_bp: IPIs to every CPU), which is too heavy to repeat at every
 * on and off.
 */
static int pt_attach(void)
{
	size_t i;
	int err;

	for (i = 0; i < ARRAY_SIZE(pt_tps); i++) {
		struct pt_tp *p = &pt_tps[i];

		if (p->registered || !p->tp || !p->wanted())
			continue;
		err = tracepoint_probe_register(p->tp, p->probe, NULL);
		if (err) {
			pr_warn("pitrace: tracepoint %s: error %d\n", p->name,
				err);
			if (p->wanted != pt_always)
				return err;
			continue;
		}
		p->registered = true;
	}
	/* user stacks of waits: only when asked for (it runs at each schedule()) */
	if (!pt_kp_sched_tried && pt_switch_scratch &&
	    pt_major_enabled(PITRACE_MAJOR_DISPATCH) &&
	    pt_major_enabled(PITRACE_MAJOR_UNWIND)) {
		pt_kp_sched_tried = true;
		pt_kp_sched_on = register_kprobe(&pt_kp_sched) == 0;
		if (!pt_kp_sched_on)
			pr_info("pitrace: kprobe schedule: not attached; the stacks of waits have the user PC only (see docs/kmod.md)\n");
	}
	if (!pt_kp_tried) {
		pt_kp_tried = true;
		pt_kp_exit_on = register_kprobe(&pt_kp_do_exit) == 0;
		pt_kp_exec_on = register_kprobe(&pt_kp_new_exec) == 0;
		pt_kp_munmap_on = register_kprobe(&pt_kp_sys_munmap) == 0;
		pt_kp_mmap_on = register_kprobe(&pt_kp_perf_mmap) == 0;
		if (!pt_kp_exit_on || !pt_kp_exec_on || !pt_kp_munmap_on ||
		    !pt_kp_mmap_on)
			pr_info("pitrace: kprobes: do_exit %d, begin_new_exec %d, __x64_sys_munmap %d, perf_event_mmap %d (see docs/kmod.md)\n",
				pt_kp_exit_on, pt_kp_exec_on, pt_kp_munmap_on,
				pt_kp_mmap_on);
	}
	return 0;
}

static void pt_detach(void)
{
	size_t i;

	if (pt_kp_exit_on)
		unregister_kprobe(&pt_kp_do_exit);
	if (pt_kp_exec_on)
		unregister_kprobe(&pt_kp_new_exec);
	if (pt_kp_munmap_on)
		unregister_kprobe(&pt_kp_sys_munmap);
	if (pt_kp_mmap_on)
		unregister_kprobe(&pt_kp_perf_mmap);
	if (pt_kp_sched_on)
		unregister_kprobe(&pt_kp_sched);
	pt_kp_sched_on = false;
	pt_kp_mmap_on = false;
	pt_kp_exit_on = false;
	pt_kp_exec_on = false;
	pt_kp_munmap_on = false;
	for (i = 0; i < ARRAY_SIZE(pt_tps); i++) {
		struct pt_tp *p = &pt_tps[i];

		if (p->registered)
			tracepoint_probe_unregister(p->tp, p->probe, NULL);
		p->registered = false;
	}
	tracepoint_synchronize_unregister();
}

int pt_src_start(void)
{
	int err;

	if (!pt_described) {
		pt_described = vzalloc(2 * BITS_TO_LONGS(PID_MAX_LIMIT) *
				       sizeof(long));
		if (!pt_described)
			return -ENOMEM;
		pt_segs_done = pt_described + BITS_TO_LONGS(PID_MAX_LIMIT);
	} else {
		memset(pt_described, 0,
		       2 * BITS_TO_LONGS(PID_MAX_LIMIT) * sizeof(long));
	}
	err = pt_attach();
	if (err)
		return err;
	pt_switch_start();
	return pt_tprof_start();
}

/*
 * Stops tprof.  The probes stay attached but idle once pt_active is 0;
 * the caller waits for running ones with synchronize_rcu().
 */
void pt_src_stop(void)
{
	WRITE_ONCE(pt_switch_max, 0);
	pt_tprof_stop();
}

/*
 * Describe live tasks from the control thread (may sleep).  At on: every
 * process and thread by name.  At off (segments): every user process's
 * tree and executable segments.
 */
void pt_describe_live(bool segments)
{
	struct task_struct *g, *t;
	pid_t *pids;
	int n = 0, max = 0, i;
	char *buf;

	if (!segments) {
		rcu_read_lock();
		for_each_process_thread(g, t) {
			if (t == g) {
				pt_mark_described(g->tgid);
				pt_write_process(g);
			}
			pt_write_thread(t);
		}
		rcu_read_unlock();
		return;
	}
	rcu_read_lock();
	for_each_process(g)
		max++;
	rcu_read_unlock();
	max += 64;
	pids = kvmalloc_array(max, sizeof(*pids), GFP_KERNEL);
	buf = kmalloc(PATH_MAX, GFP_KERNEL);
	if (!pids || !buf)
		goto out;
	rcu_read_lock();
	for_each_process(g) {
		if (n >= max)
			break;
		if (!(g->flags & PF_KTHREAD) && !pt_segs_written(g->tgid))
			pids[n++] = g->tgid;
	}
	rcu_read_unlock();
	for (i = 0; i < n; i++) {
		struct task_struct *p;
		struct mm_struct *mm;
		struct pid *pid = find_get_pid(pids[i]);

		p = pid ? get_pid_task(pid, PIDTYPE_PID) : NULL;
		put_pid(pid);
		if (!p)
			continue;
		pt_describe_tree(p);
		mm = get_task_mm(p);
		if (mm) {
			mmap_read_lock(mm);
			pt_write_segments_locked(mm, p->tgid, buf);
			mmap_read_unlock(mm);
			mmput(mm);
		}
		put_task_struct(p);
		cond_resched();
	}
out:
	kfree(buf);
	kvfree(pids);
}

/* BENCH: the tprof path count times, as from the timer; TSC delta. */
u64 pt_bench_tprof(u32 count)
{
	struct pt_regs *regs = task_pt_regs(current);
	unsigned long flags;
	u64 total = 0, t0;
	u32 i, j;

	for (i = 0; i < count; i += 1000) {
		u32 m = min(count - i, 1000U);

		preempt_disable();
		t0 = rdtsc_ordered();
		for (j = 0; j < m; j++) {
			/* as in the timer: the UNWIND right after its tick */
			local_irq_save(flags);
			pt_sample(regs, PITRACE_TPROF_TICK, 0);
			local_irq_restore(flags);
		}
		total += rdtsc_ordered() - t0;
		preempt_enable();
		cond_resched();
	}
	return total;
}

int pt_src_init(void)
{
	int cpu;

	for_each_kernel_tracepoint(pt_find_tp, NULL);
	for_each_possible_cpu(cpu) {
		struct pt_cpu *c = per_cpu_ptr(&pt_cpus, cpu);

		hrtimer_init(&c->timer, CLOCK_MONOTONIC,
			     HRTIMER_MODE_REL_PINNED);
		c->timer.function = pt_tick;
	}
	pt_pathbufs = kvmalloc_array(nr_cpu_ids, PATH_MAX, GFP_KERNEL);
	if (!pt_pathbufs)
		return -ENOMEM;
	pt_stack_scratch = alloc_percpu(struct pt_stack_scratch);
	pt_switch_scratch = alloc_percpu(struct pt_switch_scratch);
	if (!pt_stack_scratch || !pt_switch_scratch) {
		free_percpu(pt_stack_scratch);
		free_percpu(pt_switch_scratch);
		pt_stack_scratch = NULL;
		pt_switch_scratch = NULL;
		kvfree(pt_pathbufs);
		pt_pathbufs = NULL;
		return -ENOMEM;
	}
	return 0;
}

void pt_src_exit(void)
{
	pt_src_stop();
	pt_detach();
	kvfree(pt_pathbufs);
	pt_pathbufs = NULL;
	free_percpu(pt_stack_scratch);
	pt_stack_scratch = NULL;
	free_percpu(pt_switch_scratch);
	pt_switch_scratch = NULL;
	vfree(pt_described);
	pt_described = NULL;
	pt_segs_done = NULL;
}
