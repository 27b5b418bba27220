//go:build cgo

// Package abic reads the pitrace ABI from kmod/uapi/pitrace.h through cgo,
// for the ABI test of kmodbackend. Generated with the struct and constant
// lists of that test; it is never linked into a tool.
package abic

/*
#cgo CFLAGS: -I${SRCDIR}/../../../../kmod/uapi
#include <stddef.h>
#include <stdlib.h>
#include "pitrace.h"

typedef void (*addfn)(const char *, unsigned long long);

static int pt_count;
static const char *pt_names[512];
static unsigned long long pt_values[512];

static void add(const char *n, unsigned long long v)
{
	if (pt_count < 512) {
		pt_names[pt_count] = n;
		pt_values[pt_count] = v;
		pt_count++;
	}
}

static int collect(void)
{
	pt_count = 0;
	add("sizeof pitrace_rec_hdr", sizeof(struct pitrace_rec_hdr));
	add("offsetof pitrace_rec_hdr.type_len", offsetof(struct pitrace_rec_hdr, type_len));
	add("offsetof pitrace_rec_hdr.major", offsetof(struct pitrace_rec_hdr, major));
	add("offsetof pitrace_rec_hdr.minor", offsetof(struct pitrace_rec_hdr, minor));
	add("offsetof pitrace_rec_hdr.time_lo", offsetof(struct pitrace_rec_hdr, time_lo));
	add("sizeof pitrace_seg", sizeof(struct pitrace_seg));
	add("offsetof pitrace_seg.state", offsetof(struct pitrace_seg, state));
	add("offsetof pitrace_seg.used", offsetof(struct pitrace_seg, used));
	add("offsetof pitrace_seg.seq", offsetof(struct pitrace_seg, seq));
	add("offsetof pitrace_seg.records", offsetof(struct pitrace_seg, records));
	add("sizeof pitrace_buf_hdr", sizeof(struct pitrace_buf_hdr));
	add("offsetof pitrace_buf_hdr.magic", offsetof(struct pitrace_buf_hdr, magic));
	add("offsetof pitrace_buf_hdr.abi", offsetof(struct pitrace_buf_hdr, abi));
	add("offsetof pitrace_buf_hdr.cpu", offsetof(struct pitrace_buf_hdr, cpu));
	add("offsetof pitrace_buf_hdr.kind", offsetof(struct pitrace_buf_hdr, kind));
	add("offsetof pitrace_buf_hdr.mode", offsetof(struct pitrace_buf_hdr, mode));
	add("offsetof pitrace_buf_hdr.seg_size", offsetof(struct pitrace_buf_hdr, seg_size));
	add("offsetof pitrace_buf_hdr.nseg", offsetof(struct pitrace_buf_hdr, nseg));
	add("offsetof pitrace_buf_hdr.flags", offsetof(struct pitrace_buf_hdr, flags));
	add("offsetof pitrace_buf_hdr.data_offset", offsetof(struct pitrace_buf_hdr, data_offset));
	add("offsetof pitrace_buf_hdr.records", offsetof(struct pitrace_buf_hdr, records));
	add("offsetof pitrace_buf_hdr.lost", offsetof(struct pitrace_buf_hdr, lost));
	add("offsetof pitrace_buf_hdr.bytes", offsetof(struct pitrace_buf_hdr, bytes));
	add("offsetof pitrace_buf_hdr.pending", offsetof(struct pitrace_buf_hdr, pending));
	add("offsetof pitrace_buf_hdr.next_seq", offsetof(struct pitrace_buf_hdr, next_seq));
	add("offsetof pitrace_buf_hdr.cur", offsetof(struct pitrace_buf_hdr, cur));
	add("offsetof pitrace_buf_hdr.reserved", offsetof(struct pitrace_buf_hdr, reserved));
	add("offsetof pitrace_buf_hdr.seg", offsetof(struct pitrace_buf_hdr, seg));
	add("sizeof pitrace_init_arg", sizeof(struct pitrace_init_arg));
	add("offsetof pitrace_init_arg.trace_size", offsetof(struct pitrace_init_arg, trace_size));
	add("offsetof pitrace_init_arg.mte_size", offsetof(struct pitrace_init_arg, mte_size));
	add("offsetof pitrace_init_arg.mode", offsetof(struct pitrace_init_arg, mode));
	add("offsetof pitrace_init_arg.reserved", offsetof(struct pitrace_init_arg, reserved));
	add("sizeof pitrace_mode_arg", sizeof(struct pitrace_mode_arg));
	add("offsetof pitrace_mode_arg.mode", offsetof(struct pitrace_mode_arg, mode));
	add("offsetof pitrace_mode_arg.reserved", offsetof(struct pitrace_mode_arg, reserved));
	add("offsetof pitrace_mode_arg.path", offsetof(struct pitrace_mode_arg, path));
	add("sizeof pitrace_majors", sizeof(struct pitrace_majors));
	add("offsetof pitrace_majors.mask", offsetof(struct pitrace_majors, mask));
	add("sizeof pitrace_rate_arg", sizeof(struct pitrace_rate_arg));
	add("offsetof pitrace_rate_arg.hz", offsetof(struct pitrace_rate_arg, hz));
	add("offsetof pitrace_rate_arg.event_type", offsetof(struct pitrace_rate_arg, event_type));
	add("offsetof pitrace_rate_arg.event_config", offsetof(struct pitrace_rate_arg, event_config));
	add("offsetof pitrace_rate_arg.event", offsetof(struct pitrace_rate_arg, event));
	add("sizeof pitrace_status", sizeof(struct pitrace_status));
	add("offsetof pitrace_status.abi", offsetof(struct pitrace_status, abi));
	add("offsetof pitrace_status.state", offsetof(struct pitrace_status, state));
	add("offsetof pitrace_status.mode", offsetof(struct pitrace_status, mode));
	add("offsetof pitrace_status.flags", offsetof(struct pitrace_status, flags));
	add("offsetof pitrace_status.trace_size", offsetof(struct pitrace_status, trace_size));
	add("offsetof pitrace_status.mte_size", offsetof(struct pitrace_status, mte_size));
	add("offsetof pitrace_status.trace_seg_size", offsetof(struct pitrace_status, trace_seg_size));
	add("offsetof pitrace_status.trace_nseg", offsetof(struct pitrace_status, trace_nseg));
	add("offsetof pitrace_status.mte_seg_size", offsetof(struct pitrace_status, mte_seg_size));
	add("offsetof pitrace_status.mte_nseg", offsetof(struct pitrace_status, mte_nseg));
	add("offsetof pitrace_status.ncpus", offsetof(struct pitrace_status, ncpus));
	add("offsetof pitrace_status.rate_hz", offsetof(struct pitrace_status, rate_hz));
	add("offsetof pitrace_status.event_type", offsetof(struct pitrace_status, event_type));
	add("offsetof pitrace_status.drainer_pid", offsetof(struct pitrace_status, drainer_pid));
	add("offsetof pitrace_status.event_config", offsetof(struct pitrace_status, event_config));
	add("offsetof pitrace_status.start_wall_ns", offsetof(struct pitrace_status, start_wall_ns));
	add("offsetof pitrace_status.start_clock_ns", offsetof(struct pitrace_status, start_clock_ns));
	add("offsetof pitrace_status.enabled", offsetof(struct pitrace_status, enabled));
	add("offsetof pitrace_status.on_count", offsetof(struct pitrace_status, on_count));
	add("offsetof pitrace_status.map_size_trace", offsetof(struct pitrace_status, map_size_trace));
	add("offsetof pitrace_status.map_size_mte", offsetof(struct pitrace_status, map_size_mte));
	add("offsetof pitrace_status.event", offsetof(struct pitrace_status, event));
	add("offsetof pitrace_status.path", offsetof(struct pitrace_status, path));
	add("sizeof pitrace_cpu_status", sizeof(struct pitrace_cpu_status));
	add("offsetof pitrace_cpu_status.cpu", offsetof(struct pitrace_cpu_status, cpu));
	add("offsetof pitrace_cpu_status.flags", offsetof(struct pitrace_cpu_status, flags));
	add("offsetof pitrace_cpu_status.records", offsetof(struct pitrace_cpu_status, records));
	add("offsetof pitrace_cpu_status.lost", offsetof(struct pitrace_cpu_status, lost));
	add("offsetof pitrace_cpu_status.bytes", offsetof(struct pitrace_cpu_status, bytes));
	add("offsetof pitrace_cpu_status.used", offsetof(struct pitrace_cpu_status, used));
	add("offsetof pitrace_cpu_status.mte_records", offsetof(struct pitrace_cpu_status, mte_records));
	add("offsetof pitrace_cpu_status.mte_lost", offsetof(struct pitrace_cpu_status, mte_lost));
	add("offsetof pitrace_cpu_status.mte_bytes", offsetof(struct pitrace_cpu_status, mte_bytes));
	add("offsetof pitrace_cpu_status.mte_used", offsetof(struct pitrace_cpu_status, mte_used));
	add("sizeof pitrace_hook_arg", sizeof(struct pitrace_hook_arg));
	add("offsetof pitrace_hook_arg.major", offsetof(struct pitrace_hook_arg, major));
	add("offsetof pitrace_hook_arg.reserved", offsetof(struct pitrace_hook_arg, reserved));
	add("offsetof pitrace_hook_arg.minor", offsetof(struct pitrace_hook_arg, minor));
	add("offsetof pitrace_hook_arg.nwords", offsetof(struct pitrace_hook_arg, nwords));
	add("offsetof pitrace_hook_arg.len", offsetof(struct pitrace_hook_arg, len));
	add("offsetof pitrace_hook_arg.words", offsetof(struct pitrace_hook_arg, words));
	add("offsetof pitrace_hook_arg.data", offsetof(struct pitrace_hook_arg, data));
	add("sizeof pitrace_sysinfo", sizeof(struct pitrace_sysinfo));
	add("offsetof pitrace_sysinfo.abi", offsetof(struct pitrace_sysinfo, abi));
	add("offsetof pitrace_sysinfo.ncpus", offsetof(struct pitrace_sysinfo, ncpus));
	add("offsetof pitrace_sysinfo.online", offsetof(struct pitrace_sysinfo, online));
	add("offsetof pitrace_sysinfo.page_size", offsetof(struct pitrace_sysinfo, page_size));
	add("offsetof pitrace_sysinfo.clock_id", offsetof(struct pitrace_sysinfo, clock_id));
	add("offsetof pitrace_sysinfo.segments", offsetof(struct pitrace_sysinfo, segments));
	add("offsetof pitrace_sysinfo.hdr_size", offsetof(struct pitrace_sysinfo, hdr_size));
	add("offsetof pitrace_sysinfo.features", offsetof(struct pitrace_sysinfo, features));
	add("offsetof pitrace_sysinfo.min_buf", offsetof(struct pitrace_sysinfo, min_buf));
	add("offsetof pitrace_sysinfo.max_buf", offsetof(struct pitrace_sysinfo, max_buf));
	add("offsetof pitrace_sysinfo.mem_limit", offsetof(struct pitrace_sysinfo, mem_limit));
	add("sizeof pitrace_release_arg", sizeof(struct pitrace_release_arg));
	add("offsetof pitrace_release_arg.cpu", offsetof(struct pitrace_release_arg, cpu));
	add("offsetof pitrace_release_arg.kind", offsetof(struct pitrace_release_arg, kind));
	add("offsetof pitrace_release_arg.seg", offsetof(struct pitrace_release_arg, seg));
	add("offsetof pitrace_release_arg.reserved", offsetof(struct pitrace_release_arg, reserved));
	add("offsetof pitrace_release_arg.seq", offsetof(struct pitrace_release_arg, seq));
	add("sizeof pitrace_bench_arg", sizeof(struct pitrace_bench_arg));
	add("offsetof pitrace_bench_arg.path", offsetof(struct pitrace_bench_arg, path));
	add("offsetof pitrace_bench_arg.count", offsetof(struct pitrace_bench_arg, count));
	add("offsetof pitrace_bench_arg.cycles", offsetof(struct pitrace_bench_arg, cycles));
	add("PITRACE_ABI_VERSION", (unsigned long long)(PITRACE_ABI_VERSION));
	add("PITRACE_CLOCK_ID", (unsigned long long)(PITRACE_CLOCK_ID));
	add("PITRACE_REC_HDR_SIZE", (unsigned long long)(PITRACE_REC_HDR_SIZE));
	add("PITRACE_MAX_RECORD", (unsigned long long)(PITRACE_MAX_RECORD));
	add("PITRACE_LAYOUT_FIXED", (unsigned long long)(PITRACE_LAYOUT_FIXED));
	add("PITRACE_LAYOUT_STRING", (unsigned long long)(PITRACE_LAYOUT_STRING));
	add("PITRACE_LAYOUT_BYTES", (unsigned long long)(PITRACE_LAYOUT_BYTES));
	add("PITRACE_LAYOUT_WORDS", (unsigned long long)(PITRACE_LAYOUT_WORDS));
	add("PITRACE_MAJOR_SYS", (unsigned long long)(PITRACE_MAJOR_SYS));
	add("PITRACE_MAJOR_MTE", (unsigned long long)(PITRACE_MAJOR_MTE));
	add("PITRACE_MAJOR_INTERRUPT", (unsigned long long)(PITRACE_MAJOR_INTERRUPT));
	add("PITRACE_MAJOR_DISPATCH", (unsigned long long)(PITRACE_MAJOR_DISPATCH));
	add("PITRACE_MAJOR_THREAD", (unsigned long long)(PITRACE_MAJOR_THREAD));
	add("PITRACE_MAJOR_TPROF", (unsigned long long)(PITRACE_MAJOR_TPROF));
	add("PITRACE_MAJOR_JITLOAD", (unsigned long long)(PITRACE_MAJOR_JITLOAD));
	add("PITRACE_MAJOR_ITRACE_U", (unsigned long long)(PITRACE_MAJOR_ITRACE_U));
	add("PITRACE_MAJOR_ITRACE_K", (unsigned long long)(PITRACE_MAJOR_ITRACE_K));
	add("PITRACE_MAJOR_PTT", (unsigned long long)(PITRACE_MAJOR_PTT));
	add("PITRACE_MAJOR_USER_FIRST", (unsigned long long)(PITRACE_MAJOR_USER_FIRST));
	add("PITRACE_EXIT_BIT", (unsigned long long)(PITRACE_EXIT_BIT));
	add("PITRACE_SYS_TIME_HIGH", (unsigned long long)(PITRACE_SYS_TIME_HIGH));
	add("PITRACE_SYS_INFO", (unsigned long long)(PITRACE_SYS_INFO));
	add("PITRACE_SYS_LOST", (unsigned long long)(PITRACE_SYS_LOST));
	add("PITRACE_SYS_TRACE_ON", (unsigned long long)(PITRACE_SYS_TRACE_ON));
	add("PITRACE_SYS_TRACE_OFF", (unsigned long long)(PITRACE_SYS_TRACE_OFF));
	add("PITRACE_SYS_BUF_FULL", (unsigned long long)(PITRACE_SYS_BUF_FULL));
	add("PITRACE_MTE_PROCESS", (unsigned long long)(PITRACE_MTE_PROCESS));
	add("PITRACE_MTE_FORK", (unsigned long long)(PITRACE_MTE_FORK));
	add("PITRACE_MTE_EXEC", (unsigned long long)(PITRACE_MTE_EXEC));
	add("PITRACE_MTE_EXIT", (unsigned long long)(PITRACE_MTE_EXIT));
	add("PITRACE_MTE_THREAD", (unsigned long long)(PITRACE_MTE_THREAD));
	add("PITRACE_MTE_SEGMENT", (unsigned long long)(PITRACE_MTE_SEGMENT));
	add("PITRACE_MTE_UNMAP", (unsigned long long)(PITRACE_MTE_UNMAP));
	add("PITRACE_TPROF_TICK", (unsigned long long)(PITRACE_TPROF_TICK));
	add("PITRACE_TPROF_EVENT", (unsigned long long)(PITRACE_TPROF_EVENT));
	add("PITRACE_TPROF_KERNEL", (unsigned long long)(PITRACE_TPROF_KERNEL));
	add("PITRACE_DISPATCH_SWITCH", (unsigned long long)(PITRACE_DISPATCH_SWITCH));
	add("PITRACE_INTR_HARD", (unsigned long long)(PITRACE_INTR_HARD));
	add("PITRACE_INTR_SOFT", (unsigned long long)(PITRACE_INTR_SOFT));
	add("PITRACE_FORK_THREAD", (unsigned long long)(PITRACE_FORK_THREAD));
	add("PITRACE_LOST_FULL", (unsigned long long)(PITRACE_LOST_FULL));
	add("PITRACE_LOST_OVERWRITE", (unsigned long long)(PITRACE_LOST_OVERWRITE));
	add("PITRACE_MODE_NORMAL", (unsigned long long)(PITRACE_MODE_NORMAL));
	add("PITRACE_MODE_WRAP", (unsigned long long)(PITRACE_MODE_WRAP));
	add("PITRACE_MODE_CONT", (unsigned long long)(PITRACE_MODE_CONT));
	add("PITRACE_STATE_FREE", (unsigned long long)(PITRACE_STATE_FREE));
	add("PITRACE_STATE_INIT", (unsigned long long)(PITRACE_STATE_INIT));
	add("PITRACE_STATE_ON", (unsigned long long)(PITRACE_STATE_ON));
	add("PITRACE_STATE_OFF", (unsigned long long)(PITRACE_STATE_OFF));
	add("PITRACE_KIND_TRACE", (unsigned long long)(PITRACE_KIND_TRACE));
	add("PITRACE_KIND_MTE", (unsigned long long)(PITRACE_KIND_MTE));
	add("PITRACE_MMAP_SHIFT", (unsigned long long)(PITRACE_MMAP_SHIFT));
	add("PITRACE_SEGMENTS", (unsigned long long)(PITRACE_SEGMENTS));
	add("PITRACE_MIN_SEGMENT", (unsigned long long)(PITRACE_MIN_SEGMENT));
	add("PITRACE_MIN_BUF", (unsigned long long)(PITRACE_MIN_BUF));
	add("PITRACE_MAX_BUF", (unsigned long long)(PITRACE_MAX_BUF));
	add("PITRACE_SEG_FREE", (unsigned long long)(PITRACE_SEG_FREE));
	add("PITRACE_SEG_FILLING", (unsigned long long)(PITRACE_SEG_FILLING));
	add("PITRACE_SEG_DONE", (unsigned long long)(PITRACE_SEG_DONE));
	add("PITRACE_BUF_MAGIC", (unsigned long long)(PITRACE_BUF_MAGIC));
	add("PITRACE_BUF_FULL", (unsigned long long)(PITRACE_BUF_FULL));
	add("PITRACE_NO_SEG", (unsigned long long)(PITRACE_NO_SEG));
	add("PITRACE_PATH_MAX", (unsigned long long)(PITRACE_PATH_MAX));
	add("PITRACE_MAX_RATE", (unsigned long long)(PITRACE_MAX_RATE));
	add("PITRACE_EVENT_NAME", (unsigned long long)(PITRACE_EVENT_NAME));
	add("PITRACE_ST_STOPPED_FULL", (unsigned long long)(PITRACE_ST_STOPPED_FULL));
	add("PITRACE_ST_UNSAVED", (unsigned long long)(PITRACE_ST_UNSAVED));
	add("PITRACE_ST_EVENT", (unsigned long long)(PITRACE_ST_EVENT));
	add("PITRACE_CPU_TRACE_FULL", (unsigned long long)(PITRACE_CPU_TRACE_FULL));
	add("PITRACE_CPU_MTE_FULL", (unsigned long long)(PITRACE_CPU_MTE_FULL));
	add("PITRACE_HOOK_MAX_WORDS", (unsigned long long)(PITRACE_HOOK_MAX_WORDS));
	add("PITRACE_HOOK_MAX_BYTES", (unsigned long long)(PITRACE_HOOK_MAX_BYTES));
	add("PITRACE_FEAT_KPROBE_EXIT", (unsigned long long)(PITRACE_FEAT_KPROBE_EXIT));
	add("PITRACE_FEAT_KPROBE_EXEC", (unsigned long long)(PITRACE_FEAT_KPROBE_EXEC));
	add("PITRACE_FEAT_UNMAP", (unsigned long long)(PITRACE_FEAT_UNMAP));
	add("PITRACE_FEAT_MMAP", (unsigned long long)(PITRACE_FEAT_MMAP));
	add("PITRACE_BENCH_TPROF", (unsigned long long)(PITRACE_BENCH_TPROF));
	add("PITRACE_BENCH_MAX", (unsigned long long)(PITRACE_BENCH_MAX));
	add("PITRACE_IOC_MAGIC", (unsigned long long)(PITRACE_IOC_MAGIC));
	add("PITRACE_IOC_INIT", (unsigned long long)(PITRACE_IOC_INIT));
	add("PITRACE_IOC_ENABLE", (unsigned long long)(PITRACE_IOC_ENABLE));
	add("PITRACE_IOC_DISABLE", (unsigned long long)(PITRACE_IOC_DISABLE));
	add("PITRACE_IOC_SETMODE", (unsigned long long)(PITRACE_IOC_SETMODE));
	add("PITRACE_IOC_SETRATE", (unsigned long long)(PITRACE_IOC_SETRATE));
	add("PITRACE_IOC_ON", (unsigned long long)(PITRACE_IOC_ON));
	add("PITRACE_IOC_OFF", (unsigned long long)(PITRACE_IOC_OFF));
	add("PITRACE_IOC_STATUS", (unsigned long long)(PITRACE_IOC_STATUS));
	add("PITRACE_IOC_CPU_STATUS", (unsigned long long)(PITRACE_IOC_CPU_STATUS));
	add("PITRACE_IOC_HOOK", (unsigned long long)(PITRACE_IOC_HOOK));
	add("PITRACE_IOC_SYSINFO", (unsigned long long)(PITRACE_IOC_SYSINFO));
	add("PITRACE_IOC_FREE", (unsigned long long)(PITRACE_IOC_FREE));
	add("PITRACE_IOC_RELEASE", (unsigned long long)(PITRACE_IOC_RELEASE));
	add("PITRACE_IOC_DRAIN", (unsigned long long)(PITRACE_IOC_DRAIN));
	add("PITRACE_IOC_SAVED", (unsigned long long)(PITRACE_IOC_SAVED));
	add("PITRACE_IOC_BENCH", (unsigned long long)(PITRACE_IOC_BENCH));
	add("sizeof pitrace_ptt_metric", sizeof(struct pitrace_ptt_metric));
	add("offsetof pitrace_ptt_metric.kind", offsetof(struct pitrace_ptt_metric, kind));
	add("offsetof pitrace_ptt_metric.type", offsetof(struct pitrace_ptt_metric, type));
	add("offsetof pitrace_ptt_metric.config", offsetof(struct pitrace_ptt_metric, config));
	add("sizeof pitrace_ptt_init", sizeof(struct pitrace_ptt_init));
	add("offsetof pitrace_ptt_init.nmetrics", offsetof(struct pitrace_ptt_init, nmetrics));
	add("offsetof pitrace_ptt_init.flags", offsetof(struct pitrace_ptt_init, flags));
	add("offsetof pitrace_ptt_init.m", offsetof(struct pitrace_ptt_init, m));
	add("sizeof pitrace_ptt_area", sizeof(struct pitrace_ptt_area));
	add("offsetof pitrace_ptt_area.seq", offsetof(struct pitrace_ptt_area, seq));
	add("offsetof pitrace_ptt_area.cpu", offsetof(struct pitrace_ptt_area, cpu));
	add("offsetof pitrace_ptt_area.dispatches", offsetof(struct pitrace_ptt_area, dispatches));
	add("offsetof pitrace_ptt_area.interrupts", offsetof(struct pitrace_ptt_area, interrupts));
	add("offsetof pitrace_ptt_area.nmetrics", offsetof(struct pitrace_ptt_area, nmetrics));
	add("offsetof pitrace_ptt_area.dead", offsetof(struct pitrace_ptt_area, dead));
	add("offsetof pitrace_ptt_area.accum", offsetof(struct pitrace_ptt_area, accum));
	add("offsetof pitrace_ptt_area.last", offsetof(struct pitrace_ptt_area, last));
	add("offsetof pitrace_ptt_area.intr_time", offsetof(struct pitrace_ptt_area, intr_time));
	add("offsetof pitrace_ptt_area.live", offsetof(struct pitrace_ptt_area, live));
	add("sizeof pitrace_ptt_bucket", sizeof(struct pitrace_ptt_bucket));
	add("offsetof pitrace_ptt_bucket.interrupts", offsetof(struct pitrace_ptt_bucket, interrupts));
	add("offsetof pitrace_ptt_bucket.tsc", offsetof(struct pitrace_ptt_bucket, tsc));
	add("offsetof pitrace_ptt_bucket.val", offsetof(struct pitrace_ptt_bucket, val));
	add("sizeof pitrace_ptt_status", sizeof(struct pitrace_ptt_status));
	add("offsetof pitrace_ptt_status.first_cpu", offsetof(struct pitrace_ptt_status, first_cpu));
	add("offsetof pitrace_ptt_status.ncpus", offsetof(struct pitrace_ptt_status, ncpus));
	add("offsetof pitrace_ptt_status.nr_cpus", offsetof(struct pitrace_ptt_status, nr_cpus));
	add("offsetof pitrace_ptt_status.hooks", offsetof(struct pitrace_ptt_status, hooks));
	add("offsetof pitrace_ptt_status.nareas", offsetof(struct pitrace_ptt_status, nareas));
	add("offsetof pitrace_ptt_status.nmetrics", offsetof(struct pitrace_ptt_status, nmetrics));
	add("offsetof pitrace_ptt_status.cpu", offsetof(struct pitrace_ptt_status, cpu));
	add("sizeof pitrace_ptt_watch", sizeof(struct pitrace_ptt_watch));
	add("offsetof pitrace_ptt_watch.tid", offsetof(struct pitrace_ptt_watch, tid));
	add("offsetof pitrace_ptt_watch.flags", offsetof(struct pitrace_ptt_watch, flags));
	add("sizeof pitrace_ptt_thread", sizeof(struct pitrace_ptt_thread));
	add("offsetof pitrace_ptt_thread.tid", offsetof(struct pitrace_ptt_thread, tid));
	add("offsetof pitrace_ptt_thread.pid", offsetof(struct pitrace_ptt_thread, pid));
	add("offsetof pitrace_ptt_thread.comm", offsetof(struct pitrace_ptt_thread, comm));
	add("offsetof pitrace_ptt_thread.running", offsetof(struct pitrace_ptt_thread, running));
	add("offsetof pitrace_ptt_thread.mapped", offsetof(struct pitrace_ptt_thread, mapped));
	add("offsetof pitrace_ptt_thread.a", offsetof(struct pitrace_ptt_thread, a));
	add("sizeof pitrace_ptt_read", sizeof(struct pitrace_ptt_read));
	add("offsetof pitrace_ptt_read.max", offsetof(struct pitrace_ptt_read, max));
	add("offsetof pitrace_ptt_read.n", offsetof(struct pitrace_ptt_read, n));
	add("offsetof pitrace_ptt_read.total", offsetof(struct pitrace_ptt_read, total));
	add("offsetof pitrace_ptt_read.pad", offsetof(struct pitrace_ptt_read, pad));
	add("offsetof pitrace_ptt_read.buf", offsetof(struct pitrace_ptt_read, buf));
	add("PITRACE_IOC_PTT_INIT", (unsigned long long)(PITRACE_IOC_PTT_INIT));
	add("PITRACE_IOC_PTT_TERM", (unsigned long long)(PITRACE_IOC_PTT_TERM));
	add("PITRACE_IOC_PTT_STATUS", (unsigned long long)(PITRACE_IOC_PTT_STATUS));
	add("PITRACE_IOC_PTT_WATCH", (unsigned long long)(PITRACE_IOC_PTT_WATCH));
	add("PITRACE_IOC_PTT_READ", (unsigned long long)(PITRACE_IOC_PTT_READ));
	add("PITRACE_PTT_MAX_METRICS", (unsigned long long)(PITRACE_PTT_MAX_METRICS));
	add("PITRACE_PTT_MAX_SLOTS", (unsigned long long)(PITRACE_PTT_MAX_SLOTS));
	add("PITRACE_PTT_STATUS_CPUS", (unsigned long long)(PITRACE_PTT_STATUS_CPUS));
	add("PITRACE_PTT_TSC", (unsigned long long)(PITRACE_PTT_TSC));
	add("PITRACE_PTT_PERF", (unsigned long long)(PITRACE_PTT_PERF));
	add("PITRACE_PTT_MMAP_OFFSET", (unsigned long long)(PITRACE_PTT_MMAP_OFFSET));
	add("sizeof pitrace_msr", sizeof(struct pitrace_msr));
	add("offsetof pitrace_msr.cpu", offsetof(struct pitrace_msr, cpu));
	add("offsetof pitrace_msr.reg", offsetof(struct pitrace_msr, reg));
	add("offsetof pitrace_msr.value", offsetof(struct pitrace_msr, value));
	add("offsetof pitrace_msr.flags", offsetof(struct pitrace_msr, flags));
	add("offsetof pitrace_msr.reserved", offsetof(struct pitrace_msr, reserved));
	add("PITRACE_IOC_MSR_READ", (unsigned long long)(PITRACE_IOC_MSR_READ));
	add("PITRACE_IOC_MSR_WRITE", (unsigned long long)(PITRACE_IOC_MSR_WRITE));
	return pt_count;
}

static const char *name_at(int i) { return pt_names[i]; }
static unsigned long long value_at(int i) { return pt_values[i]; }
*/
import "C"

// Values returns every size, offset and constant of the header by name:
// "sizeof S", "offsetof S.f", or the macro name.
func Values() map[string]uint64 {
	n := int(C.collect())
	out := make(map[string]uint64, n)
	for i := 0; i < n; i++ {
		out[C.GoString(C.name_at(C.int(i)))] = uint64(C.value_at(C.int(i)))
	}
	return out
}
