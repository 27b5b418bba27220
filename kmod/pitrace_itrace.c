// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_itrace.c - ITrace through the module: single-step the selected
 * threads with the trap flag and write the same ITrace records as the
 * no-module ptrace tracer (daemon/itrace, docs/trace-format.md).
 *
 * How a thread is stepped.  6.1 does not export user_enable_single_step(),
 * so the module sets X86_EFLAGS_TF in the thread's user pt_regs itself,
 * always from the thread's own context: in the ITRACE_ON ioctl (ITraceOn),
 * at the system call exit of its exec (AT_EXEC), in a task_work the thread
 * runs on its next return to user space (other running threads), or in
 * the fork tracepoint for a new thread (which inherits its parent's regs).
 * Every user instruction then raises #DB; the DIE_DEBUG notifier reads the
 * instruction just executed (copy_from_user_nofault: it ran, so its page
 * is present), decodes its length and kind (pitrace_insn.c) and compares
 * the new ip with the fall-through, exactly as the ptrace tracer does.
 *
 * Kernel work is not stepped: SYSCALL clears TF (MSR_SYSCALL_MASK) and the
 * kernel returns with IRET when TF is set in the saved flags, so the first
 * trap after a system call follows the instruction after it.  The
 * raw_syscalls tracepoints end the block at the syscall instruction and
 * write ITRACE_SYSCALL with its duration (held back when the call may be
 * restarted: ith_sys_flush).  Signal delivery clears TF for
 * the handler (handle_signal): the signal_deliver tracepoint queues a
 * task_work that runs right after the frame is set up, writes
 * ITRACE_SIGNAL (to = the handler) and sets TF again; rt_sigreturn
 * restores the frame's TF.  Interrupts and page faults taken in user code
 * are seen at their entry tracepoints and written, as one record that is
 * not a branch, at the thread's next point here (ith_kentry, ith_kflush).
 *
 * The -icount identity: TSC windows the module measures per thread (trap
 * handling, system calls, interrupts, faults), ITRACE_STATS.
 *
 * Traps are consumed only for threads this module traces and only when
 * ptrace is not single-stepping the thread as well (TIF_SINGLESTEP): then
 * the trap is also ptrace's.  Notifiers of higher priority (uprobes,
 * hw_breakpoint) see the trap first.
 *
 * Stopping.  A stopped thread (off, tracing off, buffer full) is marked
 * stale; its next trap clears TF and frees it.  A thread inside signal
 * handlers has TF in their frames too: that trap clears it there as well
 * (ith_frames_untrap).  Handlers left by siglongjmp are recognised by the
 * stack pointer (ith_frames_left).  Each thread entry (and each process waiting for its exec)
 * holds a module reference, dropped in an RCU callback when the entry is
 * freed, so rmmod is refused ("in use") while a thread may still trap, and
 * module exit's rcu_barrier() waits for the last callback.
 */
#include <linux/binfmts.h>
#include <linux/errno.h>
#include <linux/hashtable.h>
#include <linux/interrupt.h>
#include <linux/kdebug.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/sched/task_stack.h>
#include <linux/signal.h>
#include <linux/slab.h>
#include <linux/task_work.h>
#include <linux/tracepoint.h>
#include <linux/uaccess.h>
#include <asm/debugreg.h>
#include <asm/msr.h>
#include <asm/processor-flags.h>
#include <asm/sigframe.h>
#include <asm/tsc.h>
#include <asm/unistd.h>

#include "pitrace_int.h"
#include "pitrace_insn.h"
#include "pitrace_block.h"

enum {
	ITH_PENDING,	/* task_work queued: starts on its next return to user */
	ITH_ON,		/* stepped, records written */
	ITH_STALE,	/* stopped: its next trap (outside handlers) clears TF */
};

#define ITH_FRAMES	8	/* nested handler frames whose sp is kept */

struct ith {
	struct hlist_node hn;		/* ith_hash, by task */
	struct task_struct *task;	/* reference held */
	struct callback_head work;	/* start / signal handler entry */
	struct rcu_head rcu;
	pid_t pid, tid;
	u32 state;
	bool follow;
	u32 step;			/* PITRACE_ITRACE_STEP_* */
	bool work_queued;		/* work pending: the callback frees a dead entry */
	bool dead;			/* unhashed: free when the work has run */
	bool in_sys;
	bool sys_pend;			/* ITRACE_SYSCALL held back (ith_sys_flush) */
	u32 pend_dur;			/* its duration (ns) */
	u32 handlers;			/* signal frames holding TF */
	/* handler entry sp of the innermost frames (ith_frames_left) */
	u64 frame_sp[ITH_FRAMES];
	bool frame_alt[ITH_FRAMES];	/* that frame is on the sigaltstack */
	u32 sig;			/* signal whose handler the work announces */
	u64 sig_c0;			/* TSC at its signal_deliver */
	u32 sys_nr;
	u64 sys_t0, sys_c0;		/* ns and TSC at sys_enter */
	u64 ip, start, rcx;		/* next instruction, block start, rcx before it */
	u32 count, lastoff;
	u64 insns, records;
	/* a kernel entry from user mode (interrupt, page fault) not yet written */
	u32 k_minor;			/* 0, or PITRACE_ITRACE_INTERRUPT / _FAULT */
	u32 k_arg;			/* irq (interrupt), error code (fault) */
	u64 k_addr, k_c0;		/* fault address, TSC at the entry */
	struct pitrace_itrace_stats st;	/* the -icount identity's terms */
	/* block-stepping (auto) and its check (STEP_VERIFY), pitrace_block.c */
	bool btf;			/* BTF set for the block at ip */
	bool bprobe;			/* that block tells whether BTF is ignored */
	u64 bfirst;			/* ip of a trap after its first instruction alone */
	bool bfirst_spk;		/* and the stack pointer's change then, if known */
	int bfirst_sp;
	u64 bsp;			/* the stack pointer at the line's start */
	bool bspk;			/* (verify: known only where a trap started it) */
	u64 bstart;			/* verify: the line's start */
	u32 bn;				/* verify: instructions stepped since bstart */
	bool bok;			/* verify: the line is block-steppable */
	bool bneeds;			/* verify: its ends are told apart by sp only */
	u64 vbranches;			/* verify: taken branches (the kernel log) */
};

/* processes waiting for their exec (AT_EXEC) */
struct ith_pend {
	struct list_head node;
	pid_t tgid;
	u32 flags;			/* PITRACE_ITRACE_FOLLOW, _STEP_* */
	struct task_struct *task;	/* while selected: reference held */
};

#define ITH_INHERIT	(PITRACE_ITRACE_FOLLOW | PITRACE_ITRACE_STEP_SINGLE | \
			 PITRACE_ITRACE_STEP_VERIFY)

/* Does this machine honour BTF?  Found at the first block-step trap. */
enum { ITH_BTF_UNKNOWN, ITH_BTF_HONOURED, ITH_BTF_IGNORED };
static int ith_btf_state;	/* ith_lock */

static DEFINE_RAW_SPINLOCK(ith_lock);
static DEFINE_HASHTABLE(ith_hash, 8);
static LIST_HEAD(ith_pend_list);
static int ith_nthreads;		/* entries in ith_hash */
static int ith_npend;
static bool ith_hooked;			/* notifier and tracepoints attached: pt.lock */
static DEFINE_PER_CPU(u64, ith_last);	/* (on_count << 32) | tid of the last ITRACE_THREAD */
/* the statistics of the last thread that ended (ITRACE_STATS) */
static struct pitrace_itrace_stats ith_ended;
static u64 ith_ended_birth;	/* its task's start_time: a reused tid is not it */

/* TSC ticks to ns, as the records carry ns (dur_ns saturates) */
static u32 ith_tsc_ns(u64 ticks)
{
	u64 ns = tsc_khz ? mul_u64_u32_div(ticks, 1000000, tsc_khz) : ticks;

	return min_t(u64, ns, U32_MAX);
}

/* ---- block-stepping (ith_lock held, irqs off) ----------------------------- */

/* pt_read_fn for the current task's user memory: the notifier may not fault */
static int ith_read(void *ctx, unsigned long long addr, unsigned char *buf,
		    unsigned int n)
{
	return copy_from_user_nofault(buf, (const void __user *)
				      (unsigned long)addr, n) ? -1 : 0;
}

/*
 * BTF for the current thread: TIF_BLOCKSTEP (so that __switch_to_xtra sets
 * or clears DEBUGCTLMSR_BTF as the thread comes and goes) and the MSR of
 * this CPU now, as arch/x86/kernel/step.c's set_task_blockstep (not
 * exported) does.  Irqs are off.  False if the MSR cannot be accessed.
 */
static bool ith_btf_set(bool on)
{
	u64 dbg;

	if (rdmsrl_safe(MSR_IA32_DEBUGCTLMSR, &dbg))
		return false;
	if (on)
		dbg |= DEBUGCTLMSR_BTF;
	else
		dbg &= ~DEBUGCTLMSR_BTF;
	if (wrmsrl_safe(MSR_IA32_DEBUGCTLMSR, dbg))
		return false;
	if (on)
		set_thread_flag(TIF_BLOCKSTEP);
	else
		clear_thread_flag(TIF_BLOCKSTEP);
	return true;
}

/*
 * th (the current thread) is single-stepped from here.  A #DB already
 * cleared BTF in the CPU (and the kernel TIF_BLOCKSTEP); a CPU that
 * ignores BTF may keep the bit: it is cleared all the same.
 */
static void ith_btf_off(struct ith *th)
{
	lockdep_assert_held(&ith_lock);
	if (!th->btf)
		return;
	th->btf = false;
	if (th->task == current)
		ith_btf_set(false);
}

static void ith_btf_found(int state, const char *why)
{
	lockdep_assert_held(&ith_lock);
	if (ith_btf_state != ITH_BTF_UNKNOWN)
		return;
	ith_btf_state = state;
	if (state == ITH_BTF_HONOURED)
		pr_info("pitrace: itrace: this CPU honours BTF: block-stepping\n");
	else
		pr_info("pitrace: itrace: this CPU ignores BTF (%s): single-stepping\n",
			why);
}

/* verify: a new line starts at ip (after a taken branch or a record) */
static void ith_bnew(struct ith *th, u64 ip)
{
	struct pt_scan sc;

	lockdep_assert_held(&ith_lock);

	if (!(th->step & PITRACE_ITRACE_STEP_VERIFY))
		return;
	th->bstart = ip;
	th->bn = 0;
	th->bspk = false;
	pt_block_scan(ith_read, NULL, ip, &sc);
	th->bok = sc.flags & PT_BLOCK_STEPPABLE;
	th->bneeds = sc.flags & PT_BLOCK_NEEDS_SP;
	if (!th->bok)
		th->st.refused++;
}

/* verify: a line that started at regs (the thread's user regs) has its sp */
static void ith_bsp(struct ith *th, struct pt_regs *regs)
{
	lockdep_assert_held(&ith_lock);
	if (th->step & PITRACE_ITRACE_STEP_VERIFY && !th->bn &&
	    th->bstart == regs->ip) {
		th->bsp = regs->sp;
		th->bspk = true;
	}
}

static void ith_disagree(struct ith *th, const char *what, u64 to, u32 n,
			 u64 last, const struct pt_block *b, int r)
{
	lockdep_assert_held(&ith_lock);
	th->st.disagreements++;
	pr_warn_ratelimited("pitrace: itrace verify: tid %d: %s %llx to %llx: single-step %u instructions to %llx, decoder %d %u to %llx\n",
			    th->tid, what, th->bstart, to, n, last, r,
			    b->count, b->last);
}

/*
 * verify: single-stepping found the taken branch at last (kind) to ip
 * after th->bn instructions of the line: the block decoder must say the same.
 */
static void ith_verify(struct ith *th, u64 last, unsigned int kind, u64 ip,
		       u64 sp)
{
	struct pt_block b = { 0 };
	int r;

	lockdep_assert_held(&ith_lock);

	if (!(th->step & PITRACE_ITRACE_STEP_VERIFY))
		return;
	th->vbranches++;
	if (!th->bok)
		return;
	th->st.block_traps++;	/* block-stepped, this block's one trap */
	if (th->bneeds && !th->bspk)
		return;		/* its start's sp unknown here (not after a trap) */
	th->st.blocks++;
	r = pt_block_walk(ith_read, NULL, th->bstart, ip, sp - th->bsp,
			  th->bspk, &b);
	if (r || b.count != th->bn || b.last != last || b.kind != kind)
		ith_disagree(th, "block", ip, th->bn, last, &b, r);
}

/*
 * A kernel entry (interrupt, fault, signal) in the middle of a line, the
 * thread's next user instruction at ip.  Block-stepped: count the
 * instructions run since th->ip (no branch was taken, or it had trapped).
 * Verify: the decoder's count of them must be single-stepping's.
 * keep: the block may go on block-stepped (not into a signal handler).
 */
static void ith_catchup(struct ith *th, u64 ip, u64 sp, bool keep)
{
	struct pt_block b;
	int r;

	lockdep_assert_held(&ith_lock);

	if (th->btf) {
		r = pt_block_walk_to(ith_read, NULL, th->ip, ip, &b);
		if (r) {
			th->st.disagreements++;
			pr_warn_ratelimited("pitrace: itrace: tid %d: %llx is not on the line from %llx\n",
					    th->tid, ip, th->ip);
		} else if (b.count) {
			th->count += b.count;
			th->insns += b.count;
			th->lastoff = b.last - th->start;
			th->ip = ip;
			th->bsp = sp;
			/* a probe's first instruction is behind: cannot probe */
			th->bprobe = false;
		}
		if (r || !keep || ith_btf_state != ITH_BTF_HONOURED)
			ith_btf_off(th);
	} else if (th->step & PITRACE_ITRACE_STEP_VERIFY && th->bok &&
		   ip == th->ip) {
		th->st.blocks++;
		r = pt_block_walk_to(ith_read, NULL, th->bstart, ip, &b);
		if (r || b.count != th->bn)
			ith_disagree(th, "line", ip, th->bn, ip, &b, r);
	}
}

/*
 * After a trap: block-step the line at th->ip if it can be decoded
 * exactly (and, while it is not known whether this CPU honours BTF, if it
 * tells).  Only at a line's start (no instruction of the block counted):
 * a line single-stepped is scanned once.
 */
static void ith_block_next(struct ith *th, struct pt_regs *regs)
{
	struct pt_scan sc;

	lockdep_assert_held(&ith_lock);

	if (th->step || ith_btf_state == ITH_BTF_IGNORED || th->count ||
	    test_thread_flag(TIF_SINGLESTEP))
		return;
	pt_block_scan(ith_read, NULL, th->ip, &sc);
	if (!(sc.flags & PT_BLOCK_STEPPABLE) ||
	    (ith_btf_state == ITH_BTF_UNKNOWN && !(sc.flags & PT_BLOCK_PROBE))) {
		th->st.refused++;
		return;
	}
	if (!ith_btf_set(true)) {
		ith_btf_found(ITH_BTF_IGNORED, "DEBUGCTL not writable");
		return;
	}
	th->btf = true;
	th->bprobe = sc.flags & PT_BLOCK_PROBE;
	th->bfirst = sc.first_next;
	th->bfirst_spk = sc.first_spk;
	th->bfirst_sp = sc.first_sp;
	th->bsp = regs->sp;
}

/* ---- records (ith_lock held, irqs off) ------------------------------------ */

/*
 * The ITRACE_THREAD record that names the thread of the records after it
 * on this CPU, unless it is named already.  *records counts it (written,
 * or counted lost by the buffer); false if it was lost.
 */
static bool ith_name(pid_t pid, pid_t tid, u64 *records)
{
	u64 key = ((u64)(u32)pt.on_count << 32) | (u32)tid;
	struct pitrace_rec_itrace_thread t = { pid, tid };

	lockdep_assert_held(&ith_lock);
	if (__this_cpu_read(ith_last) == key)
		return true;
	(*records)++;
	if (!pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_ITRACE_U,
		      PITRACE_ITRACE_THREAD, PITRACE_LAYOUT_FIXED, &t, sizeof(t),
		      NULL, 0))
		return false;
	__this_cpu_write(ith_last, key);
	return true;
}

static bool ith_write(struct ith *th, u16 major, u32 minor, const void *f,
		      u32 len)
{
	lockdep_assert_held(&ith_lock);

	if (!ith_name(th->pid, th->tid, &th->records))
		return false;
	th->records++;
	return pt_write(PITRACE_KIND_TRACE, major, minor, PITRACE_LAYOUT_FIXED,
			f, len, NULL, 0);
}

/*
 * ITRACE_END for a thread that never started (no ITRACE_START): it was
 * to start at this exec, or on its way back to user space.  count 0.
 */
static void ith_end_unstarted(pid_t pid, pid_t tid, u32 reason)
{
	struct pitrace_rec_itrace_end r = { pid, tid, 0, 0, reason };
	u64 records = 0;

	lockdep_assert_held(&ith_lock);
	if (ith_name(pid, tid, &records))
		pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_ITRACE_U,
			 PITRACE_ITRACE_END, PITRACE_LAYOUT_FIXED, &r,
			 sizeof(r), NULL, 0);
}

static void ith_start(struct ith *th, struct pt_regs *regs, u32 flags)
{
	struct pitrace_rec_itrace_start r = { th->pid, th->tid, regs->ip, flags };

	lockdep_assert_held(&ith_lock);

	th->state = ITH_ON;
	th->ip = th->start = regs->ip;
	th->rcx = regs->cx;
	th->count = th->lastoff = 0;
	th->in_sys = false;
	th->sys_pend = false;
	th->k_minor = 0;
	memset(&th->st, 0, sizeof(th->st));
	th->st.tid = th->tid;
	th->st.step = th->step;
	ith_bnew(th, th->ip);
	ith_bsp(th, regs);
	regs->flags |= X86_EFLAGS_TF;
	ith_write(th, PITRACE_MAJOR_ITRACE_U, PITRACE_ITRACE_START, &r,
		  sizeof(r));
}

static void ith_block(struct ith *th, u16 major, u32 minor, u64 to, u32 arg,
		      u32 arg2);
static void ith_sys_flush(struct ith *th, u64 to);

/*
 * Write th's pending interrupt or fault record, its duration ending at now
 * (the module's next point in the thread).  It ends the block without a
 * branch: the next block starts where user code resumed (th->ip).
 */
static void ith_kflush(struct ith *th, u64 now)
{
	u64 d = now - th->k_c0;
	/* the statistics count what lies inside the span (ITRACE_STATS) */
	bool in_span = th->st.traps && th->k_c0 >= th->st.start_tsc;

	lockdep_assert_held(&ith_lock);
	if (!th->k_minor)
		return;
	if (th->k_minor == PITRACE_ITRACE_INTERRUPT) {
		if (in_span) {
			th->st.interrupts++;
			th->st.irq_tsc += d;
		}
		ith_block(th, PITRACE_MAJOR_ITRACE_K, PITRACE_ITRACE_INTERRUPT,
			  th->ip, th->k_arg, ith_tsc_ns(d));
	} else {
		struct pitrace_rec_itrace_fault r = { th->ip, th->count,
						      th->lastoff, th->k_addr,
						      th->k_arg,
						      ith_tsc_ns(d) };

		if (in_span) {
			th->st.faults++;
			th->st.fault_tsc += d;
		}
		ith_write(th, PITRACE_MAJOR_ITRACE_K, PITRACE_ITRACE_FAULT, &r,
			  sizeof(r));
		th->start = th->ip;
		th->count = th->lastoff = 0;
		ith_bnew(th, th->ip);
	}
	th->k_minor = 0;
}

static void ith_end(struct ith *th, u32 reason)
{
	struct pitrace_rec_itrace_end r = { th->pid, th->tid, th->count,
					    th->lastoff, reason };

	lockdep_assert_held(&ith_lock);

	if (th->state == ITH_ON) {
		u64 now = get_cycles();

		ith_sys_flush(th, th->ip);
		ith_kflush(th, now);
		r.count = th->count;
		r.from_off = th->lastoff;
		ith_write(th, PITRACE_MAJOR_ITRACE_U, PITRACE_ITRACE_END, &r,
			  sizeof(r));
		th->st.instructions = th->insns;
		th->st.btf_ignored = ith_btf_state == ITH_BTF_IGNORED;
		if (th->step & PITRACE_ITRACE_STEP_VERIFY)
			pr_info("pitrace: itrace verify: tid %d: %llu instructions, %llu blocks checked, %llu disagreements, %llu lines not block-steppable, %llu traps if block-stepped, %llu taken branches\n",
				th->tid, th->insns, th->st.blocks,
				th->st.disagreements, th->st.refused,
				th->st.block_traps, th->vbranches);
		/* ITRACE_OFF of the thread itself: the span ends at its sys_enter */
		th->st.end_tsc = th->in_sys ? th->sys_c0 : now;
		ith_ended = th->st;
		ith_ended_birth = th->task->start_time;
	}
	th->state = ITH_STALE;
}

/* End th's block with a record, the next block starting at to. */
static void ith_block(struct ith *th, u16 major, u32 minor, u64 to, u32 arg,
		      u32 arg2)
{
	/* ITRACE_SYSCALL and ITRACE_SIGNAL have the same layout */
	struct pitrace_rec_itrace_syscall r = { to, th->count, th->lastoff, arg,
						arg2 };

	BUILD_BUG_ON(sizeof(struct pitrace_rec_itrace_signal) != sizeof(r));
	u32 len = major == PITRACE_MAJOR_ITRACE_K ? sizeof(r) :
		  sizeof(struct pitrace_rec_itrace_block);

	lockdep_assert_held(&ith_lock);
	BUILD_BUG_ON(offsetof(struct pitrace_rec_itrace_block, from_off) !=
		     offsetof(struct pitrace_rec_itrace_syscall, from_off));
	ith_write(th, major, minor, &r, len);
	th->start = to;
	th->count = th->lastoff = 0;
	ith_bnew(th, to);
}

/*
 * A system call that returned a restart code (-ERESTARTSYS ...) may run its
 * syscall instruction again: with no handler to run, the kernel moves ip
 * back to it on the way out, after the sys_exit tracepoint.  Its record is
 * held back to the thread's next point here and written then, its block
 * going on at to: the instruction after the syscall (user code ran, or a
 * handler came), or the syscall instruction itself when the next point is
 * that syscall again (ith_sys_enter).
 */
static void ith_sys_flush(struct ith *th, u64 to)
{
	lockdep_assert_held(&ith_lock);
	if (!th->sys_pend)
		return;
	th->sys_pend = false;
	ith_block(th, PITRACE_MAJOR_ITRACE_K, PITRACE_ITRACE_SYSCALL, to,
		  th->sys_nr, th->pend_dur);
}

static bool ith_restart_code(long ret)
{
	return ret == -ERESTARTSYS || ret == -ERESTARTNOINTR ||
	       ret == -ERESTARTNOHAND || ret == -ERESTART_RESTARTBLOCK;
}

/* ---- entries -------------------------------------------------------------- */

static struct ith *ith_find(struct task_struct *t)
{
	struct ith *th;

	lockdep_assert_held(&ith_lock);

	hash_for_each_possible(ith_hash, th, hn, (unsigned long)t)
		if (th->task == t)
			return th;
	return NULL;
}

static void ith_free_rcu(struct rcu_head *r)
{
	struct ith *th = container_of(r, struct ith, rcu);

	put_task_struct(th->task);
	kfree(th);
	module_put(THIS_MODULE);
}

/* Unhash th (ith_lock held); freed now, or by its pending work. */
static void ith_unhash(struct ith *th)
{
	lockdep_assert_held(&ith_lock);
	hash_del(&th->hn);
	ith_nthreads--;
	th->dead = true;
	if (!th->work_queued)
		call_rcu(&th->rcu, ith_free_rcu);
}

/* A new entry for t (a module reference taken), or NULL. */
static struct ith *ith_new(struct task_struct *t, u32 flags, gfp_t gfp)
{
	struct ith *th = kzalloc(sizeof(*th), gfp);

	if (!th)
		return NULL;
	__module_get(THIS_MODULE);	/* the caller holds one: fd or entry */
	get_task_struct(t);
	th->task = t;
	th->pid = task_tgid_nr(t);
	th->tid = task_pid_nr(t);
	th->follow = flags & PITRACE_ITRACE_FOLLOW;
	th->step = flags & (PITRACE_ITRACE_STEP_SINGLE |
			    PITRACE_ITRACE_STEP_VERIFY);
	return th;
}

static void ith_hash_add(struct ith *th)
{
	lockdep_assert_held(&ith_lock);
	hash_add(ith_hash, &th->hn, (unsigned long)th->task);
	ith_nthreads++;
}

/* ---- signal frames -------------------------------------------------------- */

/*
 * Clear TF in the flags a signal frame saved (the handler's entry sp points
 * at the frame, struct rt_sigframe), so that its rt_sigreturn, if it still
 * comes, does not step the thread again.  The frame was written at the
 * signal's delivery; its page is normally present.  False if it is not.
 */
static bool ith_frame_untrap(u64 frame_sp)
{
	unsigned long __user *uf = (unsigned long __user *)
		(frame_sp + offsetof(struct rt_sigframe, uc.uc_mcontext.flags));
	unsigned long fl;

	if (copy_from_user_nofault(&fl, uf, sizeof(fl)))
		return false;
	if (!(fl & X86_EFLAGS_TF))
		return true;
	fl &= ~X86_EFLAGS_TF;
	return !copy_to_user_nofault(uf, &fl, sizeof(fl));
}

/*
 * Drop the handler frames th has left without rt_sigreturn (siglongjmp out
 * of a handler) at user sp.  At a handler's entry sp points at its frame;
 * the handler runs below it, and its return (ret, then the restorer's
 * syscall) runs at sp + 8.  Any sp above that is the code the frame
 * interrupted or one of its callers: the handler is gone, and TF is
 * cleared in the abandoned frame (a handler that moved its stack above its
 * frame and still returns is then no longer stepped after its return).
 * A frame on the sigaltstack is left when sp is off the alternate stack.
 * Frames deeper than ITH_FRAMES carry no sp: only rt_sigreturn drops them.
 */
static void ith_frames_left(struct ith *th, u64 sp)
{
	while (th->handlers && th->handlers <= ITH_FRAMES) {
		u32 i = th->handlers - 1;

		if (th->frame_alt[i] ? on_sig_stack(sp) :
		    sp <= th->frame_sp[i] + 8)
			break;
		ith_frame_untrap(th->frame_sp[i]);
		th->handlers--;
	}
}

/*
 * A stopped thread inside handlers: clear TF in every frame it is still
 * inside, so that it can be let go now.  False if a frame is not known
 * (deeper than ITH_FRAMES) or cannot be written: it then stays stepped,
 * silently, until it has returned from (or left) them.
 */
static bool ith_frames_untrap(struct ith *th)
{
	if (th->handlers > ITH_FRAMES)
		return false;
	while (th->handlers) {
		if (!ith_frame_untrap(th->frame_sp[th->handlers - 1]))
			return false;
		th->handlers--;
	}
	return true;
}

/* ---- the step ------------------------------------------------------------- */

static void ith_decode(u64 ip, struct pt_insn *in)
{
	pt_insn_fetch(ith_read, NULL, ip, in);
}

static u32 ith_minor(unsigned int kind)
{
	switch (kind) {
	case PT_INSN_CALL:
	case PT_INSN_RETURN:
	case PT_INSN_JUMP:
	case PT_INSN_IRET:
		return kind;	/* the arc types 1..4 */
	case PT_INSN_UNDECODABLE:
		return 6;	/* UNDEFD */
	}
	return 5;		/* OTHER */
}

/* One single-step trap of an ON thread at regs->ip (the ptrace tracer's step). */
static void ith_step(struct ith *th, struct pt_regs *regs)
{
	u64 newip = regs->ip, prev = th->ip, rcx = th->rcx;
	struct pt_insn in;

	ith_decode(prev, &in);
	th->lastoff = prev - th->start;
	th->count++;
	th->insns++;
	th->bn++;
	if (th->step & PITRACE_ITRACE_STEP_VERIFY && !th->bok)
		th->st.block_traps++;	/* a line block-stepping steps too */
	th->ip = newip;
	th->rcx = regs->cx;
	switch (in.kind) {
	case PT_INSN_CALL:
	case PT_INSN_RETURN:
	case PT_INSN_IRET:
		ith_verify(th, prev, in.kind, newip, regs->sp);
		ith_block(th, PITRACE_MAJOR_ITRACE_U, in.kind, newip, 0, 0);
		return;
	case PT_INSN_SYSCALL:
		/* caught by the syscall tracepoints; not expected here */
		ith_block(th, PITRACE_MAJOR_ITRACE_K, PITRACE_ITRACE_SYSCALL,
			  newip, U32_MAX, 0);
		return;
	}
	if (in.rep && newip == prev)
		return;		/* one more iteration */
	if (in.rep && newip == prev + in.len && rcx) {
		/* callgrind counts n + 1 for n iterations; the trap came n times */
		th->count++;
		th->insns++;
		th->st.reps++;
		return;
	}
	if (in.kind == PT_INSN_PLAIN && in.len)
		return;
	if (in.len && newip == prev + in.len)
		return;		/* not taken */
	if (in.kind == PT_INSN_UNDECODABLE && newip > prev && newip <= prev + 15)
		return;
	ith_verify(th, prev, in.kind, newip, regs->sp);
	ith_block(th, PITRACE_MAJOR_ITRACE_U, ith_minor(in.kind), newip, 0, 0);
}

/*
 * A trap with BTF set: a taken branch went to regs->ip (block-stepped), or
 * the CPU ignored BTF and trapped after one instruction (the probe: the
 * first instruction moves no control and no branch of the line goes to its
 * fall-through).
 */
static void ith_block_step(struct ith *th, struct pt_regs *regs)
{
	u64 to = regs->ip;
	struct pt_block b;

	th->st.block_traps++;
	if (ith_btf_state == ITH_BTF_UNKNOWN && th->bprobe && to == th->bfirst &&
	    (!th->bfirst_spk || regs->sp - th->bsp == (u64)(s64)th->bfirst_sp)) {
		ith_btf_found(ITH_BTF_IGNORED,
			      "a trap after an instruction that is no branch");
		ith_step(th, regs);
		return;
	}
	if (pt_block_walk(ith_read, NULL, th->ip, to, regs->sp - th->bsp, 1,
			  &b)) {
		/* cannot happen on a line pt_block_scan accepted */
		th->st.disagreements++;
		pr_warn_ratelimited("pitrace: itrace: tid %d: no branch from %llx reaches %llx\n",
				    th->tid, th->ip, to);
		th->ip = to;
		th->rcx = regs->cx;
		ith_block(th, PITRACE_MAJOR_ITRACE_U, 6, to, 0, 0);
		return;
	}
	ith_btf_found(ITH_BTF_HONOURED, NULL);
	th->st.blocks++;
	th->count += b.count;
	th->insns += b.count;
	th->lastoff = b.last - th->start;
	th->ip = to;
	th->rcx = regs->cx;
	ith_block(th, PITRACE_MAJOR_ITRACE_U, ith_minor(b.kind), to, 0, 0);
}

static int ith_die(struct notifier_block *nb, unsigned long val, void *data)
{
	struct die_args *args = data;
	struct pt_regs *regs = args->regs;
	unsigned long *dr6 = (unsigned long *)args->err;
	unsigned long flags;
	struct ith *th;
	int ret = NOTIFY_STOP;
	bool was_btf;
	u64 t_in;

	if (val != DIE_DEBUG || !regs || !user_mode(regs) || !dr6 ||
	    !(*dr6 & DR_STEP) || !READ_ONCE(ith_nthreads))
		return NOTIFY_DONE;
	t_in = get_cycles();
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	if (!th || th->state == ITH_PENDING) {
		ret = NOTIFY_DONE;
		goto out;
	}
	/* the #DB cleared BTF (a CPU that ignores it may not have: clear it) */
	was_btf = th->btf;
	ith_btf_off(th);
	if (th->state == ITH_ON && !READ_ONCE(pt_active))
		ith_end(th, PITRACE_ITRACE_END_OFF);	/* buffer full, or off */
	ith_frames_left(th, regs->sp);
	if (th->state == ITH_ON) {
		if (!th->st.traps)
			th->st.start_tsc = t_in;	/* the span starts here */
		th->st.traps++;
		ith_sys_flush(th, th->ip);
		ith_kflush(th, t_in);
		if (was_btf) {
			ith_block_step(th, regs);
		} else {
			ith_step(th, regs);
		}
		ith_bsp(th, regs);
		ith_block_next(th, regs);
		/*
		 * Code that cleared TF itself (popf of an old flags word):
		 * the trap after that instruction still comes; step on.
		 */
		regs->flags |= X86_EFLAGS_TF;
		th->st.trap_tsc += get_cycles() - t_in;
	} else if (!th->handlers || ith_frames_untrap(th)) {
		regs->flags &= ~X86_EFLAGS_TF;
		ith_unhash(th);
	}
	if (test_thread_flag(TIF_SINGLESTEP))
		ret = NOTIFY_DONE;	/* ptrace steps it too: its trap as well */
out:
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	return ret;
}

static struct notifier_block ith_nb = {
	.notifier_call = ith_die,
};

/* ---- task_work: start of another thread, signal handler entry ------------- */

static void ith_work_fn(struct callback_head *cb)
{
	struct ith *th = container_of(cb, struct ith, work);
	struct pt_regs *regs = task_pt_regs(current);
	unsigned long flags;

	raw_spin_lock_irqsave(&ith_lock, flags);
	th->work_queued = false;
	if (th->dead || current->flags & PF_EXITING) {
		/* do_exit runs works after the exit tracepoint unhashed it */
		if (!th->dead)
			ith_unhash(th);
		else
			call_rcu(&th->rcu, ith_free_rcu);
		goto out;
	}
	if (th->state == ITH_PENDING) {
		if (READ_ONCE(pt_active))
			ith_start(th, regs, 0);
		else
			ith_unhash(th);
	} else if (th->sig) {
		/* handle_signal cleared TF; the frame holds the old flags */
		if (th->handlers < ITH_FRAMES) {
			th->frame_sp[th->handlers] = regs->sp;
			th->frame_alt[th->handlers] = on_sig_stack(regs->sp);
		}
		th->handlers++;
		regs->flags |= X86_EFLAGS_TF;
		if (th->state == ITH_ON) {
			ith_sys_flush(th, th->ip);
			ith_kflush(th, get_cycles());
		}
		if (th->state == ITH_ON)
			ith_block(th, PITRACE_MAJOR_ITRACE_K,
				  PITRACE_ITRACE_SIGNAL, regs->ip, th->sig,
				  PITRACE_ITRACE_SIG_HANDLER);
		th->ip = regs->ip;
		th->rcx = regs->cx;
		ith_bsp(th, regs);
		/* the delivery's window: dequeue to the frame set up (-icount) */
		if (th->state == ITH_ON && th->st.traps &&
		    th->sig_c0 >= th->st.start_tsc) {
			th->st.signals++;
			th->st.sig_tsc += get_cycles() - th->sig_c0;
		}
	}
	th->sig = 0;
out:
	raw_spin_unlock_irqrestore(&ith_lock, flags);
}

/* ---- tracepoints ------------------------------------------------------------ */

static void ith_sys_enter(void *data, struct pt_regs *regs, long id)
{
	unsigned long flags;
	struct ith *th;

	if (!READ_ONCE(ith_nthreads))
		return;
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	if (th && th->state != ITH_PENDING) {
		ith_frames_left(th, regs->sp);
		if (id == __NR_rt_sigreturn && th->handlers)
			th->handlers--;
		if (th->state == ITH_ON) {
			u64 now = get_cycles();
			/* no user instruction since: the syscall restarted */
			bool again = th->sys_pend && regs->ip == th->ip;

			ith_sys_flush(th, again ? regs->ip - 2 : th->ip);
			/* an interrupt before the syscall instruction ends here */
			ith_kflush(th, now);
			th->sys_c0 = now;
			/*
			 * The syscall instruction ends the block.  Run again by
			 * a restart, it is not counted a second time (nor by
			 * callgrind): the record has count 0.
			 */
			if (!again) {
				th->lastoff = regs->ip - 2 - th->start;
				th->count++;
				th->insns++;
			}
			th->in_sys = true;
			th->sys_nr = id;
			th->sys_t0 = ktime_get_mono_fast_ns();
		}
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
}

static struct ith_pend *ith_find_pending(pid_t tgid)
{
	struct ith_pend *p;

	lockdep_assert_held(&ith_lock);

	list_for_each_entry(p, &ith_pend_list, node)
		if (p->tgid == tgid)
			return p;
	return NULL;
}

/*
 * Take tgid's pending entry off the list.  Its module reference passes to
 * the caller, who drops it (module_put) only after taking the thread's
 * own: the count never touches 0 in between.
 */
static bool ith_take_pending(pid_t tgid, u32 *flags)
{
	struct ith_pend *p = ith_find_pending(tgid);

	lockdep_assert_held(&ith_lock);

	if (!p)
		return false;
	*flags = p->flags;
	list_del(&p->node);
	kfree(p);
	ith_npend--;
	return true;
}

static void ith_sys_exit(void *data, struct pt_regs *regs, long ret)
{
	unsigned long flags;
	struct ith *th;
	bool put = false;
	u32 follow;

	if (!READ_ONCE(ith_nthreads) && !READ_ONCE(ith_npend))
		return;
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	if (th && th->state == ITH_ON) {
		if (th->in_sys) {
			u64 dur = ktime_get_mono_fast_ns() - th->sys_t0;

			if (th->st.traps) {	/* inside the span */
				th->st.syscalls++;
				th->st.sys_tsc += get_cycles() - th->sys_c0;
			}
			th->in_sys = false;
			if (ith_restart_code(ret)) {
				th->sys_pend = true;
				th->pend_dur = min_t(u64, dur, U32_MAX);
			} else {
				ith_block(th, PITRACE_MAJOR_ITRACE_K,
					  PITRACE_ITRACE_SYSCALL, regs->ip,
					  th->sys_nr, min_t(u64, dur, U32_MAX));
			}
			th->ip = regs->ip;
			th->rcx = regs->cx;
			ith_bsp(th, regs);
		}
		/* exec clears the flags (start_thread) */
		regs->flags |= X86_EFLAGS_TF;
	} else if (!th && ith_npend && ret == 0 &&
		   (regs->orig_ax == __NR_execve ||
		    regs->orig_ax == __NR_execveat) &&
		   ith_take_pending(current->tgid, &follow)) {
		th = READ_ONCE(pt_active) ?
		     ith_new(current, follow, GFP_ATOMIC) : NULL;
		if (th) {
			ith_hash_add(th);
			ith_start(th, regs, PITRACE_ITRACE_START_EXEC);
		}
		put = true;	/* the pending entry's reference */
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	if (put)
		module_put(THIS_MODULE);
}

/*
 * sched_process_exec: the thread's own context, the new image in place
 * (its registers set up, TF clear: start_thread), its system call not yet
 * returned.  The old image's signal frames are gone, and a thread that was
 * not its process's leader now has the leader's pid (de_thread).
 *
 * An exec that gave the thread rights its tracer may lack (set-user-ID,
 * set-group-ID, file capabilities, an LSM transition) or left it not
 * dumpable (pt_exec_secure) ends its ITrace here, before the new image
 * runs an instruction: ITRACE_END with PITRACE_ITRACE_END_EXEC, no TF, no
 * BTF, the entry freed.  The kernel keeps a ptrace tracer across such an
 * exec only by running the new image without its privileges; the module
 * cannot, so it stops.  A process waiting for its exec (AT_EXEC) is
 * dropped with the same record when the exec is such a one.  Any other
 * exec goes on traced from the new image's first instruction, or starts
 * a process waiting for it (at the system call's exit, ith_sys_exit).
 *
 * ITRACE_ON selects a thread while holding its exec_update_lock (see
 * ith_commit), so an exec either finds the entry here or had its new
 * credentials in place when the caller's right was checked.
 */
static void ith_exec(void *data, struct task_struct *p, pid_t old_pid,
		     struct linux_binprm *bprm)
{
	struct pt_regs *regs = task_pt_regs(current);
	unsigned long flags;
	bool secure, put = false;
	struct ith *th;
	u32 follow;

	if (!READ_ONCE(ith_nthreads) && !READ_ONCE(ith_npend))
		return;
	secure = pt_exec_secure(bprm);
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	if (th) {
		th->handlers = 0;
		if (secure || th->state == ITH_STALE) {
			/* stopped (ITH_STALE): the exec cleared its TF already */
			ith_btf_off(th);
			if (th->state == ITH_ON)
				ith_end(th, PITRACE_ITRACE_END_EXEC);
			else if (th->state == ITH_PENDING)
				ith_end_unstarted(th->pid, th->tid,
						  PITRACE_ITRACE_END_EXEC);
			th->state = ITH_STALE;	/* a queued work frees it */
			regs->flags &= ~X86_EFLAGS_TF;
			ith_unhash(th);
		} else {
			/* its records from here on (the END above: the old tid) */
			th->tid = task_pid_nr(current);
		}
	} else if (secure && ith_npend &&
		   ith_take_pending(current->tgid, &follow)) {
		ith_end_unstarted(task_tgid_nr(current), task_pid_nr(current),
				  PITRACE_ITRACE_END_EXEC);
		put = true;	/* the pending entry's reference */
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	if (put)
		module_put(THIS_MODULE);
}

static void ith_signal(void *data, int sig, struct kernel_siginfo *info,
		       struct k_sigaction *ka)
{
	unsigned long flags;
	struct ith *th;

	if (!READ_ONCE(ith_nthreads) || !ka ||
	    ka->sa.sa_handler == SIG_DFL || ka->sa.sa_handler == SIG_IGN)
		return;
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	/* the interrupted line up to here; the handler starts single-stepped */
	if (th && th->state == ITH_ON && !th->in_sys)
		ith_catchup(th, task_pt_regs(current)->ip,
			    task_pt_regs(current)->sp, false);
	/* a stopped thread's handler runs untraced; its frame keeps TF */
	if (th && th->state == ITH_ON && !th->work_queued) {
		init_task_work(&th->work, ith_work_fn);
		if (!task_work_add(current, &th->work, TWA_RESUME)) {
			th->work_queued = true;
			th->sig = sig;
			th->sig_c0 = get_cycles();
		}
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
}

static void ith_fork(void *data, struct task_struct *parent,
		     struct task_struct *child)
{
	struct pt_regs *regs = task_pt_regs(child);
	unsigned long flags;
	struct ith *th, *c;

	if (!READ_ONCE(ith_nthreads))
		return;
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(parent);
	if (!th || th->state == ITH_PENDING)
		goto out;
	if (th->state != ITH_ON ||
	    (!same_thread_group(parent, child) && !th->follow) ||
	    child->flags & PF_KTHREAD) {
		/* not traced: it must not inherit the parent's TF */
		if (!(child->flags & PF_KTHREAD))
			regs->flags &= ~X86_EFLAGS_TF;
		goto out;
	}
	c = ith_new(child, (th->follow ? PITRACE_ITRACE_FOLLOW : 0) | th->step,
		    GFP_ATOMIC);
	if (!c) {
		regs->flags &= ~X86_EFLAGS_TF;
		goto out;
	}
	ith_hash_add(c);
	ith_start(c, regs, 0);
out:
	raw_spin_unlock_irqrestore(&ith_lock, flags);
}

static void ith_exit(void *data, struct task_struct *p)
{
	unsigned long flags;
	struct ith *th;
	bool put = false;
	u32 follow;

	if (!READ_ONCE(ith_nthreads) && !READ_ONCE(ith_npend))
		return;
	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(p);
	if (th) {
		/* block-stepped: the instructions since its last trap */
		if (p == current && th->state == ITH_ON && !th->in_sys)
			ith_catchup(th, task_pt_regs(p)->ip,
				    task_pt_regs(p)->sp, false);
		if (p == current)
			ith_btf_off(th);
		ith_end(th, PITRACE_ITRACE_END_EXIT);
		ith_unhash(th);
	}
	/* a process that waited for an exec and ends without one */
	if (ith_npend && !atomic_read(&p->signal->live))
		put = ith_take_pending(p->tgid, &follow);
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	if (put)
		module_put(THIS_MODULE);
}

/*
 * Kernel entries from user code: an interrupt or a page fault of a traced
 * thread that is not inside a system call becomes one record, written at
 * the module's next point in the thread (ith_kflush).  An interrupt taken
 * while one is pending (a second one before the thread ran again, one in
 * the first's softirqs or in a fault's handling) is part of the pending
 * record; a fault ends a pending interrupt and starts its own record.
 * Threads that are not single-stepped pay one flags test: their user
 * flags do not have TF.
 */
static void ith_kentry(u32 minor, u32 arg, u64 addr)
{
	unsigned long flags;
	struct ith *th;
	u64 now = get_cycles();
	/* where the thread's user code goes on (entry/exit paths: unchanged) */
	u64 ip = task_pt_regs(current)->ip;

	raw_spin_lock_irqsave(&ith_lock, flags);
	th = ith_find(current);
	/* block-stepped, the thread may have run on since the pending entry */
	if (th && th->state == ITH_ON && !th->in_sys &&
	    !(th->k_minor && minor == PITRACE_ITRACE_INTERRUPT &&
	      !(th->btf && ip != th->ip))) {
		ith_kflush(th, now);
		ith_catchup(th, ip, task_pt_regs(current)->sp, true);
		th->k_minor = minor;
		th->k_arg = arg;
		th->k_addr = addr;
		th->k_c0 = now;
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
}

static bool ith_stepped_user(void)
{
	return READ_ONCE(ith_nthreads) && !(current->flags & PF_KTHREAD) &&
	       (task_pt_regs(current)->flags & X86_EFLAGS_TF);
}

static void ith_irq_vector(void *data, int vector)
{
	if (ith_stepped_user())
		ith_kentry(PITRACE_ITRACE_INTERRUPT, vector, 0);
}

static void ith_irq_device(void *data, int irq, struct irqaction *action)
{
	if (ith_stepped_user())
		ith_kentry(PITRACE_ITRACE_INTERRUPT,
			   PITRACE_ITRACE_IRQ_DEVICE + irq, 0);
}

static void ith_page_fault(void *data, unsigned long address,
			   struct pt_regs *regs, unsigned long error_code)
{
	if (READ_ONCE(ith_nthreads) && regs && user_mode(regs) &&
	    (regs->flags & X86_EFLAGS_TF))
		ith_kentry(PITRACE_ITRACE_FAULT, error_code, address);
}

/* optional: a kernel without one records those entries in the gaps only */
static struct {
	const char *name;
	void *probe;
	bool optional;
	struct tracepoint *tp;
} ith_tps[] = {
	{ "sys_enter", ith_sys_enter },
	{ "sys_exit", ith_sys_exit },
	{ "signal_deliver", ith_signal },
	{ "sched_process_fork", ith_fork },
	{ "sched_process_exit", ith_exit },
	{ "sched_process_exec", ith_exec },
	{ "page_fault_user", ith_page_fault, true },
	{ "local_timer_entry", ith_irq_vector, true },
	{ "reschedule_entry", ith_irq_vector, true },
	{ "call_function_entry", ith_irq_vector, true },
	{ "call_function_single_entry", ith_irq_vector, true },
	{ "irq_work_entry", ith_irq_vector, true },
	{ "x86_platform_ipi_entry", ith_irq_vector, true },
	{ "irq_handler_entry", ith_irq_device, true },
};

static void ith_find_tp(struct tracepoint *tp, void *priv)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(ith_tps); i++)
		if (!strcmp(tp->name, ith_tps[i].name))
			ith_tps[i].tp = tp;
}

static void ith_unhook(void)
{
	int i;

	if (!ith_hooked)
		return;
	for (i = 0; i < ARRAY_SIZE(ith_tps); i++)
		if (ith_tps[i].tp)
			tracepoint_probe_unregister(ith_tps[i].tp,
						    ith_tps[i].probe, NULL);
	tracepoint_synchronize_unregister();
	unregister_die_notifier(&ith_nb);
	ith_hooked = false;
}

static int ith_hook(void)
{
	int i, n, err;

	lockdep_assert_held(&pt.lock);
	if (ith_hooked)
		return 0;
	for_each_kernel_tracepoint(ith_find_tp, NULL);
	for (i = 0; i < ARRAY_SIZE(ith_tps); i++) {
		if (!ith_tps[i].tp && !ith_tps[i].optional) {
			pr_warn("pitrace: itrace: no tracepoint %s\n",
				ith_tps[i].name);
			return -EOPNOTSUPP;
		}
	}
	err = register_die_notifier(&ith_nb);
	if (err)
		return err;
	for (n = 0; n < ARRAY_SIZE(ith_tps); n++) {
		if (!ith_tps[n].tp)
			continue;
		err = tracepoint_probe_register(ith_tps[n].tp,
						ith_tps[n].probe, NULL);
		if (err) {
			pr_warn("pitrace: itrace: tracepoint %s: error %d\n",
				ith_tps[n].name, err);
			while (n--)
				if (ith_tps[n].tp)
					tracepoint_probe_unregister(
						ith_tps[n].tp,
						ith_tps[n].probe, NULL);
			tracepoint_synchronize_unregister();
			unregister_die_notifier(&ith_nb);
			return err;
		}
	}
	ith_hooked = true;
	return 0;
}

/*
 * pt.lock held: with no thread left and no process waiting, detach the
 * notifier and the tracepoints (sys_enter/sys_exit make every system call
 * of the machine take the slow path while attached).  Only ITRACE_ON adds
 * entries then (under pt.lock), so none can appear meanwhile.
 */
static void ith_maybe_unhook(void)
{
	lockdep_assert_held(&pt.lock);
	if (!READ_ONCE(ith_nthreads) && !READ_ONCE(ith_npend))
		ith_unhook();
}

/* ---- control (pt.lock held, process context) ------------------------------ */

/*
 * One ITRACE_ON's selection, made in full before anything is traced: an
 * entry for every thread to start (each holding its task and a module
 * reference) and every process to wait for (AT_EXEC).  Only ith_commit,
 * which cannot fail, makes them visible: an ITRACE_ON that fails leaves
 * nothing traced that was not traced before.
 */
struct ith_sel {
	struct ith **th;		/* entries to start, never hashed yet */
	unsigned int n, max;
	struct list_head pend;		/* struct ith_pend, not listed yet */
	u32 skipped;			/* pids_from: processes left out */
};

static void ith_sel_free(struct ith_sel *s)
{
	struct ith_pend *e, *ne;
	unsigned int i;

	for (i = 0; i < s->n; i++) {
		put_task_struct(s->th[i]->task);
		kfree(s->th[i]);
		module_put(THIS_MODULE);
	}
	kvfree(s->th);
	list_for_each_entry_safe(e, ne, &s->pend, node) {
		list_del(&e->node);
		put_task_struct(e->task);
		kfree(e);
	}
}

static int ith_sel_add(struct ith_sel *s, struct task_struct *t, u32 follow)
{
	struct ith *th;

	if (s->n == s->max) {
		unsigned int max = s->max ? s->max * 2 : 64;
		struct ith **a = kvmalloc_array(max, sizeof(*a), GFP_KERNEL);

		if (!a)
			return -ENOMEM;
		if (s->n)
			memcpy(a, s->th, s->n * sizeof(*a));
		kvfree(s->th);
		s->th = a;
		s->max = max;
	}
	th = ith_new(t, follow, GFP_KERNEL);
	if (!th)
		return -ENOMEM;
	s->th[s->n++] = th;
	return 0;
}

/*
 * References to every thread of p in *ts (kvfree it), their number in *n.
 * The walk is retried with room for more when p grew meanwhile, so no
 * thread alive at the end of the walk is left out.
 */
static int ith_threads(struct task_struct *p, struct task_struct ***ts,
		       unsigned int *n)
{
	unsigned int max = get_nr_threads(p) + 8, i, k;
	struct task_struct **a, *t;
	bool full;

	for (;;) {
		a = kvmalloc_array(max, sizeof(*a), GFP_KERNEL);
		if (!a)
			return -ENOMEM;
		k = 0;
		full = false;
		rcu_read_lock();
		for_each_thread(p, t) {
			if (k == max) {
				full = true;
				break;
			}
			get_task_struct(t);
			a[k++] = t;
		}
		rcu_read_unlock();
		if (!full)
			break;
		for (i = 0; i < k; i++)
			put_task_struct(a[i]);
		kvfree(a);
		max *= 2;
	}
	*ts = a;
	*n = k;
	return 0;
}

/*
 * Select process p (a reference held by the caller): every thread of it
 * that can be traced, or (AT_EXEC) the process itself.  -EPERM: not
 * allowed; -ESRCH: no thread left to trace; -EINVAL: its only thread is
 * the caller (ITraceOn, SELF, traces the caller); -ENOMEM.
 */
static int ith_sel_process(struct ith_sel *s, struct task_struct *p,
			   u32 flags)
{
	u32 follow = flags & ITH_INHERIT;
	struct task_struct **ts;
	unsigned int n, i, added = 0;
	bool self = false;
	int err;

	lockdep_assert_held(&pt.lock);
	if (!ptt_may_watch(p) || p->flags & PF_KTHREAD)
		return -EPERM;
	if (flags & PITRACE_ITRACE_AT_EXEC) {
		struct ith_pend *e = kzalloc(sizeof(*e), GFP_KERNEL);

		if (!e)
			return -ENOMEM;
		get_task_struct(p);
		e->task = p;
		e->tgid = task_tgid_nr(p);
		e->flags = follow;
		list_add_tail(&e->node, &s->pend);
		return 0;
	}
	err = ith_threads(p, &ts, &n);
	if (err)
		return err;
	for (i = 0; i < n; i++) {
		struct task_struct *t = ts[i];

		if (t == current)
			self = true;
		else if (!err && !(t->flags & (PF_KTHREAD | PF_EXITING |
						PF_IO_WORKER)) && t->mm) {
			err = ith_sel_add(s, t, follow);
			if (!err)
				added++;
		}
		put_task_struct(t);
	}
	kvfree(ts);
	if (err)
		return err;
	if (!added)
		return self ? -EINVAL : -ESRCH;
	return 0;
}

/* The process of pid (in the caller's pid namespace), a reference taken. */
static struct task_struct *ith_process(pid_t pid)
{
	struct pid *sp = find_get_pid(pid);
	struct task_struct *p = sp ? get_pid_task(sp, PIDTYPE_TGID) : NULL;

	put_pid(sp);
	return p;
}

/*
 * pids_from: every process with a pid >= from but the caller's, all of
 * them (references in *ps, kvfree it) or -EAGAIN if they keep appearing
 * faster than they are counted.
 */
static int ith_processes_from(pid_t from, struct task_struct ***ps,
			      unsigned int *n)
{
	unsigned int max = 0, k, i, tries;
	struct task_struct **a, *p;
	bool full;

	for (tries = 0; tries < 8; tries++) {
		if (!max) {
			rcu_read_lock();
			for_each_process(p)
				max++;
			rcu_read_unlock();
		}
		max += max / 8 + 64;
		a = kvmalloc_array(max, sizeof(*a), GFP_KERNEL);
		if (!a)
			return -ENOMEM;
		k = 0;
		full = false;
		rcu_read_lock();
		for_each_process(p) {
			if (task_tgid_vnr(p) < from ||
			    same_thread_group(p, current) ||
			    p->flags & PF_KTHREAD)
				continue;
			if (k == max) {
				full = true;
				break;
			}
			get_task_struct(p);
			a[k++] = p;
		}
		rcu_read_unlock();
		if (!full) {
			*ps = a;
			*n = k;
			return 0;
		}
		for (i = 0; i < k; i++)
			put_task_struct(a[i]);
		kvfree(a);
		max *= 2;
	}
	return -EAGAIN;
}

/* Select what ITRACE_ON a names (the pids copied in); nothing started. */
static int ith_select(struct ith_sel *s, const struct pitrace_itrace_on *a,
		      const s32 *pids)
{
	struct task_struct **ps, *p;
	unsigned int i, n;
	int err = 0;

	lockdep_assert_held(&pt.lock);
	for (i = 0; i < a->npids; i++) {
		p = ith_process(pids[i]);
		if (!p)
			return -ESRCH;
		err = ith_sel_process(s, p, a->flags);
		put_task_struct(p);
		if (err)
			return err;
	}
	if (a->pids_from <= 0)
		return 0;
	err = ith_processes_from(a->pids_from, &ps, &n);
	if (err)
		return err;
	for (i = 0; i < n; i++) {
		if (!err) {
			int r = ith_sel_process(s, ps[i], a->flags &
						~PITRACE_ITRACE_AT_EXEC);

			if (r == -ENOMEM)
				err = r;
			else if (r)
				s->skipped++;	/* not allowed, or gone */
		}
		put_task_struct(ps[i]);
	}
	kvfree(ps);
	return err;
}

/*
 * t's exec_update_lock, held by an exec from before its new memory is in
 * place until its new credentials are: with it held, the caller's right
 * to trace t, checked again, and t's entry becoming visible to the exec
 * hook (ith_exec) are one step for an exec of t, as in perf_event_open.
 * False (the lock not taken) when the caller is being killed.
 */
static bool ith_exec_lock(struct task_struct *t)
{
	return !down_read_killable(&t->signal->exec_update_lock);
}

static void ith_exec_unlock(struct task_struct *t)
{
	up_read(&t->signal->exec_update_lock);
}

/*
 * Start what was selected; returns the threads started (and processes
 * now waiting for their exec).  A thread traced already, exiting by now,
 * or one the caller may no longer trace (an exec changed its credentials
 * since the check) is not counted; nothing here fails.
 */
static u32 ith_commit(struct ith_sel *s)
{
	struct ith_pend *e, *ne;
	unsigned long flags;
	unsigned int i;
	u32 n = 0;

	lockdep_assert_held(&pt.lock);
	for (i = 0; i < s->n; i++) {
		struct ith *th = s->th[i];
		struct task_struct *t = th->task;
		bool locked = ith_exec_lock(t);
		/* the check may audit: not under the raw lock */
		bool ok = locked && ptt_may_watch(t);

		init_task_work(&th->work, ith_work_fn);
		raw_spin_lock_irqsave(&ith_lock, flags);
		if (ok && !ith_find(t)) {
			th->state = ITH_PENDING;
			th->work_queued = true;
			ith_hash_add(th);
			if (task_work_add(t, &th->work, TWA_RESUME)) {
				th->work_queued = false;	/* exiting */
				ith_unhash(th);
			} else {
				n++;
			}
			s->th[i] = NULL;
		}
		raw_spin_unlock_irqrestore(&ith_lock, flags);
		if (locked)
			ith_exec_unlock(t);
		if (s->th[i]) {		/* not started: never hashed */
			put_task_struct(t);
			kfree(th);
			module_put(THIS_MODULE);
			s->th[i] = NULL;
		}
	}
	s->n = 0;
	list_for_each_entry_safe(e, ne, &s->pend, node) {
		struct task_struct *t = e->task;
		struct ith_pend *old;
		bool locked = ith_exec_lock(t);
		bool ok = locked && ptt_may_watch(t);

		list_del(&e->node);
		e->task = NULL;
		raw_spin_lock_irqsave(&ith_lock, flags);
		if (!ok) {
			/* not started */
		} else if ((old = ith_find_pending(e->tgid))) {
			old->flags = e->flags;
			n++;
		} else {
			__module_get(THIS_MODULE);	/* ioctl: the fd holds one */
			list_add(&e->node, &ith_pend_list);
			ith_npend++;
			e = NULL;
			n++;
		}
		raw_spin_unlock_irqrestore(&ith_lock, flags);
		if (locked)
			ith_exec_unlock(t);
		put_task_struct(t);
		kfree(e);
	}
	return n;
}

static bool ith_on_valid(const struct pitrace_itrace_on *a)
{
	if (a->flags & ~(PITRACE_ITRACE_SELF | PITRACE_ITRACE_FOLLOW |
			 PITRACE_ITRACE_AT_EXEC | PITRACE_ITRACE_STEP_SINGLE |
			 PITRACE_ITRACE_STEP_VERIFY) ||
	    (a->flags & PITRACE_ITRACE_STEP_SINGLE &&
	     a->flags & PITRACE_ITRACE_STEP_VERIFY) || a->reserved ||
	    a->npids > PITRACE_ITRACE_MAX_PIDS || a->pids_from < 0)
		return false;
	return (a->flags & PITRACE_ITRACE_SELF) || a->npids || a->pids_from;
}

static bool ith_off_valid(const struct pitrace_itrace_off *a)
{
	return !(a->flags & ~PITRACE_ITRACE_SELF) && !a->reserved &&
	       a->npids <= PITRACE_ITRACE_MAX_PIDS;
}

/*
 * ITRACE_ON / ITRACE_OFF's pid array, copied in before pt.lock is taken
 * (a caller whose array faults stalls only itself).  NULL for no array,
 * or an ERR_PTR.  The arguments are checked here first, so that a bad
 * argument is EINVAL whatever its pointer.  Any other command: NULL.
 */
s32 *pt_itrace_pids(unsigned int kcmd, const void *arg)
{
	const struct pitrace_itrace_off *off = arg;
	const struct pitrace_itrace_on *on = arg;
	u32 n;
	u64 up;

	lockdep_assert_not_held(&pt.lock);
	if (kcmd == PITRACE_IOC_ITRACE_ON) {
		if (!ith_on_valid(on))
			return ERR_PTR(-EINVAL);
		n = on->npids;
		up = on->pids;
	} else if (kcmd == PITRACE_IOC_ITRACE_OFF) {
		if (!ith_off_valid(off))
			return ERR_PTR(-EINVAL);
		n = off->npids;
		up = off->pids;
	} else {
		return NULL;
	}
	if (!n)
		return NULL;
	return memdup_user(u64_to_user_ptr(up), n * sizeof(s32));
}

/*
 * ITRACE_ON: all or nothing.  Every named process is checked and every
 * entry allocated before the first thread starts; an error leaves no
 * thread of this call traced.  pids: the array, copied in (pt_itrace_pids).
 */
long pt_itrace_on(struct pitrace_itrace_on *a, const s32 *pids)
{
	struct ith_sel s = { .pend = LIST_HEAD_INIT(s.pend) };
	struct ith *self = NULL;
	unsigned long flags;
	int i, err;

	lockdep_assert_held(&pt.lock);
	if (!ith_on_valid(a) || (a->npids && !pids))
		return -EINVAL;
	for (i = 0; i < a->npids; i++)
		if (pids[i] <= 0)
			return -EINVAL;
	if (pt.state != PITRACE_STATE_ON)
		return -ENODATA;	/* tracing is not on */
	if (a->flags & PITRACE_ITRACE_SELF) {
		/* only ITRACE_ON (under pt.lock) adds an entry for a thread
		 * that exists: none can appear for the caller meanwhile */
		raw_spin_lock_irqsave(&ith_lock, flags);
		err = ith_find(current) ? -EBUSY : 0;
		raw_spin_unlock_irqrestore(&ith_lock, flags);
		if (err)
			return err;
		self = ith_new(current, a->flags & ITH_INHERIT, GFP_KERNEL);
		if (!self)
			return -ENOMEM;
	}
	err = ith_select(&s, a, pids);
	if (!err)
		err = ith_hook();
	if (err) {
		ith_sel_free(&s);
		if (self) {
			put_task_struct(self->task);
			kfree(self);
			module_put(THIS_MODULE);
		}
		ith_maybe_unhook();
		return err;
	}
	a->threads = 0;
	a->skipped = s.skipped;
	if (self) {
		raw_spin_lock_irqsave(&ith_lock, flags);
		ith_hash_add(self);
		/* the first instruction traced is the one after this ioctl */
		ith_start(self, task_pt_regs(current), 0);
		raw_spin_unlock_irqrestore(&ith_lock, flags);
		a->threads = 1;
	}
	a->threads += ith_commit(&s);
	ith_sel_free(&s);
	ith_maybe_unhook();	/* everything selected exited meanwhile */
	return 0;
}

static bool ith_selected(struct ith *th, const struct pitrace_itrace_off *a,
			 const s32 *pids)
{
	int i;

	if (!(a->flags & PITRACE_ITRACE_SELF) && !a->npids)
		return true;
	if ((a->flags & PITRACE_ITRACE_SELF) && th->task == current)
		return true;
	for (i = 0; i < a->npids; i++)
		if (pids[i] == task_tgid_vnr(th->task))
			return true;
	return false;
}

/* Stop the selected threads (all with a == NULL).  Any process context. */
static void ith_stop(struct pitrace_itrace_off *a, const s32 *pids)
{
	struct ith_pend *p, *np;
	unsigned long flags;
	struct hlist_node *tmp;
	struct ith *th;
	int bkt, i, npend_put = 0;

	raw_spin_lock_irqsave(&ith_lock, flags);
	hash_for_each_safe(ith_hash, bkt, tmp, th, hn) {
		if (th->state == ITH_STALE || (a && !ith_selected(th, a, pids)))
			continue;
		if (a) {
			a->threads++;
			a->instructions += th->insns;
		}
		if (th->state == ITH_PENDING) {
			th->state = ITH_STALE;	/* its work frees it */
			ith_unhash(th);
			continue;
		}
		if (th->task == current)
			ith_btf_off(th);
		ith_end(th, PITRACE_ITRACE_END_OFF);
		if (a)	/* with the END record (and its THREAD) just written */
			a->records += th->records;
		if (th->task == current)
			ith_frames_left(th, task_pt_regs(current)->sp);
		if (th->task == current &&
		    (!th->handlers || ith_frames_untrap(th))) {
			task_pt_regs(current)->flags &= ~X86_EFLAGS_TF;
			ith_unhash(th);
		}
	}
	list_for_each_entry_safe(p, np, &ith_pend_list, node) {
		bool sel = !a || (!(a->flags & PITRACE_ITRACE_SELF) && !a->npids);

		for (i = 0; a && i < a->npids; i++)
			if (pids[i] == p->tgid)
				sel = true;
		if (sel) {
			list_del(&p->node);
			kfree(p);
			ith_npend--;
			npend_put++;
		}
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	while (npend_put--)	/* process context with the fd's reference */
		module_put(THIS_MODULE);
}

/* ITRACE_OFF; pids: the array, copied in (pt_itrace_pids). */
long pt_itrace_off(struct pitrace_itrace_off *a, const s32 *pids)
{
	lockdep_assert_held(&pt.lock);
	if (!ith_off_valid(a) || (a->npids && !pids))
		return -EINVAL;
	a->threads = 0;
	a->instructions = a->records = 0;
	ith_stop(a, pids);
	ith_maybe_unhook();
	return 0;
}

/* ITRACE_STATS: the caller's last ITrace, if it is the last that ended. */
long pt_itrace_stats(struct pitrace_itrace_stats *a)
{
	unsigned long flags;
	long ret = -ENOENT;

	raw_spin_lock_irqsave(&ith_lock, flags);
	if (ith_ended.tid && ith_ended.tid == task_pid_nr(current) &&
	    ith_ended_birth == current->start_time) {
		*a = ith_ended;
		ret = 0;
	}
	raw_spin_unlock_irqrestore(&ith_lock, flags);
	return ret;
}

/* Tracing goes off (before pt_active drops): end every thread. */
void pt_itrace_stop_all(void)
{
	lockdep_assert_held(&pt.lock);
	ith_stop(NULL, NULL);
	ith_maybe_unhook();
}

void pt_itrace_exit(void)
{
	ith_stop(NULL, NULL);
	/* entries hold module references: none is left when exit runs */
	ith_unhook();
	rcu_barrier();
}
