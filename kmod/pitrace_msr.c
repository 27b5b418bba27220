// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_msr.c - MSR access for the msr tool (PI's msr): read or write a
 * model-specific register on one CPU.
 *
 *   PITRACE_IOC_MSR_READ   rdmsr_safe_on_cpu(cpu, reg)
 *   PITRACE_IOC_MSR_WRITE  wrmsr_safe_on_cpu(cpu, reg, value)
 *
 * Both need CAP_SYS_RAWIO (root), whatever the mode of /dev/pitrace.  A
 * register that does not exist (or faults) is -EIO, never an Oops: the
 * _safe variants catch the #GP.  Writes go only to the registers of
 * pt_msr_allow[] (the TSC_AUX and the performance-monitoring registers)
 * unless the module was loaded with allow_writes=1; other writes are
 * -EACCES (/sys/module/pitrace/parameters/allow_writes, root only, may be
 * changed at run time).  Writes are refused under kernel lockdown, as
 * msr.ko does.
 *
 * The ioctls run in process context and may sleep (the cross-CPU call
 * waits); they take no pitrace lock.
 */
#include <linux/capability.h>
#include <linux/cpumask.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/security.h>
#include <linux/uaccess.h>
#include <asm/msr.h>

#include "pitrace_int.h"

/* Root may change it at run time, as msr.ko's allow_writes (0600). */
static bool allow_writes;
module_param(allow_writes, bool, 0600);
MODULE_PARM_DESC(allow_writes,
		 "let root write any MSR through PITRACE_IOC_MSR_WRITE (default 0: only the documented allowlist, see docs/hwevents.md)");

/* Registers root may write without allow_writes=1: [first, last]. */
static const struct {
	u32 first, last;
} pt_msr_allow[] = {
	{ 0x000000c1, 0x000000c8 },	/* IA32_PMC0..7 */
	{ 0x00000186, 0x0000018d },	/* IA32_PERFEVTSEL0..7 */
	{ 0x00000309, 0x0000030c },	/* IA32_FIXED_CTR0..3 */
	{ 0x0000038d, 0x0000038d },	/* IA32_FIXED_CTR_CTRL */
	{ 0x0000038f, 0x00000390 },	/* IA32_PERF_GLOBAL_CTRL, _OVF_CTRL */
	{ 0xc0000103, 0xc0000103 },	/* IA32_TSC_AUX */
	{ 0xc0010000, 0xc0010007 },	/* AMD PERF_CTL0..3, PERF_CTR0..3 */
	{ 0xc0010200, 0xc001020b },	/* AMD PERF_CTL0..5 / PERF_CTR0..5 (core ext.) */
};

static bool pt_msr_allowed(u32 reg)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(pt_msr_allow); i++)
		if (reg >= pt_msr_allow[i].first && reg <= pt_msr_allow[i].last)
			return true;
	return false;
}

long pt_msr_ioctl(unsigned int cmd, void __user *arg)
{
	struct pitrace_msr m;
	u32 lo, hi;
	int err;

	if (!capable(CAP_SYS_RAWIO))
		return -EPERM;
	if (copy_from_user(&m, arg, sizeof(m)))
		return -EFAULT;
	if (m.flags || m.reserved)
		return -EINVAL;
	if (m.cpu >= nr_cpu_ids || !cpu_online(m.cpu))
		return -ENXIO;

	switch (cmd) {
	case PITRACE_IOC_MSR_READ:
		err = rdmsr_safe_on_cpu(m.cpu, m.reg, &lo, &hi);
		if (err)
			return err == -ENXIO ? -ENXIO : -EIO; /* offline meanwhile, or #GP */
		m.value = (u64)hi << 32 | lo;
		if (copy_to_user(arg, &m, sizeof(m)))
			return -EFAULT;
		return 0;
	case PITRACE_IOC_MSR_WRITE:
		if (security_locked_down(LOCKDOWN_MSR))
			return -EPERM;
		if (!pt_msr_allowed(m.reg)) {
			if (!READ_ONCE(allow_writes))
				return -EACCES;
			pr_notice_ratelimited("pitrace: %s (pid %d) writes MSR %#x on CPU %u (allow_writes=1)\n",
					      current->comm, task_pid_nr(current), m.reg, m.cpu);
			add_taint(TAINT_CPU_OUT_OF_SPEC, LOCKDEP_STILL_OK);
		}
		err = wrmsr_safe_on_cpu(m.cpu, m.reg, lower_32_bits(m.value),
					upper_32_bits(m.value));
		if (err)
			return err == -ENXIO ? -ENXIO : -EIO;
		return 0;
	}
	return -ENOTTY;
}
