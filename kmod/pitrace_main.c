// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_main.c - the pitrace module: /dev/pitrace, its ioctls, mmap of
 * the per-CPU buffers, and the facility's state machine
 * (free -> init -> on -> off -> on ... -> free).
 *
 * Control ioctls are serialized by pt.lock.  Writers never take it: they
 * check pt_active and use pt_live_set under RCU-sched (interrupts off).
 */
#include <linux/cpuhotplug.h>
#include <linux/fs.h>
#include <linux/irq_work.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/perf_event.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/utsname.h>

#include "pitrace_int.h"

static ushort perm = 0600;
module_param(perm, ushort, 0444);
MODULE_PARM_DESC(perm, "mode of /dev/pitrace (default 0600: root only; see docs/kmod.md for a group)");

struct pt_state pt;
struct pt_set __rcu *pt_live_set;
int pt_active;
int pt_stopped_full;

static struct irq_work pt_wake_work;

static void pt_wake_fn(struct irq_work *w)
{
	atomic_inc(&pt.wake_gen);
	wake_up_interruptible_all(&pt.wq);
}

/* Any context: defer the wake-up (the scheduler's locks may be held). */
void pt_wake(void)
{
	irq_work_queue(&pt_wake_work);
}

void pt_buffer_full(void)
{
	WRITE_ONCE(pt_stopped_full, 1);
	WRITE_ONCE(pt_active, 0);
	pt_wake();
}

struct pt_file {
	int seen_gen;
	void *ptt;		/* PTT context (pitrace_ptt.c), or NULL */
};

static u32 pt_ncpu(void)
{
	return nr_cpu_ids;
}

/* ---- state changes (pt.lock; pt_mark: an IPI on each CPU) ----------------- */

static void pt_drop_set(void)
{
	struct pt_set *s = pt.set;

	lockdep_assert_held(&pt.lock);
	if (!s)
		return;
	rcu_assign_pointer(pt_live_set, NULL);
	synchronize_rcu();
	spin_lock(&pt.set_lock);
	pt.set = NULL;
	spin_unlock(&pt.set_lock);
	kref_put(&s->ref, pt_set_release);
}

static void pt_mark(void *info)
{
	u32 minor = (u32)(unsigned long)info;
	struct pitrace_rec_trace_on on = { (u32)pt.enabled[0], pt.rate_hz };

	if (minor == PITRACE_SYS_TRACE_ON)
		pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_SYS, minor,
			 PITRACE_LAYOUT_FIXED, &on, sizeof(on), NULL, 0);
	else
		pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_SYS, minor,
			 PITRACE_LAYOUT_FIXED, NULL, 0, NULL, 0);
}

static void pt_write_sysinfo(void)
{
	struct pitrace_rec_sysinfo f = { pt_ncpu(), PITRACE_CLOCK_ID,
					 NSEC_PER_SEC, pt.start_wall };
	struct new_utsname *u = utsname();
	char *s = kasprintf(GFP_KERNEL, "%s %s %s %s %s", u->sysname,
			    u->nodename, u->release, u->version, u->machine);

	lockdep_assert_held(&pt.lock);
	if (!s)
		return;
	pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_SYS, PITRACE_SYS_INFO,
		 PITRACE_LAYOUT_STRING, &f, sizeof(f), s, strnlen(s, 400));
	kfree(s);
}

static int pt_do_off(void)
{
	lockdep_assert_held(&pt.lock);
	pt_itrace_stop_all();	/* END records while the buffers take them */
	pt_src_stop();
	/* sources are stopped; hooks may still write until pt_active is 0 */
	pt_describe_live(true);
	if (!READ_ONCE(pt_stopped_full))
		on_each_cpu(pt_mark, (void *)(unsigned long)PITRACE_SYS_TRACE_OFF,
			    1);
	WRITE_ONCE(pt_active, 0);
	synchronize_rcu();
	pt_set_finish(pt.set);
	pt.state = PITRACE_STATE_OFF;
	pt_wake();
	return 0;
}

static int pt_do_on(void)
{
	int err;

	lockdep_assert_held(&pt.lock);
	pt_set_reset(pt.set, pt.mode);
	pt.start_wall = ktime_get_real_ns();
	pt.start_clock = ktime_get_mono_fast_ns();
	pt.on_count++;
	WRITE_ONCE(pt_stopped_full, 0);
	rcu_assign_pointer(pt_live_set, pt.set);
	WRITE_ONCE(pt_active, 1);
	pt_write_sysinfo();
	on_each_cpu(pt_mark, (void *)(unsigned long)PITRACE_SYS_TRACE_ON, 1);
	err = pt_src_start();
	if (err) {
		WRITE_ONCE(pt_active, 0);
		synchronize_rcu();
		pt_set_reset(pt.set, pt.mode);
		return err;
	}
	pt_describe_live(false);
	pt.state = PITRACE_STATE_ON;
	pt.unsaved = true;
	return 0;
}

static void pt_do_free(void)
{
	lockdep_assert_held(&pt.lock);
	if (pt.state == PITRACE_STATE_ON)
		pt_do_off();
	pt_drop_set();
	pt.state = PITRACE_STATE_FREE;
	pt.unsaved = false;
}

/* ---- ioctls ---------------------------------------------------------------- */

static int pt_check_size(u64 n)
{
	if (n < PITRACE_MIN_BUF || n > PITRACE_MAX_BUF)
		return -EINVAL;
	return 0;
}

static long pt_ioc_init(const struct pitrace_init_arg *ap)
{
	struct pitrace_init_arg a = *ap;
	struct pt_set *s;
	u64 total;
	u32 ncpu = pt_ncpu();

	if (a.reserved || a.mode > PITRACE_MODE_CONT)
		return -EINVAL;
	if (pt_check_size(a.trace_size) || pt_check_size(a.mte_size))
		return -EINVAL;
	if (a.mode != PITRACE_MODE_NORMAL && !pt.path[0])
		return -EINVAL;
	if (pt.state == PITRACE_STATE_ON)
		return -EBUSY;
	total = (a.trace_size + a.mte_size + 2 * PAGE_SIZE) * ncpu;
	if (total > pt_mem_limit())
		return -ENOMEM;
	/* drop the old buffers first so that their memory can be reused */
	pt_do_free();
	s = pt_set_alloc(a.trace_size, a.mte_size, a.mode, ncpu);
	if (IS_ERR(s))
		return PTR_ERR(s);
	spin_lock(&pt.set_lock);
	pt.set = s;
	spin_unlock(&pt.set_lock);
	pt.mode = a.mode;
	pt.trace_size = a.trace_size;
	pt.mte_size = a.mte_size;
	pt.state = PITRACE_STATE_INIT;
	return 0;
}

static long pt_ioc_majors(const struct pitrace_majors *m, bool on)
{
	int i;

	if (pt.state == PITRACE_STATE_ON)
		return -EBUSY;
	if (pt_src_stack_arg(m, on))	/* the depth limit: pitrace_src.c */
		return -EINVAL;
	for (i = 0; i < 4; i++) {
		if (on)
			pt.enabled[i] |= m->mask[i];
		else
			pt.enabled[i] &= ~m->mask[i];
	}
	pt.enabled[0] |= (1ULL << PITRACE_MAJOR_SYS) | (1ULL << PITRACE_MAJOR_MTE);
	return 0;
}

static long pt_ioc_setmode(const struct pitrace_mode_arg *a)
{
	long ret = 0;

	if (a->reserved || a->mode > PITRACE_MODE_CONT ||
	    strnlen(a->path, PITRACE_PATH_MAX) >= PITRACE_PATH_MAX ||
	    (a->mode != PITRACE_MODE_NORMAL && !a->path[0])) {
		ret = -EINVAL;
		goto out;
	}
	if (pt.state == PITRACE_STATE_ON) {
		ret = -EBUSY;
		goto out;
	}
	if (pt.unsaved && a->mode != pt.mode) {
		ret = -EEXIST;
		goto out;
	}
	pt.mode = a->mode;
	/* the bytes after the NUL are the caller's: STATUS shows zeros */
	strscpy_pad(pt.path, a->path, sizeof(pt.path));
	if (pt.set) {
		pt_set_reset(pt.set, pt.mode);
		pt.state = PITRACE_STATE_INIT;
		pt.unsaved = false;
	}
out:
	return ret;
}

static long pt_ioc_setrate(const struct pitrace_rate_arg *ap)
{
	struct pitrace_rate_arg a = *ap;
	int err;

	if (a.hz == 0 || a.hz > PITRACE_MAX_RATE ||
	    strnlen(a.event, PITRACE_EVENT_NAME) >= PITRACE_EVENT_NAME)
		return -EINVAL;
	if (pt.state == PITRACE_STATE_ON)
		return -EBUSY;
	if (a.event[0]) {
		/* hardware counters only: PERF_TYPE_HARDWARE, HW_CACHE, RAW */
		if (a.event_type != PERF_TYPE_HARDWARE &&
		    a.event_type != PERF_TYPE_HW_CACHE &&
		    a.event_type != PERF_TYPE_RAW)
			return -EINVAL;
		err = pt_tprof_check_event(a.event_type, a.event_config, a.hz);
		if (err)
			return err;
	}
	pt.rate_hz = a.hz;
	pt.use_event = a.event[0] != 0;
	pt.event_type = a.event_type;
	pt.event_config = a.event_config;
	strscpy_pad(pt.event, a.event, sizeof(pt.event));
	return 0;
}

static long pt_ioc_on(void)
{
	switch (pt.state) {
	case PITRACE_STATE_FREE:
		return -EINVAL;		/* on before init */
	case PITRACE_STATE_ON:
		return -EBUSY;
	case PITRACE_STATE_OFF:
		if (pt.unsaved)
			return -EEXIST;	/* get it first, or init again */
		break;
	}
	if (pt.mode != PITRACE_MODE_NORMAL && !pt.path[0])
		return -EINVAL;
	return pt_do_on();
}

static long pt_ioc_status(struct pitrace_status *st)
{
	memset(st, 0, sizeof(*st));
	st->abi = PITRACE_ABI_VERSION;
	st->state = pt.state;
	st->mode = pt.mode;
	if (pt.state == PITRACE_STATE_ON && READ_ONCE(pt_stopped_full))
		st->flags |= PITRACE_ST_STOPPED_FULL;
	if (pt.unsaved)
		st->flags |= PITRACE_ST_UNSAVED;
	if (pt.use_event)
		st->flags |= PITRACE_ST_EVENT;
	if (pt.set) {
		st->trace_size = pt.set->trace_size;
		st->mte_size = pt.set->mte_size;
		st->trace_seg_size = pt.set->trace[0].seg_size;
		st->trace_nseg = pt.set->trace[0].nseg;
		st->mte_seg_size = pt.set->mte[0].seg_size;
		st->mte_nseg = pt.set->mte[0].nseg;
		st->ncpus = pt.set->ncpu;
		st->map_size_trace = (u64)pt.set->trace[0].npages << PAGE_SHIFT;
		st->map_size_mte = (u64)pt.set->mte[0].npages << PAGE_SHIFT;
	} else {
		st->ncpus = pt_ncpu();
	}
	st->rate_hz = pt.rate_hz;
	st->event_type = pt.event_type;
	st->event_config = pt.event_config;
	st->drainer_pid = pt.drainer ? pt.drainer_pid : 0;
	st->start_wall_ns = pt.start_wall;
	st->start_clock_ns = pt.start_clock;
	memcpy(st->enabled, pt.enabled, sizeof(st->enabled));
	st->on_count = pt.on_count;
	memcpy(st->event, pt.event, sizeof(st->event));
	memcpy(st->path, pt.path, sizeof(st->path));
	return 0;
}

static long pt_ioc_cpu_status(struct pitrace_cpu_status *cp)
{
	struct pitrace_cpu_status c = *cp;
	struct pt_buf *t, *m;
	u32 cpu;

	if (!pt.set)
		return -ENODATA;
	if (c.cpu >= pt.set->ncpu)
		return -EINVAL;
	t = &pt.set->trace[c.cpu];
	m = &pt.set->mte[c.cpu];
	cpu = c.cpu;
	memset(&c, 0, sizeof(c));
	c.cpu = cpu;
	if (READ_ONCE(t->hdr->flags) & PITRACE_BUF_FULL)
		c.flags |= PITRACE_CPU_TRACE_FULL;
	if (READ_ONCE(m->hdr->flags) & PITRACE_BUF_FULL)
		c.flags |= PITRACE_CPU_MTE_FULL;
	c.records = READ_ONCE(t->hdr->records);
	c.lost = READ_ONCE(t->hdr->lost) + READ_ONCE(t->nested_lost);
	c.bytes = READ_ONCE(t->hdr->bytes);
	c.used = pt_buf_used(t);
	c.mte_records = READ_ONCE(m->hdr->records);
	c.mte_lost = READ_ONCE(m->hdr->lost) + READ_ONCE(m->nested_lost);
	c.mte_bytes = READ_ONCE(m->hdr->bytes);
	c.mte_used = pt_buf_used(m);
	*cp = c;
	return 0;
}

/*
 * The hook's scratch arrays are written before they are read: keep
 * CONFIG_INIT_STACK_ALL_ZERO from clearing 768 bytes on every record.
 */
#if __has_attribute(__uninitialized__)
#define pt_noinit __attribute__((__uninitialized__))
#else
#define pt_noinit
#endif

/* TraceHook: no control lock, the writer path only. */
static long pt_ioc_hook(void __user *arg)
{
	struct pitrace_hook_arg a;
	u32 words[PITRACE_HOOK_MAX_WORDS] pt_noinit;
	char data[PITRACE_HOOK_MAX_BYTES] pt_noinit;
	int layout = PITRACE_LAYOUT_WORDS;

	{
		/* the 32-byte argument as four loads in one user-access window */
		const u64 __user *ua = arg;
		u64 *ka = (u64 *)&a;

		BUILD_BUG_ON(sizeof(a) != 32);
		if (!user_access_begin(ua, sizeof(a)))
			return -EFAULT;
		unsafe_get_user(ka[0], &ua[0], efault);
		unsafe_get_user(ka[1], &ua[1], efault);
		unsafe_get_user(ka[2], &ua[2], efault);
		unsafe_get_user(ka[3], &ua[3], efault);
		user_access_end();
	}
	/* words or bytes, not both: a reader could not tell where words end */
	if (a.major < PITRACE_MAJOR_USER_FIRST || a.reserved ||
	    a.nwords > PITRACE_HOOK_MAX_WORDS || a.len > PITRACE_HOOK_MAX_BYTES ||
	    (a.nwords && a.len))
		return -EINVAL;
	if (a.nwords) {
		const u32 __user *uw = u64_to_user_ptr(a.words);
		u32 i;

		/* one user-access window: cheaper than copy_from_user's checks */
		if (!user_access_begin(uw, a.nwords * 4))
			return -EFAULT;
		for (i = 0; i < a.nwords; i++)
			unsafe_get_user(words[i], &uw[i], efault);
		user_access_end();
	}
	if (a.len) {
		if (copy_from_user(data, u64_to_user_ptr(a.data), a.len))
			return -EFAULT;
		layout = PITRACE_LAYOUT_BYTES;
	}
	if (READ_ONCE(pt.state) != PITRACE_STATE_ON)
		return -EINVAL;
	if (!READ_ONCE(pt_active))
		return -ENOSPC;		/* normal mode: stopped full */
	pt_write(PITRACE_KIND_TRACE, a.major, a.minor, layout, words,
		 a.nwords * 4, data, a.len);
	return 0;
efault:
	user_access_end();
	return -EFAULT;
}

/*
 * JIT: a JIT_LOAD / JIT_UNLOAD / JIT_METHOD record of the caller (its
 * tgid and pid, never the argument's), the layout pitraced writes.  No
 * control lock, the writer path only, as the hook.
 */
static long pt_ioc_jit(void __user *arg)
{
	struct pitrace_jit_arg a;
	char name[PITRACE_JIT_NAME_MAX] pt_noinit;
	union {
		struct pitrace_rec_jit_load load;
		struct pitrace_rec_jit_unload unload;
		struct pitrace_rec_jit_method method;
	} f;
	const void *fixed;
	size_t flen;
	int layout = PITRACE_LAYOUT_STRING;
	u32 pid = task_tgid_nr(current);

	BUILD_BUG_ON(sizeof(a) != PITRACE_JIT_ARG_SIZE_V1);
	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.reserved || a.name_len > PITRACE_JIT_NAME_MAX)
		return -EINVAL;
	switch (a.minor) {
	case PITRACE_JIT_LOAD:
		f.load.pid = pid;
		f.load.tid = task_pid_nr(current);
		f.load.addr = a.addr;
		f.load.size = a.size;
		fixed = &f.load;
		flen = sizeof(f.load);
		break;
	case PITRACE_JIT_UNLOAD:
		if (a.name_len)
			return -EINVAL;
		f.unload.pid = pid;
		f.unload.addr = a.addr;
		f.unload.size = a.size;
		fixed = &f.unload;
		flen = sizeof(f.unload);
		layout = PITRACE_LAYOUT_FIXED;
		break;
	case PITRACE_JIT_METHOD:
		if (a.addr)
			return -EINVAL;
		f.method.pid = pid;
		f.method.id = a.size;
		fixed = &f.method;
		flen = sizeof(f.method);
		break;
	default:
		return -EINVAL;
	}
	if (layout == PITRACE_LAYOUT_STRING && !a.name_len)
		return -EINVAL;
	if (a.name_len &&
	    copy_from_user(name, u64_to_user_ptr(a.name), a.name_len))
		return -EFAULT;
	if (READ_ONCE(pt.state) != PITRACE_STATE_ON)
		return -EINVAL;
	if (!pt_major_enabled(PITRACE_MAJOR_JITLOAD) &&
	    !pt_major_enabled(PITRACE_MAJOR_TPROF))
		return 0;
	if (!READ_ONCE(pt_active))
		return -ENOSPC;		/* normal mode: stopped full */
	pt_write(PITRACE_KIND_TRACE, PITRACE_MAJOR_JITLOAD, a.minor, layout,
		 fixed, flen, name, a.name_len);
	return 0;
}

/*
 * METHOD: a method entry/exit record of the caller (its tgid and pid,
 * never the argument's), stamped now by the writer: the layout pitraced
 * writes.  No control lock, the writer path only, as the hook.  Method
 * events are frequent: the 24-byte argument is three loads in one
 * user-access window.
 */
static long pt_ioc_method(void __user *arg)
{
	struct pitrace_method_arg a;
	struct pitrace_rec_method r;

	{
		const u64 __user *ua = arg;
		u64 *ka = (u64 *)&a;

		BUILD_BUG_ON(sizeof(a) != PITRACE_METHOD_ARG_SIZE_V1);
		if (!user_access_begin(ua, sizeof(a)))
			return -EFAULT;
		unsafe_get_user(ka[0], &ua[0], efault);
		unsafe_get_user(ka[1], &ua[1], efault);
		unsafe_get_user(ka[2], &ua[2], efault);
		user_access_end();
	}
	if (a.reserved || a.reserved2 ||
	    (a.major != PITRACE_MAJOR_INTERP && a.major != PITRACE_MAJOR_JITTED) ||
	    (a.minor != PITRACE_METHOD_ENTRY && a.minor != PITRACE_METHOD_EXIT))
		return -EINVAL;
	if (READ_ONCE(pt.state) != PITRACE_STATE_ON)
		return -EINVAL;
	if (!pt_major_enabled(a.major))
		return 0;
	if (!READ_ONCE(pt_active))
		return -ENOSPC;		/* normal mode: stopped full */
	r.pid = task_tgid_nr(current);
	r.tid = task_pid_nr(current);
	r.id_lo = lower_32_bits(a.id);
	r.id_hi = upper_32_bits(a.id);
	pt_write(PITRACE_KIND_TRACE, a.major, a.minor, PITRACE_LAYOUT_WORDS,
		 &r, sizeof(r), NULL, 0);
	return 0;
efault:
	user_access_end();
	return -EFAULT;
}

static long pt_ioc_sysinfo(struct pitrace_sysinfo *sip)
{
	struct pitrace_sysinfo si = {
		.abi = PITRACE_ABI_VERSION,
		.ncpus = pt_ncpu(),
		.online = num_online_cpus(),
		.page_size = PAGE_SIZE,
		.clock_id = PITRACE_CLOCK_ID,
		.segments = PITRACE_SEGMENTS,
		.hdr_size = sizeof(struct pitrace_buf_hdr),
		.features = pt_src_features() | PITRACE_FEAT_ABI,
		.min_buf = PITRACE_MIN_BUF,
		.max_buf = PITRACE_MAX_BUF,
		.mem_limit = pt_mem_limit(),
	};

	*sip = si;
	return 0;
}

static long pt_ioc_release(const struct pitrace_release_arg *ap)
{
	struct pitrace_release_arg a = *ap;
	struct pt_buf *b;
	struct pitrace_seg *sg;

	if (!pt.set)
		return -ENODATA;
	if (a.reserved || a.cpu >= pt.set->ncpu || a.kind > PITRACE_KIND_MTE)
		return -EINVAL;
	b = a.kind ? &pt.set->mte[a.cpu] : &pt.set->trace[a.cpu];
	if (a.seg >= b->nseg)
		return -EINVAL;
	/* a wrap-mode trace ring is overwritten by its writer while on */
	if (pt.state == PITRACE_STATE_ON &&
	    !(pt.set->mode == PITRACE_MODE_CONT ||
	      (pt.set->mode == PITRACE_MODE_WRAP && a.kind == PITRACE_KIND_MTE)))
		return -EPERM;
	sg = &b->hdr->seg[a.seg];
	if (READ_ONCE(sg->seq) != a.seq)
		return -ESTALE;
	/*
	 * a full barrier: the drainer's copy (done before this ioctl) is
	 * ordered before FREE; pairs with pt_next_seg's smp_load_acquire
	 */
	if (cmpxchg(&sg->state, PITRACE_SEG_DONE, PITRACE_SEG_FREE) !=
	    PITRACE_SEG_DONE)
		return -ESTALE;
	return 0;
}

static long pt_ioc_bench(struct pitrace_bench_arg *a)
{
	if (a->path != PITRACE_BENCH_TPROF || a->count == 0 ||
	    a->count > PITRACE_BENCH_MAX)
		return -EINVAL;
	if (pt.state != PITRACE_STATE_ON)
		return -EINVAL;
	a->cycles = pt_bench_tprof(a->count);
	return 0;
}

/*
 * The ioctls by number, as this module defines them.  The size in a
 * command number is the size of the caller's struct: a caller built with
 * an older (shorter) struct passes a smaller size, one built with a newer
 * header a larger one.  pt_ioctl accepts any size from the first
 * version's (pt_ioc_min, the sizes of ABI 1) upward: a shorter struct is
 * zero-filled, a longer one must have zeros beyond what this module knows
 * (E2BIG otherwise), and results are copied back up to the caller's size.
 */
static const unsigned int pt_ioc_cmds[] = {
	[_IOC_NR(PITRACE_IOC_INIT)] = PITRACE_IOC_INIT,
	[_IOC_NR(PITRACE_IOC_ENABLE)] = PITRACE_IOC_ENABLE,
	[_IOC_NR(PITRACE_IOC_DISABLE)] = PITRACE_IOC_DISABLE,
	[_IOC_NR(PITRACE_IOC_SETMODE)] = PITRACE_IOC_SETMODE,
	[_IOC_NR(PITRACE_IOC_SETRATE)] = PITRACE_IOC_SETRATE,
	[_IOC_NR(PITRACE_IOC_ON)] = PITRACE_IOC_ON,
	[_IOC_NR(PITRACE_IOC_OFF)] = PITRACE_IOC_OFF,
	[_IOC_NR(PITRACE_IOC_STATUS)] = PITRACE_IOC_STATUS,
	[_IOC_NR(PITRACE_IOC_CPU_STATUS)] = PITRACE_IOC_CPU_STATUS,
	[_IOC_NR(PITRACE_IOC_HOOK)] = PITRACE_IOC_HOOK,
	[_IOC_NR(PITRACE_IOC_SYSINFO)] = PITRACE_IOC_SYSINFO,
	[_IOC_NR(PITRACE_IOC_FREE)] = PITRACE_IOC_FREE,
	[_IOC_NR(PITRACE_IOC_RELEASE)] = PITRACE_IOC_RELEASE,
	[_IOC_NR(PITRACE_IOC_DRAIN)] = PITRACE_IOC_DRAIN,
	[_IOC_NR(PITRACE_IOC_SAVED)] = PITRACE_IOC_SAVED,
	[_IOC_NR(PITRACE_IOC_BENCH)] = PITRACE_IOC_BENCH,
	[_IOC_NR(PITRACE_IOC_PTT_INIT)] = PITRACE_IOC_PTT_INIT,
	[_IOC_NR(PITRACE_IOC_PTT_TERM)] = PITRACE_IOC_PTT_TERM,
	[_IOC_NR(PITRACE_IOC_PTT_STATUS)] = PITRACE_IOC_PTT_STATUS,
	[_IOC_NR(PITRACE_IOC_PTT_WATCH)] = PITRACE_IOC_PTT_WATCH,
	[_IOC_NR(PITRACE_IOC_PTT_READ)] = PITRACE_IOC_PTT_READ,
	[_IOC_NR(PITRACE_IOC_ITRACE_ON)] = PITRACE_IOC_ITRACE_ON,
	[_IOC_NR(PITRACE_IOC_ITRACE_OFF)] = PITRACE_IOC_ITRACE_OFF,
	[_IOC_NR(PITRACE_IOC_ITRACE_STATS)] = PITRACE_IOC_ITRACE_STATS,
	[_IOC_NR(PITRACE_IOC_JIT)] = PITRACE_IOC_JIT,
	[_IOC_NR(PITRACE_IOC_METHOD)] = PITRACE_IOC_METHOD,
};

/* Argument sizes of ABI version 1: the smallest a caller may pass. */
static const u16 pt_ioc_min[ARRAY_SIZE(pt_ioc_cmds)] = {
	[_IOC_NR(PITRACE_IOC_INIT)] = PITRACE_INIT_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_ENABLE)] = PITRACE_MAJORS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_DISABLE)] = PITRACE_MAJORS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_SETMODE)] = PITRACE_MODE_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_SETRATE)] = PITRACE_RATE_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_STATUS)] = PITRACE_STATUS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_CPU_STATUS)] = PITRACE_CPU_STATUS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_HOOK)] = PITRACE_HOOK_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_SYSINFO)] = PITRACE_SYSINFO_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_RELEASE)] = PITRACE_RELEASE_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_BENCH)] = PITRACE_BENCH_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_PTT_INIT)] = PITRACE_PTT_INIT_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_PTT_STATUS)] = PITRACE_PTT_STATUS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_PTT_WATCH)] = PITRACE_PTT_WATCH_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_PTT_READ)] = PITRACE_PTT_READ_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_ITRACE_ON)] = PITRACE_ITRACE_ON_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_ITRACE_OFF)] = PITRACE_ITRACE_OFF_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_ITRACE_STATS)] = PITRACE_ITRACE_STATS_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_JIT)] = PITRACE_JIT_ARG_SIZE_V1,
	[_IOC_NR(PITRACE_IOC_METHOD)] = PITRACE_METHOD_ARG_SIZE_V1,
};

/* A struct may only grow: its V1 size is at most its size now. */
static void __maybe_unused pt_ioc_build_checks(void)
{
	BUILD_BUG_ON(sizeof(struct pitrace_init_arg) < PITRACE_INIT_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_majors) < PITRACE_MAJORS_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_mode_arg) < PITRACE_MODE_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_rate_arg) < PITRACE_RATE_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_status) < PITRACE_STATUS_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_cpu_status) < PITRACE_CPU_STATUS_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_hook_arg) != PITRACE_HOOK_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_sysinfo) < PITRACE_SYSINFO_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_release_arg) < PITRACE_RELEASE_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_bench_arg) < PITRACE_BENCH_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_ptt_init) < PITRACE_PTT_INIT_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_ptt_status) < PITRACE_PTT_STATUS_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_ptt_watch) < PITRACE_PTT_WATCH_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_ptt_read) < PITRACE_PTT_READ_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_itrace_on) < PITRACE_ITRACE_ON_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_itrace_off) < PITRACE_ITRACE_OFF_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_itrace_stats) < PITRACE_ITRACE_STATS_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_jit_arg) != PITRACE_JIT_ARG_SIZE_V1);
	BUILD_BUG_ON(sizeof(struct pitrace_method_arg) != PITRACE_METHOD_ARG_SIZE_V1);
}

/*
 * The module's command for cmd (its own size in it), or 0 when cmd is not
 * one of this module's ioctls: another type, number or direction, or a
 * size below the first version's.  No lock, no user access.
 */
static unsigned int pt_ioc_decode(unsigned int cmd)
{
	unsigned int nr = _IOC_NR(cmd), kcmd;

	if (_IOC_TYPE(cmd) != PITRACE_IOC_MAGIC || nr >= ARRAY_SIZE(pt_ioc_cmds))
		return 0;
	kcmd = pt_ioc_cmds[nr];
	if (!kcmd || _IOC_DIR(cmd) != _IOC_DIR(kcmd))
		return 0;
	if (_IOC_SIZE(kcmd) == 0)
		return _IOC_SIZE(cmd) == 0 ? kcmd : 0;
	if (_IOC_SIZE(cmd) < pt_ioc_min[nr])
		return 0;
	return kcmd;
}

/* The control ioctls: a and pids are kernel memory (pt_itrace_pids). */
static long pt_ioctl_locked(struct file *f, unsigned int kcmd, void *a,
			    const s32 *pids)
{
	lockdep_assert_held(&pt.lock);
	switch (kcmd) {
	case PITRACE_IOC_INIT:
		return pt_ioc_init(a);
	case PITRACE_IOC_ENABLE:
		return pt_ioc_majors(a, true);
	case PITRACE_IOC_DISABLE:
		return pt_ioc_majors(a, false);
	case PITRACE_IOC_SETMODE:
		return pt_ioc_setmode(a);
	case PITRACE_IOC_SETRATE:
		return pt_ioc_setrate(a);
	case PITRACE_IOC_ON:
		return pt_ioc_on();
	case PITRACE_IOC_OFF:
		return pt.state == PITRACE_STATE_ON ? pt_do_off() : -EINVAL;
	case PITRACE_IOC_STATUS:
		return pt_ioc_status(a);
	case PITRACE_IOC_CPU_STATUS:
		return pt_ioc_cpu_status(a);
	case PITRACE_IOC_FREE:
		pt_do_free();
		return 0;
	case PITRACE_IOC_RELEASE:
		return pt_ioc_release(a);
	case PITRACE_IOC_DRAIN:
		if (!pt.set)
			return -ENODATA;
		if (pt.drainer && pt.drainer != f)
			return -EBUSY;
		pt.drainer = f;
		pt.drainer_pid = task_tgid_nr(current);
		return 0;
	case PITRACE_IOC_SAVED:
		if (pt.state != PITRACE_STATE_OFF)
			return -EINVAL;
		pt.unsaved = false;
		return 0;
	case PITRACE_IOC_BENCH:
		return pt_ioc_bench(a);
	case PITRACE_IOC_ITRACE_ON:
		return pt_itrace_on(a, pids);
	case PITRACE_IOC_ITRACE_OFF:
		return pt_itrace_off(a, pids);
	case PITRACE_IOC_ITRACE_STATS:
		return pt_itrace_stats(a);
	}
	return -ENOTTY;
}

/*
 * Arguments are copied in before any lock is taken and results copied out
 * after it is dropped: a caller whose argument faults (a userfaultfd page,
 * say) stalls only itself.
 */
static long pt_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *p = (void __user *)arg;
	unsigned int kcmd, ksize, usize;
	s32 *pids = NULL;
	void *a = NULL;
	long ret;

	/* TraceHook first: the record path, no allocation, no lock */
	if (cmd == PITRACE_IOC_HOOK)
		return pt_ioc_hook(p);
	if (cmd == PITRACE_IOC_JIT)		/* JIT names: the record path too */
		return pt_ioc_jit(p);
	if (cmd == PITRACE_IOC_METHOD)		/* method events: the record path */
		return pt_ioc_method(p);
	/* MSR access (pitrace_msr.c): no pitrace lock, its own copies */
	if (cmd == PITRACE_IOC_MSR_READ || cmd == PITRACE_IOC_MSR_WRITE)
		return pt_msr_ioctl(cmd, p);
	kcmd = pt_ioc_decode(cmd);
	if (!kcmd || kcmd == PITRACE_IOC_HOOK || kcmd == PITRACE_IOC_JIT ||
	    kcmd == PITRACE_IOC_METHOD)
		return -ENOTTY;
	ksize = _IOC_SIZE(kcmd);
	usize = _IOC_SIZE(cmd);
	if (ksize) {
		a = kzalloc(ksize, GFP_KERNEL);
		if (!a)
			return -ENOMEM;
		if (_IOC_DIR(kcmd) & _IOC_WRITE) {
			ret = copy_struct_from_user(a, ksize, p, usize);
			if (ret)
				goto out;
		}
	}
	switch (_IOC_NR(kcmd)) {
	case _IOC_NR(PITRACE_IOC_SYSINFO):
		ret = pt_ioc_sysinfo(a);
		break;
	case _IOC_NR(PITRACE_IOC_PTT_INIT) ... _IOC_NR(PITRACE_IOC_PTT_READ):
		ret = pt_ptt_ioctl(&((struct pt_file *)f->private_data)->ptt,
				   kcmd, a);
		break;
	default:
		pids = pt_itrace_pids(kcmd, a);	/* user memory: before the lock */
		if (IS_ERR(pids)) {
			ret = PTR_ERR(pids);
			pids = NULL;
			goto out;
		}
		if (mutex_lock_interruptible(&pt.lock)) {
			ret = -ERESTARTSYS;
			goto out;
		}
		ret = pt_ioctl_locked(f, kcmd, a, pids);
		mutex_unlock(&pt.lock);
	}
	if (!ret && (_IOC_DIR(kcmd) & _IOC_READ)) {
		/* a newer caller's fields this module does not know read 0 */
		if (copy_to_user(p, a, min(ksize, usize)) ||
		    (usize > ksize && clear_user(p + ksize, usize - ksize)))
			ret = -EFAULT;
	}
out:
	kfree(pids);
	kfree(a);
	return ret;
}

/* ---- mmap -------------------------------------------------------------------- */

static void pt_vm_open(struct vm_area_struct *vma)
{
	struct pt_set *s = vma->vm_private_data;

	kref_get(&s->ref);
}

static void pt_vm_close(struct vm_area_struct *vma)
{
	struct pt_set *s = vma->vm_private_data;

	kref_put(&s->ref, pt_set_release);
}

static const struct vm_operations_struct pt_vm_ops = {
	.open = pt_vm_open,
	.close = pt_vm_close,
};

/*
 * mmap runs with the caller's mmap_lock held for writing, so it must not
 * take pt.lock: the control thread takes mmap locks (describing tasks at
 * off, faulting on user buffers) while holding pt.lock.  It takes a
 * reference on the current set under set_lock instead.
 */
static int pt_mmap(struct file *f, struct vm_area_struct *vma)
{
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 idx = off >> PITRACE_MMAP_SHIFT;
	struct pt_set *s;
	struct pt_buf *b;
	int err;

	if (off == PITRACE_PTT_MMAP_OFFSET)
		return pt_ptt_mmap(&((struct pt_file *)f->private_data)->ptt,
				   vma);
	if (off & ((1ULL << PITRACE_MMAP_SHIFT) - 1))
		return -EINVAL;
	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	spin_lock(&pt.set_lock);
	s = pt.set;
	if (s)
		kref_get(&s->ref);
	spin_unlock(&pt.set_lock);
	if (!s)
		return -ENODATA;
	err = -EINVAL;
	if (idx >= 2ULL * s->ncpu)
		goto out;
	b = (idx & 1) ? &s->mte[idx / 2] : &s->trace[idx / 2];
	if (vma_pages(vma) > b->npages)
		goto out;
	pt_vm_flags_clear(vma, VM_MAYWRITE);
	pt_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	err = vm_map_pages_zero(vma, b->pages, b->npages);
	if (err)
		goto out;
	vma->vm_ops = &pt_vm_ops;
	vma->vm_private_data = s;
	return 0;	/* the mapping keeps the reference */
out:
	kref_put(&s->ref, pt_set_release);
	return err;
}

/* ---- open, release, poll ------------------------------------------------------ */

static int pt_open(struct inode *inode, struct file *f)
{
	struct pt_file *pf = kzalloc(sizeof(*pf), GFP_KERNEL);

	if (!pf)
		return -ENOMEM;
	pf->seen_gen = atomic_read(&pt.wake_gen);
	f->private_data = pf;
	return 0;
}

static int pt_release(struct inode *inode, struct file *f)
{
	mutex_lock(&pt.lock);
	if (pt.drainer == f) {
		pt.drainer = NULL;
		pt.drainer_pid = 0;
	}
	mutex_unlock(&pt.lock);
	pt_ptt_release(((struct pt_file *)f->private_data)->ptt);
	kfree(f->private_data);
	return 0;
}

/* Readable when segments completed, a buffer filled, or tracing stopped. */
static __poll_t pt_poll(struct file *f, struct poll_table_struct *wait)
{
	struct pt_file *pf = f->private_data;
	int gen;

	poll_wait(f, &pt.wq, wait);
	gen = atomic_read(&pt.wake_gen);
	if (gen != pf->seen_gen) {
		pf->seen_gen = gen;
		return EPOLLIN | EPOLLRDNORM;
	}
	return 0;
}

static const struct file_operations pt_fops = {
	.owner = THIS_MODULE,
	.open = pt_open,
	.release = pt_release,
	.unlocked_ioctl = pt_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = pt_mmap,
	.poll = pt_poll,
	.llseek = noop_llseek,
};

static struct miscdevice pt_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "pitrace",
	.fops = &pt_fops,
};

static enum cpuhp_state pt_cpuhp_state;

/* CPU hot-plug: per-CPU samplers (tprof) and PTT counters follow CPUs. */
static int pt_cpu_online(unsigned int cpu)
{
	pt_ptt_cpu_online(cpu);
	return pt_src_cpu_online(cpu);
}

static int pt_cpu_offline(unsigned int cpu)
{
	pt_src_cpu_offline(cpu);
	return pt_ptt_cpu_offline(cpu);
}

static int __init pt_init(void)
{
	int err;

	mutex_init(&pt.lock);
	spin_lock_init(&pt.set_lock);
	init_waitqueue_head(&pt.wq);
	init_irq_work(&pt_wake_work, pt_wake_fn);
	pt.state = PITRACE_STATE_FREE;
	pt.rate_hz = 1000;
	pt.enabled[0] = (1ULL << PITRACE_MAJOR_SYS) | (1ULL << PITRACE_MAJOR_MTE) |
			(1ULL << PITRACE_MAJOR_TPROF);
	err = pt_src_init();
	if (err)
		goto fail;
	/* the buffers exist for every possible CPU: only sources follow */
	err = cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "pitrace:online",
					pt_cpu_online, pt_cpu_offline);
	if (err < 0)
		goto fail;
	pt_cpuhp_state = err;
	pt_misc.mode = perm & 0777;
	err = misc_register(&pt_misc);
	if (err)
		goto fail_cpuhp;
	pr_info("pitrace: /dev/pitrace ready (abi %d, %u CPUs)\n",
		PITRACE_ABI_VERSION, nr_cpu_ids);
	return 0;
fail_cpuhp:
	cpuhp_remove_state_nocalls(pt_cpuhp_state);
fail:
	pt_src_exit();
	return err;
}

static void __exit pt_exit(void)
{
	misc_deregister(&pt_misc);
	mutex_lock(&pt.lock);
	pt_do_free();
	mutex_unlock(&pt.lock);
	cpuhp_remove_state_nocalls(pt_cpuhp_state);
	pt_src_exit();
	pt_ptt_exit();
	pt_itrace_exit();
	irq_work_sync(&pt_wake_work);
	pr_info("pitrace: unloaded\n");
}

module_init(pt_init);
module_exit(pt_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Performance Inspector trace facility: per-CPU buffers, MTE, tprof");
MODULE_AUTHOR("perfinsp");
