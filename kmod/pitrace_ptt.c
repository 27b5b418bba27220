// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_ptt.c - PTT, per-thread metric virtualization (PI Figure 5).
 *
 * A thread maps its own work area (struct pitrace_ptt_area, one page) from
 * a /dev/pitrace file on which PTT_INIT chose the metrics.  The module
 * keeps the area current so that user space computes the thread's metric
 * without a system call: accum + (counter now - last).
 *
 *   sched_switch:        prev's area: accum += now - last;
 *                        next's area: last = now, cpu, dispatches++.
 *   interrupt entry:     (outermost) the running thread's area is charged
 *                        up to now; the CPU's interrupt bucket starts.
 *   interrupt exit:      (outermost) the elapsed time goes to the CPU's
 *                        bucket and to the area's intr_time; last = now.
 *   sched_process_exit:  the area stops (dead = 1).
 *
 * Areas are found from tasks with an RCU hash keyed by the task pointer,
 * and each CPU keeps a pointer to the running thread's area, so that the
 * interrupt hooks need no lookup.  The hooks never sleep or allocate.
 *
 * Lifetime: an area (struct ptt_ent) is referenced by its file's list and
 * by its mapping.  It leaves the hash at PTT_TERM, munmap, close of the
 * file or thread exit; the page and the entry are freed after an RCU grace
 * period once both references are gone.  Mappings hold the file, so no
 * area outlives the module.
 *
 * Only the TSC metric is implemented (PITRACE_PTT_PERF: -EOPNOTSUPP).
 */
#include <linux/hashtable.h>
#include <linux/interrupt.h>
#include <linux/mm.h>
#include <linux/percpu.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/tracepoint.h>
#include <linux/uaccess.h>
#include <asm/msr.h>

#include "pitrace_int.h"

struct ptt_ent {
	struct hlist_node hnode;	/* ptt_hash, RCU; ptt_hash_lock */
	struct list_head lnode;		/* ctx->ents; ptt_lock */
	struct kref ref;		/* the ctx list and the mapping */
	struct task_struct *task;	/* key only: never dereferenced */
	struct pitrace_ptt_area *a;
	struct page *page;
	u32 nmetrics;
	bool hashed;			/* ptt_hash_lock */
	bool on_list;			/* ptt_lock */
	struct rcu_head rcu;
};

struct ptt_ctx {
	u32 nmetrics;			/* 0: no PTT_INIT (or after PTT_TERM) */
	struct list_head ents;
};

struct ptt_cpu {
	struct ptt_ent *cur;		/* the running thread's area */
	u32 depth;			/* interrupt nesting */
	u64 t0;				/* TSC at the outermost entry */
	u64 nintr;
	u64 tsc;
};

static DEFINE_PER_CPU(struct ptt_cpu, ptt_cpus);
static DEFINE_HASHTABLE(ptt_hash, 10);
static DEFINE_SPINLOCK(ptt_hash_lock);
static DEFINE_MUTEX(ptt_lock);		/* control; never held over user copies */
static int ptt_nareas;			/* hashed areas (ptt_hash_lock) */
static bool ptt_attached;		/* ptt_lock */

/* ---- the area ---------------------------------------------------------- */

static inline void ptt_begin(struct pitrace_ptt_area *a)
{
	WRITE_ONCE(a->seq, a->seq + 1);
	smp_wmb();
}

static inline void ptt_end(struct pitrace_ptt_area *a)
{
	smp_wmb();
	WRITE_ONCE(a->seq, a->seq + 1);
}

/* accum += now - last, last = now (caller between begin and end) */
static inline void ptt_charge(struct ptt_ent *e, u64 now)
{
	struct pitrace_ptt_area *a = e->a;
	u32 i;

	for (i = 0; i < e->nmetrics; i++) {
		a->accum[i] += now - a->last[i];
		a->last[i] = now;
	}
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

static void ptt_tp_switch(void *data, bool preempt, struct task_struct *prev,
			  struct task_struct *next, unsigned int prev_state)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	u64 now;
	u32 i;

	if (!READ_ONCE(ptt_nareas))
		return;
	c = this_cpu_ptr(&ptt_cpus);
	now = rdtsc();
	e = c->cur;
	if (e && e->task == prev) {
		ptt_begin(e->a);
		ptt_charge(e, now);
		ptt_end(e->a);
	}
	e = ptt_lookup(next);
	c->cur = e;
	if (!e)
		return;
	ptt_begin(e->a);
	for (i = 0; i < e->nmetrics; i++)
		e->a->last[i] = now;
	e->a->cpu = smp_processor_id();
	e->a->dispatches++;
	ptt_end(e->a);
}

static void ptt_tp_exit(void *data, struct task_struct *p)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;

	if (!READ_ONCE(ptt_nareas))
		return;
	spin_lock_irqsave(&ptt_hash_lock, fl);
	e = ptt_lookup(p);
	if (e) {
		hash_del_rcu(&e->hnode);
		e->hashed = false;
		ptt_nareas--;
		/* p is current: only this CPU can point at its area */
		c = this_cpu_ptr(&ptt_cpus);
		ptt_begin(e->a);
		if (c->cur == e) {
			ptt_charge(e, rdtsc());
			c->cur = NULL;
		}
		e->a->dead = 1;
		ptt_end(e->a);
	}
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
}

static void ptt_intr_entry(void)
{
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;
	u64 now;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	if (c->depth++ == 0) {
		now = rdtsc();
		c->t0 = now;
		e = c->cur;
		if (e) {
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
	struct ptt_cpu *c;
	struct ptt_ent *e;
	unsigned long fl;
	u64 now, d;
	u32 i;

	local_irq_save(fl);
	c = this_cpu_ptr(&ptt_cpus);
	/* an exit whose entry ran before the hooks were attached */
	if (c->depth == 0 || --c->depth) {
		local_irq_restore(fl);
		return;
	}
	now = rdtsc();
	d = now - c->t0;
	c->nintr++;
	c->tsc += d;
	e = c->cur;
	if (e) {
		ptt_begin(e->a);
		for (i = 0; i < e->nmetrics; i++) {
			e->a->intr_time[i] += d;
			e->a->last[i] = now;
		}
		ptt_end(e->a);
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

struct ptt_tp {
	const char *name;
	void *probe;
	u32 bit;		/* PITRACE_PTT_HOOK_*, 0: required */
	struct tracepoint *tp;
	bool registered;
};

#define PTT_VEC(n, b) \
	{ n "_entry", ptt_tp_vec_entry, b }, { n "_exit", ptt_tp_vec_exit, b }

static struct ptt_tp ptt_tps[] = {
	{ "sched_switch", ptt_tp_switch, 0 },
	{ "sched_process_exit", ptt_tp_exit, 0 },
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
};

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
	ptt_attached = false;
}

/*
 * Attached at the first PTT_INIT and kept until rmmod (like the trace
 * probes: attaching patches kernel text).  An interrupt pair is used only
 * when both of its tracepoints attach.  ptt_lock held.
 */
static int ptt_attach(void)
{
	size_t i;
	int err;

	if (ptt_attached)
		return 0;
	for_each_kernel_tracepoint(ptt_find_tp, NULL);
	for (i = 0; i < ARRAY_SIZE(ptt_tps); i++) {
		struct ptt_tp *p = &ptt_tps[i];

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
	return on & ~off;
}

/* ---- areas --------------------------------------------------------------- */

static void ptt_free_rcu(struct rcu_head *r)
{
	struct ptt_ent *e = container_of(r, struct ptt_ent, rcu);

	__free_page(e->page);
	kfree(e);
}

static void ptt_ent_release(struct kref *ref)
{
	struct ptt_ent *e = container_of(ref, struct ptt_ent, ref);

	call_rcu(&e->rcu, ptt_free_rcu);
}

/* Stop updating an area (process context, may sleep). */
static void ptt_unregister(struct ptt_ent *e)
{
	unsigned long fl;
	bool was;
	int cpu;

	spin_lock_irqsave(&ptt_hash_lock, fl);
	was = e->hashed;
	if (was) {
		hash_del_rcu(&e->hnode);
		e->hashed = false;
		ptt_nareas--;
	}
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
	if (!was)
		return;		/* thread exit did it (and set dead) */
	/* no switch still sets a CPU's pointer to it after this */
	synchronize_rcu();
	for_each_possible_cpu(cpu)
		cmpxchg(&per_cpu_ptr(&ptt_cpus, cpu)->cur, e, NULL);
	/* no interrupt hook still uses it after this */
	synchronize_rcu();
	ptt_begin(e->a);
	WRITE_ONCE(e->a->dead, 1);
	ptt_end(e->a);
}

/* ptt_lock held */
static void ptt_ctx_term(struct ptt_ctx *ctx)
{
	struct ptt_ent *e, *n;

	list_for_each_entry_safe(e, n, &ctx->ents, lnode) {
		ptt_unregister(e);
		list_del(&e->lnode);
		e->on_list = false;
		kref_put(&e->ref, ptt_ent_release);
	}
	ctx->nmetrics = 0;
}

static void ptt_vm_open(struct vm_area_struct *vma)
{
	struct ptt_ent *e = vma->vm_private_data;

	kref_get(&e->ref);
}

static void ptt_vm_close(struct vm_area_struct *vma)
{
	struct ptt_ent *e = vma->vm_private_data;

	mutex_lock(&ptt_lock);
	ptt_unregister(e);
	if (e->on_list) {
		list_del(&e->lnode);
		e->on_list = false;
		kref_put(&e->ref, ptt_ent_release);
	}
	mutex_unlock(&ptt_lock);
	kref_put(&e->ref, ptt_ent_release);
}

static const struct vm_operations_struct ptt_vm_ops = {
	.open = ptt_vm_open,
	.close = ptt_vm_close,
};

/* mmap at PITRACE_PTT_MMAP_OFFSET: the calling thread's area. */
int pt_ptt_mmap(void **ctxp, struct vm_area_struct *vma)
{
	struct ptt_ctx *ctx;
	struct ptt_ent *e = NULL;
	struct ptt_cpu *c;
	unsigned long fl;
	u64 now;
	u32 i;
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
	if (ptt_lookup(current))
		e = ERR_PTR(-EBUSY);
	rcu_read_unlock();
	if (e)
		goto out;
	err = -ENOMEM;
	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		goto out;
	e->page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!e->page)
		goto out_free;
	e->a = page_address(e->page);
	e->nmetrics = ctx->nmetrics;
	e->task = current;
	kref_init(&e->ref);		/* the mapping's */
	pt_vm_flags_clear(vma, VM_MAYWRITE);
	pt_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	err = vm_insert_page(vma, vma->vm_start, e->page);
	if (err)
		goto out_free;
	e->a->nmetrics = e->nmetrics;
	vma->vm_ops = &ptt_vm_ops;
	vma->vm_private_data = e;
	kref_get(&e->ref);		/* the list's */
	list_add(&e->lnode, &ctx->ents);
	e->on_list = true;
	/* the caller runs now: its area starts on this CPU */
	spin_lock_irqsave(&ptt_hash_lock, fl);
	now = rdtsc();
	for (i = 0; i < e->nmetrics; i++)
		e->a->last[i] = now;
	e->a->cpu = smp_processor_id();
	e->a->dispatches = 1;
	hash_add_rcu(ptt_hash, &e->hnode, (unsigned long)current);
	e->hashed = true;
	ptt_nareas++;
	c = this_cpu_ptr(&ptt_cpus);
	c->cur = e;
	spin_unlock_irqrestore(&ptt_hash_lock, fl);
	mutex_unlock(&ptt_lock);
	return 0;
out_free:
	if (e->page)
		__free_page(e->page);
	kfree(e);
out:
	mutex_unlock(&ptt_lock);
	return err;
}

/* ---- ioctls ---------------------------------------------------------------- */

static long ptt_ioc_init(void **ctxp, void __user *arg)
{
	struct pitrace_ptt_init a;
	struct ptt_ctx *ctx;
	u32 i;
	long err;

	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.flags || a.nmetrics == 0 || a.nmetrics > PITRACE_PTT_MAX_METRICS)
		return -EINVAL;
	for (i = 0; i < a.nmetrics; i++) {
		if (a.m[i].kind == PITRACE_PTT_PERF)
			return -EOPNOTSUPP;
		if (a.m[i].kind != PITRACE_PTT_TSC || a.m[i].type ||
		    a.m[i].config)
			return -EINVAL;
	}
	mutex_lock(&ptt_lock);
	err = ptt_attach();
	if (err)
		goto out;
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
	ctx->nmetrics = a.nmetrics;
	err = 0;
out:
	mutex_unlock(&ptt_lock);
	return err;
}

static long ptt_ioc_status(void **ctxp, void __user *arg)
{
	struct pitrace_ptt_status *st;
	struct ptt_ctx *ctx;
	u32 first, cpu;
	long ret = 0;

	if (get_user(first, (u32 __user *)arg))
		return -EFAULT;
	if (first >= nr_cpu_ids)
		return -EINVAL;
	st = kzalloc(sizeof(*st), GFP_KERNEL);
	if (!st)
		return -ENOMEM;
	st->first_cpu = first;
	st->nr_cpus = nr_cpu_ids;
	for (cpu = first; cpu < nr_cpu_ids &&
	     cpu - first < PITRACE_PTT_STATUS_CPUS; cpu++) {
		struct ptt_cpu *c = per_cpu_ptr(&ptt_cpus, cpu);

		st->cpu[cpu - first].interrupts = READ_ONCE(c->nintr);
		st->cpu[cpu - first].tsc = READ_ONCE(c->tsc);
		st->ncpus++;
	}
	mutex_lock(&ptt_lock);
	st->hooks = ptt_hooks();
	st->nareas = READ_ONCE(ptt_nareas);
	ctx = *ctxp;
	st->nmetrics = ctx ? ctx->nmetrics : 0;
	mutex_unlock(&ptt_lock);
	if (copy_to_user(arg, st, sizeof(*st)))
		ret = -EFAULT;
	kfree(st);
	return ret;
}

long pt_ptt_ioctl(void **ctxp, unsigned int cmd, void __user *arg)
{
	long ret;

	switch (cmd) {
	case PITRACE_IOC_PTT_INIT:
		return ptt_ioc_init(ctxp, arg);
	case PITRACE_IOC_PTT_TERM:
		mutex_lock(&ptt_lock);
		ret = -EINVAL;
		if (*ctxp && ((struct ptt_ctx *)*ctxp)->nmetrics) {
			ptt_ctx_term(*ctxp);
			ret = 0;
		}
		mutex_unlock(&ptt_lock);
		return ret;
	case PITRACE_IOC_PTT_STATUS:
		return ptt_ioc_status(ctxp, arg);
	}
	return -ENOTTY;
}

/* Close of the file: its mappings are gone (they hold the file). */
void pt_ptt_release(void *p)
{
	struct ptt_ctx *ctx = p;

	if (!ctx)
		return;
	mutex_lock(&ptt_lock);
	ptt_ctx_term(ctx);
	mutex_unlock(&ptt_lock);
	kfree(ctx);
}

void pt_ptt_exit(void)
{
	mutex_lock(&ptt_lock);
	ptt_detach();
	mutex_unlock(&ptt_lock);
	rcu_barrier();		/* pending frees run before the module goes */
}
