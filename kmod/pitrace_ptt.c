// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_ptt.c - PTT, per-thread metric virtualization (PI Figure 5).
 *
 * A thread maps its own work area (struct pitrace_ptt_area, one page) from
 * a /dev/pitrace file on which PTT_INIT chose the metrics, or a tool asks
 * the module to keep an area for another thread (PTT_WATCH) and reads it
 * with PTT_READ.  The module keeps the area current so that user space
 * computes the thread's metric without a system call:
 * accum + ((rdtsc - last) & live).
 *
 *   sched_switch:        prev's area: accum += now - last;
 *                        next's area: last = now, cpu, dispatches++.
 *   interrupt entry:     (outermost) the running thread's area is charged
 *                        up to now; the CPU's interrupt bucket starts.
 *   interrupt exit:      (outermost) the elapsed values go to the CPU's
 *                        bucket and to the area's intr_time; last = now.
 *   sys_enter, sys_exit: (files with PITRACE_PTT_INIT_SYSCALLS) the area
 *                        is charged up to now at both; what accum grew
 *                        by in between goes to sys_time, syscalls++.
 *   page_fault_user, handle_mm_fault's return: (the same files, where the
 *                        kretprobe registers) likewise for the thread's
 *                        user page faults: fault_time, faults++.
 *   __rseq_handle_notify_resume's call and return: (the same files, where
 *                        the kretprobe registers) likewise for the rseq
 *                        update on the way back to user mode after a
 *                        switch: resume_time, resumes++; and for the
 *                        switch_fpu_return that follows on that way.
 *   sched_process_exit:  the area stops (dead = 1).
 *   sched_process_exec:  an exec that changes the thread's rights or
 *                        leaves it not dumpable stops it (dead = 2).
 *
 * "now" is a vector: the TSC and every active perf counter slot, read on
 * the current CPU.  A slot is a per-CPU pinned perf_event counter (type,
 * config) shared by all files that ask for it; each metric of a file
 * points at the TSC or at a slot.  Perf counters are read with the PMU's
 * read method on their own CPU, interrupts off (see ptt_read_counter).
 *
 * Areas are found from tasks with an RCU hash keyed by the task pointer,
 * and each CPU keeps a pointer to the running thread's area, so that the
 * interrupt hooks need no lookup.  The hooks never sleep or allocate.
 *
 * Lifetime: an area (struct ptt_ent) is referenced by its file's list and
 * by its mapping (if any).  It leaves the hash at PTT_TERM, munmap, close
 * of the file or thread exit.  Stopping areas costs two RCU grace periods
 * (one before the CPUs' pointers to them are cleared, one after), paid
 * once per batch: PTT_TERM and close stop all areas of the file together,
 * outside ptt_lock; munmap (mmap_lock held) never waits: it hands the area
 * to a worker (ptt_reap) that stops the areas queued so far as one batch.
 * The page and the entry are freed after a grace period once both
 * references are gone.  Mappings hold the file, so no area outlives the
 * module.  Slots are released when the last file using them terminates,
 * after a grace period (no hook still reads them).  Perf counters follow
 * CPU hot-plug (pt_ptt_cpu_online/offline): a CPU coming online gets a
 * counter for every active slot, continuing from the slot's last value.
 *
 * Threads created by a thread that has an area of a PTT_WATCH (not a
 * mapping) get their own area of the same file at creation
 * (sched_process_fork), so short-lived threads of a watched process are
 * counted from their first instruction.
 */
#include <linux/binfmts.h>
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/interrupt.h>
#include <linux/kprobes.h>
#include <linux/llist.h>
#include <linux/mm.h>
#include <linux/percpu.h>
#include <linux/perf_event.h>
#include <linux/pid.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/tracepoint.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include <asm/irq_regs.h>
#include <asm/msr.h>

#include "pitrace_int.h"

#define PTT_NSLOTS	PITRACE_PTT_MAX_SLOTS
#define PTT_TSC		PTT_NSLOTS	/* "slot" of the TSC in value vectors */
#define PTT_NVALS	(PTT_NSLOTS + 1)

struct ptt_ent {
	struct hlist_node hnode;	/* ptt_hash, RCU; ptt_hash_lock */
	struct list_head lnode;		/* ctx->ents; ptt_lock */
	struct kref ref;		/* the ctx list and the mapping */
	struct task_struct *task;	/* key only: never dereferenced */
	struct pid *tid, *tgid;		/* for PTT_READ */
	char comm[TASK_COMM_LEN];
	struct pitrace_ptt_area *a;
	struct pitrace_ptt_sys *sys;	/* in a's page; NULL: not measured */
	struct page *page;
	u32 nmetrics;
	u8 slot[PITRACE_PTT_MAX_METRICS];	/* PTT_TSC or a perf slot */
	bool mapped;
	bool in_sys;			/* between its sys_enter and sys_exit */
	u64 sys0[PITRACE_PTT_MAX_METRICS];	/* accum at that sys_enter */
	bool in_fault;			/* since its last page_fault_user */
	bool fault_counted;		/* that fault is in faults */
	u64 flt0[PITRACE_PTT_MAX_METRICS];	/* accum at its last edge */
	bool in_resume;			/* inside its rseq update */
	bool res_fpu;			/* that update ended: its FPU reload next */
	bool in_fpu;			/* inside that reload */
	u64 res0[PITRACE_PTT_MAX_METRICS];	/* accum at that call */
	bool hashed;			/* ptt_hash_lock */
	bool on_list;			/* ptt_list_lock */
	struct llist_node reap;		/* ptt_reap_list: munmap'd, to stop */
	struct list_head stop;		/* a batch being stopped */
	bool stopping;			/* out of the hash, being stopped */
	struct ptt_ctx *ctx;		/* its file (valid while on_list) */
	struct rcu_head rcu;
};

struct ptt_ctx {
	u32 nmetrics;			/* 0: no PTT_INIT (or after PTT_TERM) */
	u32 flags;			/* PITRACE_PTT_INIT_* */
	u8 slot[PITRACE_PTT_MAX_METRICS];
	struct list_head ents;
};

struct ptt_cpu {
	struct ptt_ent *cur;		/* the running thread's area */
	u64 base[PTT_NSLOTS];		/* added to ev[s]'s count (hot-plug) */
	u32 depth;			/* interrupt nesting */
	unsigned long mask0;		/* slots active at the outermost entry */
	u64 start[PTT_NVALS];		/* values at the outermost entry */
	u64 val[PTT_NSLOTS];		/* last value read of each slot */
	u64 nintr;
	u64 bucket[PTT_NVALS];		/* spent in interrupts */
	bool resched;			/* an interrupt left need_resched set */
	unsigned long rmask;		/* slots read at that exit */
	u64 rstart[PTT_NVALS];		/* values at that exit */
	struct perf_event *ev[PTT_NSLOTS];
};

/*
 * A perf counter on every online CPU.  refs under ptt_lock; type, config,
 * in_use and the per-CPU events change only under ptt_lock and
 * cpus_read_lock, so the hot-plug callbacks (which run with the hot-plug
 * lock held for writing) read them without ptt_lock.
 */
struct ptt_slot {
	u32 type;
	u64 config;
	int refs;
	bool in_use;			/* events exist (refs, or draining) */
};

static DEFINE_PER_CPU(struct ptt_cpu, ptt_cpus);
static DEFINE_HASHTABLE(ptt_hash, 10);
static DEFINE_SPINLOCK(ptt_hash_lock);
/* control; never held over user copies nor over an RCU grace period */
static DEFINE_MUTEX(ptt_lock);
static DEFINE_SPINLOCK(ptt_list_lock);	/* every ctx->ents, ent->on_list */
static LLIST_HEAD(ptt_reap_list);
static void ptt_reap(struct work_struct *w);
static DECLARE_WORK(ptt_reap_work, ptt_reap);
static int ptt_nareas;			/* hashed areas (ptt_hash_lock) */
static bool ptt_attached;		/* ptt_lock */
static bool ptt_sys_attached;		/* ptt_lock */
/* the fault probes: set under ptt_lock, read by ptt_ent_new anywhere */
static bool ptt_fault_attached;
static bool ptt_krp_registered;		/* ptt_lock */
/* the resume probe: likewise */
static bool ptt_resume_attached;
static bool ptt_krp_res_registered;	/* ptt_lock */
static bool ptt_krp_fpu_registered;	/* ptt_lock */
static struct ptt_slot ptt_slots[PTT_NSLOTS];
static unsigned long ptt_slot_mask;	/* active slots; hooks read it */

/* ---- the area ---------------------------------------------------------- */

/*
 * The area's sequence count (odd while it changes).  The barriers pair
 * with the smp_rmb()s of ptt_snapshot (PTT_READ) and with the atomic
 * loads of seq around the copy in user space (libperfutil/ptt, reading
 * the mapped area): seq odd is seen before the fields change, and the
 * fields before seq even again.
 */
static inline void ptt_begin(struct pitrace_ptt_area *a)
{
	WRITE_ONCE(a->seq, a->seq + 1);
	smp_wmb();	/* pairs with ptt_snapshot's second smp_rmb() */
}

static inline void ptt_end(struct pitrace_ptt_area *a)
{
	smp_wmb();	/* pairs with ptt_snapshot's first smp_rmb() */
	WRITE_ONCE(a->seq, a->seq + 1);
}

/*
 * The count of a CPU-bound counter of this CPU, interrupts off.
 *
 * This is the core of perf_event_read_local(), which is not exported to
 * modules (the exported perf_event_read_value() takes a mutex and may
 * send an IPI: not from a scheduler or interrupt hook).  For an active
 * event bound to this CPU (no inherit, no group), perf_event_read_local()
 * does exactly: if event->oncpu == smp_processor_id(),
 * event->pmu->read(event); then local64_read(&event->count).  Kernel
 * versions checked: 6.1 (Debian 12, what the VM test runs); re-check
 * kernel/events/core.c when adding a version.  A disabled or not yet
 * scheduled event (oncpu != this CPU) keeps its last value here.  The
 * build fails when the members this relies on change type
 * (pt_ptt_build_checks).
 */
static __always_inline bool ptt_read_counter(struct perf_event *ev, u64 *v)
{
	if (READ_ONCE(ev->oncpu) != smp_processor_id())
		return false;
	ev->pmu->read(ev);
	*v = local64_read(&ev->count);
	return true;
}

static void __maybe_unused pt_ptt_build_checks(void)
{
	struct perf_event *ev = NULL;

	BUILD_BUG_ON(!__same_type(ev->oncpu, int));
	BUILD_BUG_ON(!__same_type(ev->count, local64_t));
	BUILD_BUG_ON(!__same_type(ev->pmu, struct pmu *));
	BUILD_BUG_ON(!__same_type(ev->pmu->read,
				  void (*)(struct perf_event *)));
}

/*
 * The values of this CPU now: the TSC and each active slot.  Interrupts
 * off.  Returns the slots read.
 */
static __always_inline unsigned long ptt_now(struct ptt_cpu *c, u64 *now)
{
	unsigned long m = READ_ONCE(ptt_slot_mask), r = m;

	now[PTT_TSC] = rdtsc();
	while (m) {
		unsigned int s = __ffs(m);
		struct perf_event *ev = READ_ONCE(c->ev[s]);
		u64 v;

		m &= m - 1;
		if (ev && ptt_read_counter(ev, &v))
			c->val[s] = c->base[s] + v;
		now[s] = c->val[s];
	}
	return r;
}

/* accum += now - last, last = now (caller between begin and end) */
static inline void ptt_charge(struct ptt_ent *e, const u64 *now)
{
	struct pitrace_ptt_area *a = e->a;
	u32 i;

	for (i = 0; i < e->nmetrics; i++) {
		u64 v = now[e->slot[i]];

		a->accum[i] += v - a->last[i];
		a->last[i] = v;
	}
}

static inline void ptt_start(struct ptt_ent *e, const u64 *now)
{
	u32 i;

	for (i = 0; i < e->nmetrics; i++)
		e->a->last[i] = now[e->slot[i]];
}

static struct ptt_ent *ptt_lookup(struct task_struct *t)
{
	struct ptt_ent *e;

	hash_for_each_possible_rcu_notrace(ptt_hash, e, hnode,
					   (unsigned long)t)
		if (e->task == t)
			return e;
	return NULL;
}

/* ---- hooks (preemption or interrupts disabled; never sleep) ------------ */

/*
 * d = now - start for the TSC and the slots in m (0 for the others), added
 * to the CPU's bucket.
 */
static inline void ptt_bucket_add(struct ptt_cpu *c, const u64 *now,
				  const u64 *start, unsigned long m, u64 *d)
{
	u32 i;

	d[PTT_TSC] = now[PTT_TSC] - start[PTT_TSC];
	c->bucket[PTT_TSC] += d[PTT_TSC];
	for (i = 0; i < PTT_NSLOTS; i++) {
		d[i] = 0;
		if (m & BIT(i)) {
			d[i] = now[i] - start[i];
			c->bucket[i] += d[i];
		}
	}
}

/*
 * prev is preempted right after an interrupt of its user mode that set
 * need_resched: the way from that interrupt's exit to this switch is the
 * interrupt's doing (the scheduler run it caused), so it goes to the
 * CPU's bucket like the interrupt itself, not to the thread.
 */
static void ptt_resched(struct ptt_cpu *c, struct ptt_ent *e, const u64 *now,
			unsigned long m)
{
	u64 d[PTT_NVALS];
	u32 i;

	ptt_bucket_add(c, now, c->rstart, m & c->rmask, d);
	for (i = 0; i < e->nmetrics; i++) {
		e->a->intr_time[i] += d[e->slot[i]];
		e->a->last[i] = now[e->slot[i]];
	}
}

static void ptt_tp_switch(void *data, bool preempt, struct task_struct *prev,
			  struct task_struct *next, unsigned int prev_state)
{
	u64 now[PTT_NVALS];
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long m;

	if (!READ_ONCE(ptt_nareas))
		return;
	c = this_cpu_ptr(&ptt_cpus);
	m = ptt_now(c, now);
	e = c->cur;
	if (e && e->task == prev) {
		ptt_begin(e->a);
		if (c->resched && prev_state == TASK_RUNNING)
			ptt_resched(c, e, now, m);
		else
			ptt_charge(e, now);
		ptt_end(e->a);
	}
	c->resched = false;
	e = ptt_lookup(next);
	c->cur = e;
	if (!e)
		return;
	ptt_begin(e->a);
	ptt_start(e, now);
	e->a->cpu = smp_processor_id();
	e->a->dispatches++;
	ptt_end(e->a);
}

/* Stop the current thread's area, if it has one, charged up to now. */
static void ptt_stop_current(u32 why)
{
	u64 now[PTT_NVALS];
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	spin_lock_irqsave(&ptt_hash_lock, fl);
	e = ptt_lookup(current);
	if (e) {
		hash_del_rcu(&e->hnode);
		e->hashed = false;
		ptt_nareas--;
		/* the thread is current: only this CPU can point at its area */
		c = this_cpu_ptr(&ptt_cpus);
		ptt_begin(e->a);
		if (c->cur == e) {
			ptt_now(c, now);
			ptt_charge(e, now);
			c->cur = NULL;
		}
		e->a->dead = why;
		ptt_end(e->a);
	}
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
}

static void ptt_tp_exit(void *data, struct task_struct *p)
{
	/*
	 * PF_EXITING is set (exit_signals) before this hook runs; the
	 * barrier pairs with the one in ptt_ent_add between counting a new
	 * area and checking PF_EXITING: either this load sees the area
	 * counted (and the lookup in ptt_stop_current, under the lock,
	 * finds it), or ptt_ent_add sees PF_EXITING and does not keep the
	 * area.
	 */
	smp_mb();
	if (!READ_ONCE(ptt_nareas))
		return;
	ptt_stop_current(PITRACE_PTT_DEAD_STOPPED);	/* p is current */
}

/*
 * sched_process_exec (the thread's own context, the new image's
 * credentials committed): an exec that gave the thread rights its
 * watcher may lack, or left it not dumpable (pt_exec_secure), stops its
 * area there (dead = PITRACE_PTT_DEAD_EXEC), as the kernel ends the
 * thread's own perf events at such an exec.  A thread's mapped area went
 * with its old memory already (ptt_vm_close).
 */
static void ptt_tp_exec(void *data, struct task_struct *p, pid_t old_pid,
			struct linux_binprm *bprm)
{
	if (!READ_ONCE(ptt_nareas) || !pt_exec_secure(bprm))
		return;
	ptt_stop_current(PITRACE_PTT_DEAD_EXEC);
}

static void ptt_intr_entry(void)
{
	u64 now[PTT_NVALS];
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	if (c->depth++ == 0) {
		c->resched = false;
		c->mask0 = ptt_now(c, now);
		memcpy(c->start, now, sizeof(now));
		e = c->cur;
		if (e) {
			e->res_fpu = false;	/* not on a resume's way out */
			ptt_begin(e->a);
			ptt_charge(e, now);
			e->a->interrupts++;
			ptt_end(e->a);
		}
	}
	local_irq_restore(fl);
}

static void ptt_intr_exit(void)
{
	u64 now[PTT_NVALS], d[PTT_NVALS];
	struct pt_regs *regs;
	unsigned long m, fl;
	struct ptt_cpu *c;
	struct ptt_ent *e;
	u32 i;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	/* an exit whose entry ran before the hooks were attached */
	if (c->depth == 0 || --c->depth) {
		local_irq_restore(fl);
		return;
	}
	/* only slots active at the entry have a start value */
	m = ptt_now(c, now);
	ptt_bucket_add(c, now, c->start, m & c->mask0, d);
	c->nintr++;
	e = c->cur;
	if (e) {
		ptt_begin(e->a);
		for (i = 0; i < e->nmetrics; i++)
			e->a->intr_time[i] += d[e->slot[i]];
		ptt_start(e, now);
		ptt_end(e->a);
		/*
		 * Only an interrupt of user mode goes straight to the
		 * scheduler on its way out; one that hit the kernel lets
		 * the thread finish its own kernel work (a fault, a system
		 * call) first, which stays the thread's.
		 */
		regs = get_irq_regs();
		if (e->task == current && test_tsk_need_resched(current) &&
		    regs && user_mode(regs)) {
			c->resched = true;
			c->rmask = m;
			memcpy(c->rstart, now, sizeof(now));
		}
	}
	local_irq_restore(fl);
}

static void ptt_tp_irq_entry(void *data, int irq, struct irqaction *action)
{
	ptt_intr_entry();
}

static void ptt_tp_irq_exit(void *data, int irq, struct irqaction *action,
			    int ret)
{
	ptt_intr_exit();
}

static void ptt_tp_softirq_entry(void *data, unsigned int vec)
{
	ptt_intr_entry();
}

static void ptt_tp_softirq_exit(void *data, unsigned int vec)
{
	ptt_intr_exit();
}

/* x86 irq_vectors events: TP_PROTO(int vector) */
static void ptt_tp_vec_entry(void *data, int vector)
{
	ptt_intr_entry();
}

static void ptt_tp_vec_exit(void *data, int vector)
{
	ptt_intr_exit();
}

/*
 * System calls (areas with sys, PITRACE_PTT_INIT_SYSCALLS).  The thread's
 * own context, preemption off (tracepoint); interrupts off here against
 * the interrupt hooks, which change the same area.  The CPU's current
 * area is the thread's while it runs (ptt_tp_switch), wherever it was at
 * sys_enter: sys0 and in_sys are its own.  Interrupts and other threads
 * in between are already out of accum, so accum's growth from the entry
 * to the exit is the thread's own time in the call.
 */
static void ptt_sys_edge(bool enter)
{
	u64 now[PTT_NVALS];
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;
	u32 i;

	if (!READ_ONCE(ptt_nareas))
		return;
	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && (enter ? e->sys != NULL : e->in_sys)) {
		e->res_fpu = false;
		ptt_now(c, now);
		ptt_begin(e->a);
		ptt_charge(e, now);
		ptt_end(e->a);
		/*
		 * No sequence count: only this thread's system calls change
		 * sys, and the thread reads it in user mode.
		 */
		for (i = 0; i < e->nmetrics; i++) {
			if (enter)
				e->sys0[i] = e->a->accum[i];
			else
				e->sys->sys_time[i] += e->a->accum[i] - e->sys0[i];
		}
		if (!enter)
			e->sys->syscalls++;
		e->in_sys = enter;
	}
	local_irq_restore(fl);
}

static void ptt_tp_sys_enter(void *data, struct pt_regs *regs, long id)
{
	ptt_sys_edge(true);
}

static void ptt_tp_sys_exit(void *data, struct pt_regs *regs, long ret)
{
	ptt_sys_edge(false);
}

/*
 * A kernel-work window of the current thread's entry e on c (interrupts
 * off): ptt_window_open charges the metrics up to now and keeps accum in
 * snap; ptt_window_close charges them up to now and adds accum's growth
 * since snap to time (the window's own figure, no sequence count: as
 * sys_time, the thread's own), and moves snap on.
 */
static void ptt_window_open(struct ptt_cpu *c, struct ptt_ent *e, u64 *snap)
{
	u64 now[PTT_NVALS];
	u32 i;

	lockdep_assert_irqs_disabled();
	ptt_now(c, now);
	ptt_begin(e->a);
	ptt_charge(e, now);
	ptt_end(e->a);
	for (i = 0; i < e->nmetrics; i++)
		snap[i] = e->a->accum[i];
}

static void ptt_window_close(struct ptt_cpu *c, struct ptt_ent *e, u64 *snap,
			     __u64 *time)
{
	u64 now[PTT_NVALS];
	u32 i;

	lockdep_assert_irqs_disabled();
	ptt_now(c, now);
	ptt_begin(e->a);
	ptt_charge(e, now);
	ptt_end(e->a);
	for (i = 0; i < e->nmetrics; i++) {
		time[i] += e->a->accum[i] - snap[i];
		snap[i] = e->a->accum[i];
	}
}

/*
 * User page faults (areas with sys and faults_on).  page_fault_user (the
 * thread's own context, interrupts off, before the fault is served) opens
 * the window: the area is charged up to now and accum noted.  Each return
 * of a handle_mm_fault serving that fault adds accum's growth since the
 * last edge to fault_time, so a retried fault (VM_FAULT_RETRY: served
 * again) ends at its last return; the first return counts the fault.
 * Only the user fault's own handle_mm_fault has the thread's user
 * registers as its regs (task_pt_regs, user mode): get_user_pages passes
 * NULL and a fault in kernel mode its own frame, so a stale in_fault is
 * never charged.  Interrupts and other threads in the window are already
 * out of accum, as for system calls.
 */
static void ptt_tp_fault(void *data, unsigned long address,
			 struct pt_regs *regs, unsigned long error_code)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	if (!READ_ONCE(ptt_nareas))
		return;
	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->sys && e->sys->faults_on) {
		e->res_fpu = false;
		ptt_window_open(c, e, e->flt0);
		e->in_fault = true;
		e->fault_counted = false;
	}
	local_irq_restore(fl);
}

/* handle_mm_fault(vma, address, flags, regs): only a user fault's */
static int ptt_krp_fault_entry(struct kretprobe_instance *ri,
			       struct pt_regs *regs)
{
	struct pt_regs *fr;

	fr = (struct pt_regs *)regs_get_kernel_argument(regs, 3);

	/* non-zero: no return probe for this call */
	return !(READ_ONCE(ptt_nareas) && fr && fr == task_pt_regs(current) &&
		 user_mode(fr));
}

static int ptt_krp_fault_ret(struct kretprobe_instance *ri,
			     struct pt_regs *regs)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->in_fault) {
		ptt_window_close(c, e, e->flt0, e->sys->fault_time);
		if (!e->fault_counted)
			e->sys->faults++;
		e->fault_counted = true;
	}
	local_irq_restore(fl);
	return 0;
}

/*
 * Instances are taken only by user faults (the entry handler refuses the
 * rest) and held while one sleeps; a fault that finds none is not
 * counted (its time stays in the metric, as before the probes).
 */
static struct kretprobe ptt_krp_fault = {
	.kp.symbol_name	= "handle_mm_fault",
	.entry_handler	= ptt_krp_fault_entry,
	.handler	= ptt_krp_fault_ret,
};

/*
 * The rseq update on the way back to user mode (areas with sys and
 * resumes_on).  After a switch (or a migration) the kernel sets
 * TIF_NOTIFY_RESUME for a thread with an rseq area, and its exit-to-user
 * work calls __rseq_handle_notify_resume(NULL, regs) after sys_exit (or
 * after an interrupt's exit): kernel work outside the system call's
 * window.  Its call opens a window (the entry handler, the thread's own
 * context) and its return closes it: accum's growth in between goes to
 * resume_time, resumes++.  The signal delivery's call (ksig set) is not
 * taken: it stays in the metric with the rest of the delivery.  A fault
 * on the rseq area inside the call (kernel mode) is not a user fault
 * window; a switch inside it is out of accum, as in system calls.
 */
static int ptt_krp_res_entry(struct kretprobe_instance *ri,
			     struct pt_regs *regs)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;
	bool ours = false;

	/* __rseq_handle_notify_resume(ksig, regs): only the resume's */
	if (!READ_ONCE(ptt_nareas) || regs_get_kernel_argument(regs, 0))
		return 1;
	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->sys && e->sys->resumes_on) {
		ptt_window_open(c, e, e->res0);
		e->in_resume = true;
		ours = true;
	}
	local_irq_restore(fl);
	/* non-zero: no return probe for this call */
	return !ours;
}

static int ptt_krp_res_ret(struct kretprobe_instance *ri,
			   struct pt_regs *regs)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->in_resume) {
		ptt_window_close(c, e, e->res0, e->sys->resume_time);
		e->sys->resumes++;
		e->in_resume = false;
		e->res_fpu = true;
	}
	local_irq_restore(fl);
	return 0;
}

/*
 * Instances are taken only by the resumes of threads with such an area
 * (the entry handler refuses the rest), held while one sleeps on a fault
 * of the rseq area; a resume that finds none is not counted (its time
 * stays in the metric).
 */
static struct kretprobe ptt_krp_resume = {
	.kp.symbol_name	= "__rseq_handle_notify_resume",
	.entry_handler	= ptt_krp_res_entry,
	.handler	= ptt_krp_res_ret,
};

/*
 * The FPU register reload after a switch (switch_fpu_return, from
 * arch_exit_to_user_mode_prepare after the exit-to-user loop), when it
 * follows a resume's window on the same way out (res_fpu): its time goes
 * to that resume's resume_time.  How much it does depends on what ran in
 * between (the registers are loaded again only when another thread's
 * replaced them), so it is a window, not part of the calibrated code
 * around the resume.  res_fpu is dropped at the thread's next kernel
 * entry the module sees (system call, user fault, interrupt), so a
 * reload after the kernel's own FPU use is not taken.
 */
static int ptt_krp_fpu_entry(struct kretprobe_instance *ri,
			     struct pt_regs *regs)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;
	bool ours = false;

	if (!READ_ONCE(ptt_nareas))
		return 1;
	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->res_fpu) {
		ptt_window_open(c, e, e->res0);
		e->res_fpu = false;
		e->in_fpu = true;
		ours = true;
	}
	local_irq_restore(fl);
	return !ours;
}

static int ptt_krp_fpu_ret(struct kretprobe_instance *ri,
			   struct pt_regs *regs)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	e = c->cur;
	if (e && e->task == current && e->in_fpu) {
		ptt_window_close(c, e, e->res0, e->sys->resume_time);
		e->in_fpu = false;
	}
	local_irq_restore(fl);
	return 0;
}

static struct kretprobe ptt_krp_fpu = {
	.kp.symbol_name	= "switch_fpu_return",
	.entry_handler	= ptt_krp_fpu_entry,
	.handler	= ptt_krp_fpu_ret,
};

struct ptt_tp {
	const char *name;
	void *probe;
	u32 bit;		/* PITRACE_PTT_HOOK_*, 0: required */
	bool sys;		/* attached by ptt_attach_sys only */
	bool fault;		/* attached by ptt_attach_fault only */
	struct tracepoint *tp;
	bool registered;
};

static void ptt_tp_fork(void *data, struct task_struct *parent,
			struct task_struct *child);
static void ptt_tp_exec(void *data, struct task_struct *p, pid_t old_pid,
			struct linux_binprm *bprm);

#define PTT_VEC(n, b) \
	{ n "_entry", ptt_tp_vec_entry, b }, { n "_exit", ptt_tp_vec_exit, b }

static struct ptt_tp ptt_tps[] = {
	{ "sched_switch", ptt_tp_switch, 0 },
	{ "sched_process_exit", ptt_tp_exit, 0 },
	{ "sched_process_fork", ptt_tp_fork, 0 },
	{ "sched_process_exec", ptt_tp_exec, 0 },
	{ "irq_handler_entry", ptt_tp_irq_entry, PITRACE_PTT_HOOK_IRQ },
	{ "irq_handler_exit", ptt_tp_irq_exit, PITRACE_PTT_HOOK_IRQ },
	{ "softirq_entry", ptt_tp_softirq_entry, PITRACE_PTT_HOOK_SOFTIRQ },
	{ "softirq_exit", ptt_tp_softirq_exit, PITRACE_PTT_HOOK_SOFTIRQ },
	PTT_VEC("local_timer", PITRACE_PTT_HOOK_TIMER),
	PTT_VEC("call_function", PITRACE_PTT_HOOK_CALL_FUNC),
	PTT_VEC("call_function_single", PITRACE_PTT_HOOK_CALL_FUNC1),
	PTT_VEC("reschedule", PITRACE_PTT_HOOK_RESCHED),
	PTT_VEC("irq_work", PITRACE_PTT_HOOK_IRQ_WORK),
	PTT_VEC("x86_platform_ipi", PITRACE_PTT_HOOK_PLATFORM),
	PTT_VEC("spurious_apic", PITRACE_PTT_HOOK_SPURIOUS),
	PTT_VEC("error_apic", PITRACE_PTT_HOOK_ERROR),
	PTT_VEC("thermal_apic", PITRACE_PTT_HOOK_THERMAL),
	PTT_VEC("threshold_apic", PITRACE_PTT_HOOK_THRESHOLD),
	PTT_VEC("deferred_error_apic", PITRACE_PTT_HOOK_DEFERRED),
	/* the exit first: ptt_attach_sys registers it first */
	{ "sys_exit", ptt_tp_sys_exit, PITRACE_PTT_HOOK_SYSCALL, true },
	{ "sys_enter", ptt_tp_sys_enter, PITRACE_PTT_HOOK_SYSCALL, true },
	{ "page_fault_user", ptt_tp_fault, PITRACE_PTT_HOOK_FAULT,
	  .fault = true },
};

static bool str_has_suffix_entry(const char *name)
{
	size_t n = strlen(name);

	return n > 6 && !strcmp(name + n - 6, "_entry");
}

static void ptt_find_tp(struct tracepoint *tp, void *priv)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++)
		if (!strcmp(tp->name, ptt_tps[i].name))
			ptt_tps[i].tp = tp;
}

static void ptt_detach(void)
{
	size_t i;
	bool any = false;

	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++) {
		if (!ptt_tps[i].registered)
			continue;
		tracepoint_probe_unregister(ptt_tps[i].tp, ptt_tps[i].probe,
					    NULL);
		ptt_tps[i].registered = false;
		any = true;
	}
	if (any)
		tracepoint_synchronize_unregister();
	if (ptt_krp_registered) {
		unregister_kretprobe(&ptt_krp_fault);
		ptt_krp_registered = false;
	}
	if (ptt_krp_fpu_registered) {
		unregister_kretprobe(&ptt_krp_fpu);
		ptt_krp_fpu_registered = false;
	}
	if (ptt_krp_res_registered) {
		unregister_kretprobe(&ptt_krp_resume);
		ptt_krp_res_registered = false;
	}
	ptt_attached = false;
	ptt_sys_attached = false;
	WRITE_ONCE(ptt_fault_attached, false);
	WRITE_ONCE(ptt_resume_attached, false);
}

/*
 * Attached at the first PTT_INIT and kept until rmmod (like the trace
 * probes: attaching patches kernel text).  An interrupt pair is used only
 * when both of its tracepoints attach.
 */
static int ptt_attach(void)
{
	size_t i;
	int err;

	lockdep_assert_held(&ptt_lock);
	if (ptt_attached)
		return 0;
	for_each_kernel_tracepoint(ptt_find_tp, NULL);
	/*
	 * Backwards: each pair's exit before its entry, and an entry only
	 * when its exit is attached.  An entry seen without its exit would
	 * leave the CPU's nesting depth above 0 for good, and no interrupt
	 * would count as outermost on it again.
	 */
	for (i = ARRAY_SIZE(ptt_tps); i-- > 0;) {
		struct ptt_tp *p = &ptt_tps[i];

		if (p->sys || p->fault)
			continue;
		if (p->bit && str_has_suffix_entry(p->name) &&
		    (i + 1 >= ARRAY_SIZE(ptt_tps) || !ptt_tps[i + 1].registered))
			continue;
		if (!p->tp) {
			if (!p->bit) {
				pr_warn("pitrace: ptt: no tracepoint %s\n",
					p->name);
				ptt_detach();
				return -EOPNOTSUPP;
			}
			continue;
		}
		err = tracepoint_probe_register(p->tp, p->probe, NULL);
		if (err) {
			pr_warn("pitrace: ptt: tracepoint %s: error %d\n",
				p->name, err);
			if (!p->bit) {
				ptt_detach();
				return err;
			}
			continue;
		}
		p->registered = true;
	}
	ptt_attached = true;
	return 0;
}

/*
 * The syscall pair, at the first PTT_INIT that asks for it, kept until
 * rmmod: sys_exit before sys_enter (an exit without its entry is
 * ignored: in_sys is false), so nothing is counted until both are
 * attached; a failed entry leaves the exit attached, harmless.
 */
static int ptt_attach_sys(void)
{
	struct ptt_tp *p;
	size_t i;
	int err;

	lockdep_assert_held(&ptt_lock);
	if (ptt_sys_attached)
		return 0;
	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++) {
		p = &ptt_tps[i];
		if (!p->sys || p->registered)
			continue;
		err = p->tp ? tracepoint_probe_register(p->tp, p->probe, NULL)
			    : -EOPNOTSUPP;
		if (err) {
			pr_warn("pitrace: ptt: tracepoint %s: error %d\n",
				p->name, err);
			return err;	/* the exit, if attached, is harmless */
		}
		p->registered = true;
	}
	ptt_sys_attached = true;
	return 0;
}

/*
 * The fault probes, at the first PTT_INIT with PITRACE_PTT_INIT_SYSCALLS,
 * kept until rmmod: the kretprobe first (alone it changes nothing: no
 * area is in a fault), then the tracepoint.  Optional: a kernel that
 * refuses either leaves faults_on 0 in the areas (faults stay in the
 * metric).  Areas made after this see ptt_fault_attached set.
 */
static void ptt_attach_fault(void)
{
	struct ptt_tp *p = NULL;
	size_t i;
	int err;

	lockdep_assert_held(&ptt_lock);
	if (ptt_fault_attached)
		return;
	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++)
		if (ptt_tps[i].fault)
			p = &ptt_tps[i];
	if (!p || !p->tp)
		return;
	if (!ptt_krp_registered) {
		/* as new: a registration fills in addr (found by name) */
		ptt_krp_fault.kp.addr = NULL;
		ptt_krp_fault.kp.flags = 0;
		ptt_krp_fault.maxactive = max_t(int, 64,
						4 * num_possible_cpus());
		err = register_kretprobe(&ptt_krp_fault);
		if (err) {
			pr_warn("pitrace: ptt: kretprobe %s: error %d\n",
				ptt_krp_fault.kp.symbol_name, err);
			return;
		}
		ptt_krp_registered = true;
	}
	if (!p->registered) {
		err = tracepoint_probe_register(p->tp, p->probe, NULL);
		if (err) {
			pr_warn("pitrace: ptt: tracepoint %s: error %d\n",
				p->name, err);
			return;
		}
		p->registered = true;
	}
	WRITE_ONCE(ptt_fault_attached, true);
}

/*
 * The resume probe, at the first PTT_INIT with PITRACE_PTT_INIT_SYSCALLS,
 * kept until rmmod.  Optional: a kernel without rseq (no such function)
 * or one that refuses the kretprobe leaves resumes_on 0 in the areas (the
 * rseq update stays in the metric).  Areas made after this see
 * ptt_resume_attached set.
 */
static void ptt_attach_resume(void)
{
	int err;

	lockdep_assert_held(&ptt_lock);
	if (ptt_krp_res_registered)
		return;
	/*
	 * The FPU reload's first (alone it changes nothing: no area has a
	 * resume ended); without it the reload stays outside the windows.
	 */
	if (!ptt_krp_fpu_registered) {
		ptt_krp_fpu.kp.addr = NULL;
		ptt_krp_fpu.kp.flags = 0;
		ptt_krp_fpu.maxactive = max_t(int, 64, 4 * num_possible_cpus());
		err = register_kretprobe(&ptt_krp_fpu);
		if (err)
			pr_warn("pitrace: ptt: kretprobe %s: error %d\n",
				ptt_krp_fpu.kp.symbol_name, err);
		else
			ptt_krp_fpu_registered = true;
	}
	/* as new: a registration fills in addr (found by name) */
	ptt_krp_resume.kp.addr = NULL;
	ptt_krp_resume.kp.flags = 0;
	ptt_krp_resume.maxactive = max_t(int, 64, 4 * num_possible_cpus());
	err = register_kretprobe(&ptt_krp_resume);
	if (err) {
		pr_warn("pitrace: ptt: kretprobe %s: error %d\n",
			ptt_krp_resume.kp.symbol_name, err);
		return;
	}
	ptt_krp_res_registered = true;
	WRITE_ONCE(ptt_resume_attached, true);
}

static u32 ptt_hooks(void)
{
	u32 on = 0, off = 0;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++) {
		if (ptt_tps[i].registered)
			on |= ptt_tps[i].bit;
		else
			off |= ptt_tps[i].bit;
	}
	if (!ptt_krp_registered)
		off |= PITRACE_PTT_HOOK_FAULT;
	if (ptt_krp_res_registered)
		on |= PITRACE_PTT_HOOK_RESUME;
	return on & ~off;
}

/* ---- perf counter slots (ptt_lock) ---------------------------------------- */

static void ptt_event_attr(struct perf_event_attr *attr, unsigned int s)
{
	memset(attr, 0, sizeof(*attr));
	attr->type = ptt_slots[s].type;
	attr->config = ptt_slots[s].config;
	attr->size = sizeof(*attr);
	attr->pinned = 1;
}

/*
 * No hook reads slot s any more.  The caller holds cpus_read_lock too
 * (lockdep_assert_cpus_held is not exported to modules).
 */
static void ptt_slot_free_events(unsigned int s)
{
	int cpu;

	lockdep_assert_held(&ptt_lock);
	for_each_possible_cpu(cpu) {
		struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);

		if (c->ev[s]) {
			perf_event_release_kernel(c->ev[s]);
			WRITE_ONCE(c->ev[s], NULL);
		}
		c->val[s] = 0;
		c->base[s] = 0;
	}
	ptt_slots[s].in_use = false;
}

/* A slot counting (type, config) on every online CPU, referenced. */
static int ptt_slot_get(u32 type, u64 config)
{
	struct perf_event_attr attr;
	unsigned int s, free = PTT_NSLOTS;
	int cpu, err = 0;

	lockdep_assert_held(&ptt_lock);
	for (s = 0; s < PTT_NSLOTS; s++) {
		if (ptt_slots[s].refs && ptt_slots[s].type == type &&
		    ptt_slots[s].config == config) {
			ptt_slots[s].refs++;
			return s;
		}
		/* a slot still draining (ptt_slots_drain) is not free yet */
		if (!ptt_slots[s].in_use && free == PTT_NSLOTS)
			free = s;
	}
	if (free == PTT_NSLOTS)
		return -EBUSY;
	s = free;
	cpus_read_lock();
	ptt_slots[s].type = type;
	ptt_slots[s].config = config;
	ptt_slots[s].in_use = true;
	ptt_event_attr(&attr, s);
	for_each_online_cpu(cpu) {
		struct perf_event *ev;

		ev = perf_event_create_kernel_counter(&attr, cpu, NULL, NULL,
						      NULL);
		if (IS_ERR(ev)) {
			err = PTR_ERR(ev);
			break;
		}
		WRITE_ONCE(per_cpu_ptr(&ptt_cpus, cpu)->ev[s], ev);
	}
	if (err) {
		/* the mask never had the slot: no hook read it */
		ptt_slot_free_events(s);
	} else {
		ptt_slots[s].refs = 1;
		WRITE_ONCE(ptt_slot_mask, ptt_slot_mask | BIT(s));
	}
	cpus_read_unlock();
	return err ? err : s;
}

/*
 * Drop a reference; the last one takes the slot out of the mask.  Its
 * counters are freed by ptt_slots_drain after a grace period.  Returns
 * true when the slot needs that.
 */
static bool ptt_slot_put(unsigned int s)
{
	lockdep_assert_held(&ptt_lock);
	if (s >= PTT_NSLOTS || --ptt_slots[s].refs)
		return false;
	WRITE_ONCE(ptt_slot_mask, ptt_slot_mask & ~BIT(s));
	return true;
}

/* After a grace period since ptt_slot_put: free unreferenced counters. */
static void ptt_slots_drain(void)
{
	unsigned int s;

	mutex_lock(&ptt_lock);
	cpus_read_lock();
	for (s = 0; s < PTT_NSLOTS; s++)
		if (ptt_slots[s].in_use && !ptt_slots[s].refs)
			ptt_slot_free_events(s);
	cpus_read_unlock();
	mutex_unlock(&ptt_lock);
}

static bool ptt_ctx_put_slots(struct ptt_ctx *ctx)
{
	bool drain = false;
	u32 i;

	for (i = 0; i < ctx->nmetrics; i++)
		drain |= ptt_slot_put(ctx->slot[i]);
	ctx->nmetrics = 0;
	return drain;
}

/*
 * CPU hot-plug (the hot-plug thread of that CPU, hot-plug lock held for
 * writing, so ptt_slot_get/drain are not running): a CPU coming online
 * gets a counter for every active slot, counting on from the value the
 * slot had on this CPU; a CPU going offline frees its counters (perf
 * detaches them from a dead CPU for good).
 */
int pt_ptt_cpu_online(unsigned int cpu)
{
	struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);
	struct perf_event_attr attr;
	unsigned int s;

	for (s = 0; s < PTT_NSLOTS; s++) {
		struct perf_event *ev;

		if (!ptt_slots[s].in_use || !ptt_slots[s].refs || c->ev[s])
			continue;
		ptt_event_attr(&attr, s);
		ev = perf_event_create_kernel_counter(&attr, cpu, NULL, NULL,
						      NULL);
		if (IS_ERR(ev)) {
			pr_warn_ratelimited("pitrace: ptt: no counter %u:%llu on CPU %u (error %ld): its deltas there stay 0\n",
					    ptt_slots[s].type,
					    ptt_slots[s].config, cpu,
					    PTR_ERR(ev));
			continue;
		}
		c->base[s] = c->val[s];
		WRITE_ONCE(c->ev[s], ev);
	}
	return 0;
}

int pt_ptt_cpu_offline(unsigned int cpu)
{
	struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);
	struct perf_event *ev[PTT_NSLOTS];
	unsigned int s;
	bool any = false;

	for (s = 0; s < PTT_NSLOTS; s++) {
		ev[s] = c->ev[s];
		if (ev[s]) {
			WRITE_ONCE(c->ev[s], NULL);
			any = true;
		}
	}
	if (!any)
		return 0;
	/* hooks on this CPU that still hold the pointers are done after this */
	synchronize_rcu();
	for (s = 0; s < PTT_NSLOTS; s++)
		if (ev[s])
			perf_event_release_kernel(ev[s]);
	return 0;
}

/* ---- areas --------------------------------------------------------------- */

static void ptt_free_rcu(struct rcu_head *r)
{
	struct ptt_ent *e = container_of(r, struct ptt_ent, rcu);

	put_pid(e->tid);
	put_pid(e->tgid);
	__free_page(e->page);
	kfree(e);
}

static void ptt_ent_release(struct kref *ref)
{
	struct ptt_ent *e = container_of(ref, struct ptt_ent, ref);

	call_rcu(&e->rcu, ptt_free_rcu);
}

/* Take e out of the hash; false when thread exit (or another stop) did. */
static bool ptt_unhash(struct ptt_ent *e)
{
	unsigned long fl;
	bool was;

	spin_lock_irqsave(&ptt_hash_lock, fl);
	was = e->hashed;
	if (was) {
		hash_del_rcu(&e->hnode);
		e->hashed = false;
		WRITE_ONCE(ptt_nareas, ptt_nareas - 1);
	}
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
	return was;
}

/*
 * Stop the areas on list (linked by stop; each was taken out of the hash
 * by its stopper and marked stopping), process context, no lock held:
 * after one grace period no switch hook still makes a CPU point at them;
 * the CPUs' pointers to them are cleared; after a second one no
 * interrupt hook still updates them; then they are marked dead.  Two
 * grace periods for the whole batch, whatever its size.
 */
static void ptt_stop_list(struct list_head *list)
{
	struct ptt_ent *e;
	int cpu;

	if (list_empty(list))
		return;
	synchronize_rcu();
	for_each_possible_cpu(cpu) {
		struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);
		struct ptt_ent *cur = READ_ONCE(c->cur);

		if (cur && READ_ONCE(cur->stopping))
			cmpxchg(&c->cur, cur, NULL);
	}
	synchronize_rcu();
	list_for_each_entry(e, list, stop) {
		ptt_begin(e->a);
		WRITE_ONCE(e->a->dead, PITRACE_PTT_DEAD_STOPPED);
		ptt_end(e->a);
	}
}

/*
 * The worker that stops munmap'd areas (munmap runs with mmap_lock held
 * and must not wait for a grace period): one batch per run, each area's
 * mapping reference dropped at the end.
 */
static void ptt_reap(struct work_struct *w)
{
	struct llist_node *n = llist_del_all(&ptt_reap_list);
	struct ptt_ent *e, *t;
	LIST_HEAD(list);

	llist_for_each_entry(e, n, reap)
		list_add_tail(&e->stop, &list);
	ptt_stop_list(&list);
	list_for_each_entry_safe(e, t, &list, stop)
		kref_put(&e->ref, ptt_ent_release);
}

/* e is out of the hash; the caller's reference goes with it */
static void ptt_reap_queue(struct ptt_ent *e)
{
	WRITE_ONCE(e->stopping, true);
	if (llist_add(&e->reap, &ptt_reap_list))
		schedule_work(&ptt_reap_work);
}

/*
 * PTT_TERM and close: stop every area of ctx as one batch.  ptt_lock is
 * held only to take the areas off the file and release its slots, not
 * over the grace periods.  -EINVAL when ctx has no metrics.
 */
static long ptt_ctx_term(struct ptt_ctx *ctx)
{
	struct ptt_ent *e, *t;
	LIST_HEAD(ents);
	LIST_HEAD(stop);
	bool drain;

	mutex_lock(&ptt_lock);
	if (!ctx->nmetrics) {
		mutex_unlock(&ptt_lock);
		return -EINVAL;
	}
	spin_lock(&ptt_list_lock);
	list_splice_init(&ctx->ents, &ents);
	list_for_each_entry(e, &ents, lnode)
		e->on_list = false;
	spin_unlock(&ptt_list_lock);
	drain = ptt_ctx_put_slots(ctx);
	mutex_unlock(&ptt_lock);

	list_for_each_entry(e, &ents, lnode) {
		if (ptt_unhash(e)) {
			WRITE_ONCE(e->stopping, true);
			list_add_tail(&e->stop, &stop);
		}
	}
	if (!list_empty(&stop))
		ptt_stop_list(&stop);	/* its grace periods serve the slots */
	else if (drain)
		synchronize_rcu();
	list_for_each_entry_safe(e, t, &ents, lnode)
		kref_put(&e->ref, ptt_ent_release);	/* the list's */
	if (drain)
		ptt_slots_drain();
	return 0;
}

static void ptt_vm_open(struct vm_area_struct *vma)
{
	struct ptt_ent *e = vma->vm_private_data;

	kref_get(&e->ref);
}

/* munmap (mmap_lock held): no mutex, no grace period here */
static void ptt_vm_close(struct vm_area_struct *vma)
{
	struct ptt_ent *e = vma->vm_private_data;
	bool listed;

	spin_lock(&ptt_list_lock);
	listed = e->on_list;
	if (listed) {
		list_del(&e->lnode);
		e->on_list = false;
	}
	spin_unlock(&ptt_list_lock);
	if (listed)
		kref_put(&e->ref, ptt_ent_release);	/* the list's */
	if (ptt_unhash(e))
		ptt_reap_queue(e);	/* with the mapping's reference */
	else
		kref_put(&e->ref, ptt_ent_release);
}

static const struct vm_operations_struct ptt_vm_ops = {
	.open = ptt_vm_open,
	.close = ptt_vm_close,
};

/* A new area with ctx's metrics for task t (not yet hashed; one reference). */
static struct ptt_ent *ptt_ent_new(struct ptt_ctx *ctx, u32 nmetrics,
				   const u8 *slot, bool sys,
				   struct task_struct *t, gfp_t gfp)
{
	struct ptt_ent *e;
	u32 i;

	e = kzalloc(sizeof(*e), gfp);
	if (!e)
		return NULL;
	e->page = alloc_page(gfp | __GFP_ZERO);
	if (!e->page) {
		kfree(e);
		return NULL;
	}
	e->a = page_address(e->page);
	BUILD_BUG_ON(sizeof(*e->a) > PITRACE_PTT_SYS_OFFSET ||
		     PITRACE_PTT_SYS_OFFSET + sizeof(*e->sys) > PAGE_SIZE);
	if (sys) {
		e->sys = (void *)e->a + PITRACE_PTT_SYS_OFFSET;
		e->sys->sys_on = 1;
		e->sys->faults_on = READ_ONCE(ptt_fault_attached);
		e->sys->resumes_on = READ_ONCE(ptt_resume_attached);
	}
	e->ctx = ctx;
	e->nmetrics = nmetrics;
	memcpy(e->slot, slot, sizeof(e->slot));
	e->task = t;
	e->tid = get_task_pid(t, PIDTYPE_PID);
	e->tgid = get_task_pid(t, PIDTYPE_TGID);
	get_task_comm(e->comm, t);
	kref_init(&e->ref);
	e->a->nmetrics = e->nmetrics;
	for (i = 0; i < e->nmetrics; i++)
		e->a->live[i] = e->slot[i] == PTT_TSC ? ~0ULL : 0;
	return e;
}

/* Only for an area no hook ever saw (never hashed). */
static void ptt_ent_free(struct ptt_ent *e)
{
	put_pid(e->tid);
	put_pid(e->tgid);
	__free_page(e->page);
	kfree(e);
}

/*
 * PTT_WATCH of a thread that may be running on another CPU (this one, in
 * the IPI): the switch hook starts an area only when its thread is next
 * switched in, so a thread that keeps its CPU would show nothing of its
 * time when read.  If the thread is this CPU's current one and has no
 * area here yet, the area starts now; inside an interrupt whose entry the
 * hooks saw (this IPI's own, when those hooks are attached), at that
 * entry, so that the interrupt goes to the area's intr_time at its exit
 * like any interrupt of the thread.
 */
static void ptt_start_running(void *arg)
{
	struct ptt_cpu *c = this_cpu_ptr(&ptt_cpus);
	struct ptt_ent *e = arg;
	u64 now[PTT_NVALS];
	unsigned long m;
	u32 i;

	/* e->hashed: cleared by t's own exit, so on this CPU if t is here */
	if (current != e->task || c->cur || !READ_ONCE(e->hashed))
		return;
	m = ptt_now(c, now);
	if (c->depth) {
		now[PTT_TSC] = c->start[PTT_TSC];
		for (i = 0; i < PTT_NSLOTS; i++)
			if (m & c->mask0 & BIT(i))
				now[i] = c->start[i];
	}
	ptt_begin(e->a);
	ptt_start(e, now);
	e->a->cpu = smp_processor_id();
	e->a->dispatches++;
	ptt_end(e->a);
	c->cur = e;
}

/*
 * Hash e for t unless t exits (or already has an area); when t is the
 * caller, its area starts now on this CPU; when t runs on another CPU,
 * there now (ptt_start_running); else at its next switch-in.  Then put
 * it on ctx's list (taking a reference).  On error e is gone (freed, or
 * handed to the reaper when a hook may have seen it).
 */
static int ptt_ent_add(struct ptt_ctx *ctx, struct ptt_ent *e,
		       struct task_struct *t)
{
	u64 now[PTT_NVALS];
	struct ptt_cpu *c;
	unsigned long fl;

	lockdep_assert_held(&ptt_lock);
	spin_lock_irqsave(&ptt_hash_lock, fl);
	if (ptt_lookup(t)) {
		spin_unlock_irqrestore(&ptt_hash_lock, fl);
		ptt_ent_free(e);
		return -EBUSY;
	}
	hash_add_rcu(ptt_hash, &e->hnode, (unsigned long)t);
	e->hashed = true;
	WRITE_ONCE(ptt_nareas, ptt_nareas + 1);
	/* pairs with the barrier in ptt_tp_exit (see there) */
	smp_mb();
	if (READ_ONCE(t->flags) & PF_EXITING) {
		/* a switch hook may have seen it: stop it the long way */
		hash_del_rcu(&e->hnode);
		e->hashed = false;
		WRITE_ONCE(ptt_nareas, ptt_nareas - 1);
		spin_unlock_irqrestore(&ptt_hash_lock, fl);
		ptt_reap_queue(e);
		return -ESRCH;
	}
	if (t == current) {
		c = this_cpu_ptr(&ptt_cpus);
		ptt_now(c, now);
		ptt_start(e, now);
		e->a->cpu = smp_processor_id();
		e->a->dispatches = 1;
		c->cur = e;
	}
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
	/*
	 * e is hashed (and the barrier above orders that before this read of
	 * t's CPU): if t is switched in anywhere from now on, the switch hook
	 * finds e; if it is running on its CPU already, the IPI starts e.  A
	 * stale CPU means t is moving, and a switch-in follows.  Under
	 * ptt_lock no stop of e can begin before the IPI has run.
	 */
	if (t != current)
		smp_call_function_single(task_cpu(t), ptt_start_running, e, 1);
	kref_get(&e->ref);		/* the list's */
	spin_lock(&ptt_list_lock);
	list_add_tail(&e->lnode, &ctx->ents);
	e->on_list = true;
	spin_unlock(&ptt_list_lock);
	return 0;
}

/*
 * sched_process_fork (the parent's context, the child not yet running):
 * a new thread of a thread with a watched area (PTT_WATCH, not a mapping)
 * gets an area of the same file now, so that it is counted from its first
 * dispatch however short it lives.  No sleeping here: GFP_NOWAIT; a failed
 * allocation leaves the thread without an area.
 */
static void ptt_tp_fork(void *data, struct task_struct *parent,
			struct task_struct *child)
{
	struct ptt_ent *pe, *e;
	unsigned long fl;

	if (!READ_ONCE(ptt_nareas) || child->tgid != parent->tgid)
		return;
	pe = ptt_lookup(parent);
	if (!pe || pe->mapped)
		return;
	e = ptt_ent_new(pe->ctx, pe->nmetrics, pe->slot, pe->sys, child,
			GFP_NOWAIT | __GFP_NOWARN);
	if (!e)
		return;
	/* the parent's area still on its file: the file is not being ended */
	spin_lock(&ptt_list_lock);
	if (!pe->on_list) {
		spin_unlock(&ptt_list_lock);
		ptt_ent_free(e);
		return;
	}
	spin_lock_irqsave(&ptt_hash_lock, fl);
	hash_add_rcu(ptt_hash, &e->hnode, (unsigned long)child);
	e->hashed = true;
	WRITE_ONCE(ptt_nareas, ptt_nareas + 1);
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
	/* the initial reference is the list's */
	list_add_tail(&e->lnode, &pe->ctx->ents);
	e->on_list = true;
	spin_unlock(&ptt_list_lock);
}

/* mmap at PITRACE_PTT_MMAP_OFFSET: the calling thread's area. */
int pt_ptt_mmap(void **ctxp, struct vm_area_struct *vma)
{
	struct ptt_ctx *ctx;
	struct ptt_ent *e;
	int err;

	if (vma_pages(vma) != 1)
		return -EINVAL;
	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	if (current->flags & PF_KTHREAD)
		return -EINVAL;
	mutex_lock(&ptt_lock);
	ctx = *ctxp;
	err = -EINVAL;
	if (!ctx || !ctx->nmetrics)
		goto out;
	err = -EBUSY;
	rcu_read_lock();
	e = ptt_lookup(current);
	rcu_read_unlock();
	if (e)
		goto out;
	err = -ENOMEM;
	e = ptt_ent_new(ctx, ctx->nmetrics, ctx->slot,
			ctx->flags & PITRACE_PTT_INIT_SYSCALLS, current,
			GFP_KERNEL);
	if (!e)
		goto out;
	e->mapped = true;
	pt_vm_flags_clear(vma, VM_MAYWRITE);
	pt_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	err = vm_insert_page(vma, vma->vm_start, e->page);
	if (err) {
		ptt_ent_free(e);
		goto out;
	}
	/*
	 * The page was inserted: on error the vma's pages are dropped by
	 * mmap's unwind.  The mapping's reference is e's initial one.
	 */
	err = ptt_ent_add(ctx, e, current);
	if (err)
		goto out;
	vma->vm_ops = &ptt_vm_ops;
	vma->vm_private_data = e;
out:
	mutex_unlock(&ptt_lock);
	return err;
}

/* ---- ioctls (arguments are kernel copies: no user access here) ---------- */

static long ptt_ioc_init(void **ctxp, const struct pitrace_ptt_init *a)
{
	struct ptt_ctx *ctx;
	u8 slot[PITRACE_PTT_MAX_METRICS];
	u32 i, n = 0;
	long err;
	bool drain = false;

	if ((a->flags & ~PITRACE_PTT_INIT_SYSCALLS) || a->nmetrics == 0 ||
	    a->nmetrics > PITRACE_PTT_MAX_METRICS)
		return -EINVAL;
	for (i = 0; i < a->nmetrics; i++) {
		if (a->m[i].kind == PITRACE_PTT_TSC) {
			if (a->m[i].type || a->m[i].config)
				return -EINVAL;
		} else if (a->m[i].kind != PITRACE_PTT_PERF) {
			return -EINVAL;
		}
	}
	memset(slot, PTT_TSC, sizeof(slot));
	mutex_lock(&ptt_lock);
	err = ptt_attach();
	if (!err && (a->flags & PITRACE_PTT_INIT_SYSCALLS))
		err = ptt_attach_sys();
	if (err)
		goto out;
	if (a->flags & PITRACE_PTT_INIT_SYSCALLS) {
		ptt_attach_fault();
		ptt_attach_resume();
	}
	ctx = *ctxp;
	if (!ctx) {
		err = -ENOMEM;
		ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
		if (!ctx)
			goto out;
		INIT_LIST_HEAD(&ctx->ents);
		*ctxp = ctx;
	}
	err = -EBUSY;		/* the metrics of live areas cannot change */
	if (!list_empty(&ctx->ents))
		goto out;
	for (n = 0; n < a->nmetrics; n++) {
		if (a->m[n].kind == PITRACE_PTT_TSC) {
			slot[n] = PTT_TSC;
			continue;
		}
		err = ptt_slot_get(a->m[n].type, a->m[n].config);
		if (err < 0)
			goto out_put;
		slot[n] = err;
	}
	drain = ptt_ctx_put_slots(ctx);		/* a previous PTT_INIT's */
	memcpy(ctx->slot, slot, sizeof(slot));
	ctx->nmetrics = a->nmetrics;
	ctx->flags = a->flags;
	err = 0;
	goto out;
out_put:
	while (n--)
		if (slot[n] != PTT_TSC)
			drain |= ptt_slot_put(slot[n]);
out:
	mutex_unlock(&ptt_lock);
	if (drain) {
		synchronize_rcu();
		ptt_slots_drain();
	}
	return err;
}

static long ptt_ioc_status(void **ctxp, struct pitrace_ptt_status *st)
{
	struct ptt_ctx *ctx;
	u32 first = st->first_cpu, cpu, i;

	if (first >= nr_cpu_ids)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->first_cpu = first;
	st->nr_cpus = nr_cpu_ids;
	mutex_lock(&ptt_lock);
	ctx = *ctxp;
	st->nmetrics = ctx ? ctx->nmetrics : 0;
	for (cpu = first; cpu < nr_cpu_ids &&
	     cpu - first < PITRACE_PTT_STATUS_CPUS; cpu++) {
		struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);
		struct pitrace_ptt_bucket *b = &st->cpu[cpu - first];

		b->interrupts = READ_ONCE(c->nintr);
		b->tsc = READ_ONCE(c->bucket[PTT_TSC]);
		for (i = 0; i < st->nmetrics; i++)
			b->val[i] = READ_ONCE(c->bucket[ctx->slot[i]]);
		st->ncpus++;
	}
	st->hooks = ptt_hooks();
	st->nareas = READ_ONCE(ptt_nareas);
	mutex_unlock(&ptt_lock);
	return 0;
}

/*
 * May the caller watch t?  The rule of ptrace_may_access(t,
 * PTRACE_MODE_READ_REALCREDS), which is not exported to modules: a
 * thread of the caller's own process; else the caller's real uid and gid
 * equal to all of t's uids and gids, or CAP_SYS_PTRACE in t's user
 * namespace; and t's memory dumpable (a process that changed its
 * credentials, setuid or setresuid, is not until it says so with
 * PR_SET_DUMPABLE) or CAP_SYS_PTRACE in the namespace of its mm.  The
 * security module hook (security_ptrace_access_check, not exported
 * either) is not consulted: see docs/kmod.md.
 */
bool ptt_may_watch(struct task_struct *t)
{
	const struct cred *cred, *tcred;
	struct mm_struct *mm;
	bool ok;

	if (same_thread_group(t, current))
		return true;
	rcu_read_lock();
	cred = current_cred();
	tcred = __task_cred(t);
	ok = (uid_eq(cred->uid, tcred->euid) && uid_eq(cred->uid, tcred->suid) &&
	      uid_eq(cred->uid, tcred->uid) && gid_eq(cred->gid, tcred->egid) &&
	      gid_eq(cred->gid, tcred->sgid) && gid_eq(cred->gid, tcred->gid)) ||
	     ns_capable(tcred->user_ns, CAP_SYS_PTRACE);
	rcu_read_unlock();
	if (!ok)
		return false;
	task_lock(t);
	mm = t->mm;
	if (mm && get_dumpable(mm) != SUID_DUMP_USER &&
	    !ns_capable(mm->user_ns, CAP_SYS_PTRACE))
		ok = false;
	task_unlock(t);
	return ok;
}

/*
 * At sched_process_exec (current, its new credentials committed): did
 * this exec give the thread rights that whoever watched or traced the old
 * image may lack, or leave it not dumpable?  bprm->secureexec is the
 * kernel's AT_SECURE: set-user-ID or set-group-ID, file capabilities
 * gained, an LSM transition; the mm is not dumpable after any change of
 * credentials and after an exec of a file the thread may not read.  The
 * kernel ends the thread's own perf events at the same dumpability test
 * (begin_new_exec), and keeps a ptrace tracer only by running the new
 * image without its privileges, which a module cannot do.
 */
bool pt_exec_secure(const struct linux_binprm *bprm)
{
	struct mm_struct *mm = current->mm;

	return bprm->secureexec || !mm || get_dumpable(mm) != SUID_DUMP_USER;
}

static long ptt_ioc_watch(void **ctxp, const struct pitrace_ptt_watch *w)
{
	struct task_struct *t;
	struct ptt_ctx *ctx;
	struct ptt_ent *e;
	struct pid *pid;
	long err;

	if (w->flags || w->tid <= 0)
		return -EINVAL;
	pid = find_get_pid(w->tid);
	t = pid ? get_pid_task(pid, PIDTYPE_PID) : NULL;
	put_pid(pid);
	if (!t)
		return -ESRCH;
	/*
	 * The check and the area's start are one step for an exec of t: the
	 * exec either comes after both (its hook stops the area if it changes
	 * t's rights) or has its credentials in place before the check, as
	 * perf_event_open makes sure with the same lock.
	 */
	err = down_read_killable(&t->signal->exec_update_lock);
	if (err)
		goto out_task;
	err = -EPERM;
	if (!ptt_may_watch(t))
		goto out_exec;
	mutex_lock(&ptt_lock);
	ctx = *ctxp;
	err = -EINVAL;
	if (!ctx || !ctx->nmetrics)
		goto out;
	err = -ENOMEM;
	e = ptt_ent_new(ctx, ctx->nmetrics, ctx->slot,
			ctx->flags & PITRACE_PTT_INIT_SYSCALLS, t, GFP_KERNEL);
	if (!e)
		goto out;
	err = ptt_ent_add(ctx, e, t);
	if (err)
		goto out;
	/* the list holds it now */
	kref_put(&e->ref, ptt_ent_release);
out:
	mutex_unlock(&ptt_lock);
out_exec:
	up_read(&t->signal->exec_update_lock);
out_task:
	put_task_struct(t);
	return err;
}

/* A consistent copy of e's area; TSC metrics brought up to now if running. */
static void ptt_snapshot(struct ptt_ent *e, struct pitrace_ptt_thread *th)
{
	struct pitrace_ptt_area *a = e->a;
	int tries;
	u32 s, i;
	u64 now = 0;

	for (tries = 0; tries < 1000; tries++) {
		s = READ_ONCE(a->seq);
		if (s & 1) {
			cpu_relax();
			continue;
		}
		smp_rmb();	/* pairs with ptt_end's smp_wmb() */
		memcpy(&th->a, a, sizeof(*a));
		now = rdtsc();
		smp_rmb();	/* pairs with ptt_begin's smp_wmb() */
		if (READ_ONCE(a->seq) == s)
			break;
	}
	th->running = 0;
	if (!th->a.dead && th->a.cpu < nr_cpu_ids &&
	    READ_ONCE(per_cpu_ptr(&ptt_cpus, th->a.cpu)->cur) == e)
		th->running = 1;
	if (th->running)
		for (i = 0; i < e->nmetrics; i++)
			if (e->slot[i] == PTT_TSC && now > th->a.last[i])
				th->a.accum[i] += now - th->a.last[i];
	th->mapped = e->mapped;
	th->tid = pid_vnr(e->tid);
	th->pid = pid_vnr(e->tgid);
	memcpy(th->comm, e->comm, sizeof(th->comm));
}

static u32 ptt_count(struct ptt_ctx *ctx)
{
	struct ptt_ent *e;
	u32 n = 0;

	spin_lock(&ptt_list_lock);
	list_for_each_entry(e, &ctx->ents, lnode)
		n++;
	spin_unlock(&ptt_list_lock);
	return n;
}

static long ptt_ioc_read(void **ctxp, struct pitrace_ptt_read *r)
{
	struct pitrace_ptt_thread *buf = NULL;
	struct ptt_ctx *ctx;
	struct ptt_ent *e;
	u32 n = 0, total = 0, want;
	long err = 0;

	/* size the buffer by the areas there are, not by what was asked */
	mutex_lock(&ptt_lock);
	ctx = *ctxp;
	if (ctx && ctx->nmetrics)
		total = ptt_count(ctx);
	else
		err = -EINVAL;
	mutex_unlock(&ptt_lock);
	if (err)
		return err;
	/* room for threads a watched process creates meanwhile */
	want = min3(r->max, total + 256, 65536U);	/* ~20 MB at most */
	if (want) {
		buf = kvcalloc(want, sizeof(*buf), GFP_KERNEL);
		if (!buf)
			return -ENOMEM;
	}
	total = 0;
	mutex_lock(&ptt_lock);
	ctx = *ctxp;
	if (!ctx || !ctx->nmetrics) {
		err = -EINVAL;
	} else {
		spin_lock(&ptt_list_lock);
		list_for_each_entry(e, &ctx->ents, lnode) {
			if (n < want)
				ptt_snapshot(e, &buf[n++]);
			total++;
		}
		spin_unlock(&ptt_list_lock);
	}
	mutex_unlock(&ptt_lock);
	/* the array goes out with no lock held */
	if (!err && n &&
	    copy_to_user(u64_to_user_ptr(r->buf), buf, n * sizeof(*buf)))
		err = -EFAULT;
	r->n = n;
	r->total = total;
	kvfree(buf);
	return err;
}

long pt_ptt_ioctl(void **ctxp, unsigned int cmd, void *arg)
{
	switch (cmd) {
	case PITRACE_IOC_PTT_INIT:
		return ptt_ioc_init(ctxp, arg);
	case PITRACE_IOC_PTT_TERM:
		return *ctxp ? ptt_ctx_term(*ctxp) : -EINVAL;
	case PITRACE_IOC_PTT_STATUS:
		return ptt_ioc_status(ctxp, arg);
	case PITRACE_IOC_PTT_WATCH:
		return ptt_ioc_watch(ctxp, arg);
	case PITRACE_IOC_PTT_READ:
		return ptt_ioc_read(ctxp, arg);
	}
	return -ENOTTY;
}

/* Close of the file: its mappings are gone (they hold the file). */
void pt_ptt_release(void *p)
{
	struct ptt_ctx *ctx = p;

	if (!ctx)
		return;
	ptt_ctx_term(ctx);
	kfree(ctx);
}

void pt_ptt_exit(void)
{
	mutex_lock(&ptt_lock);
	ptt_detach();
	mutex_unlock(&ptt_lock);
	flush_work(&ptt_reap_work);
	rcu_barrier();		/* pending frees run before the module goes */
}
