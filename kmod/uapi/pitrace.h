/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * pitrace.h - the user-space ABI of the pitrace kernel module (/dev/pitrace).
 *
 * This header is the one definition of the ABI: ioctl numbers and argument
 * structs, the trace record header, the major/minor code values (the same
 * values as format/trace/codes.go) and the layout of the memory-mapped
 * per-CPU buffers.  libperfutil/kmodbackend's Go mirror (zabi.go) is
 * generated from it by cgo -godefs (`make kmod-abi`); its tests fail when
 * the mirror is stale, and check the codes and record payloads against
 * format/trace.
 *
 * All values are little-endian (x86_64).  Time stamps are CLOCK_MONOTONIC
 * nanoseconds (ktime_get_mono_fast_ns() in the kernel).
 */
#ifndef _UAPI_PITRACE_H
#define _UAPI_PITRACE_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define PITRACE_ABI_VERSION	1
#define PITRACE_DEVICE		"/dev/pitrace"
#define PITRACE_CLOCK_ID	1	/* CLOCK_MONOTONIC, ns */

/* ---- trace record format (PI Figure 1) ---------------------------------- */

/*
 * Every record starts with this 12-byte header, is a multiple of 4 bytes
 * long and holds its fields (u32 or u64, packed, little-endian) after it.
 * type_len: top 4 bits the data layout, low 12 bits the length in 4-byte
 * units (header included).
 */
struct pitrace_rec_hdr {
	__u16 type_len;
	__u16 major;
	__u32 minor;
	__u32 time_lo;		/* low 32 bits of the time stamp */
};

#define PITRACE_REC_HDR_SIZE	12
#define PITRACE_MAX_RECORD	(0xfff * 4)
#define PITRACE_TYPELEN(layout, len) \
	((__u16)((((layout) & 0xf) << 12) | (((len) >> 2) & 0xfff)))

#define PITRACE_LAYOUT_FIXED	0
#define PITRACE_LAYOUT_STRING	1
#define PITRACE_LAYOUT_BYTES	2
#define PITRACE_LAYOUT_WORDS	3

/* Major codes (format/trace/codes.go). */
#define PITRACE_MAJOR_SYS	0x01
#define PITRACE_MAJOR_MTE	0x02
#define PITRACE_MAJOR_INTERRUPT	0x04
#define PITRACE_MAJOR_DISPATCH	0x08
#define PITRACE_MAJOR_THREAD	0x10
#define PITRACE_MAJOR_TPROF	0x12
#define PITRACE_MAJOR_JITLOAD	0x14
#define PITRACE_MAJOR_ITRACE_U	0x20
#define PITRACE_MAJOR_ITRACE_K	0x21
#define PITRACE_MAJOR_PTT	0x24
#define PITRACE_MAJOR_USER_FIRST 0x100

#define PITRACE_EXIT_BIT	0x80000000u

/* MAJOR_SYS minors */
#define PITRACE_SYS_TIME_HIGH	1	/* u32 high */
#define PITRACE_SYS_INFO	2	/* u32 ncpus, u32 clock_id, u64 clock_hz, u64 wall_ns, string uname */
#define PITRACE_SYS_LOST	3	/* u64 count, u32 reason */
#define PITRACE_SYS_TRACE_ON	4	/* u32 majors_lo, u32 rate_hz */
#define PITRACE_SYS_TRACE_OFF	5
#define PITRACE_SYS_BUF_FULL	6	/* u32 mte */

/* MAJOR_MTE minors */
#define PITRACE_MTE_PROCESS	1	/* u32 pid, u32 ppid, string name */
#define PITRACE_MTE_FORK	2	/* u32 ppid, ptid, pid, tid, flags */
#define PITRACE_MTE_EXEC	3	/* u32 pid, u32 tid, string path */
#define PITRACE_MTE_EXIT	4	/* u32 pid, u32 tid */
#define PITRACE_MTE_THREAD	5	/* u32 pid, u32 tid, string name */
#define PITRACE_MTE_SEGMENT	6	/* u32 pid, u64 start, size, offset, u32 prot, string path */
#define PITRACE_MTE_UNMAP	7	/* u32 pid, u64 start, u64 size */
#define PITRACE_MTE_FILE	8	/* u32 pid, u64 start, u32 dev_major, dev_minor, u64 ino */

/* MAJOR_TPROF minors */
#define PITRACE_TPROF_TICK	1	/* u32 pid, u32 tid, u64 ip, u32 flags */
#define PITRACE_TPROF_EVENT	2	/* u32 pid, u32 tid, u64 ip, u32 flags, u32 event */
#define PITRACE_TPROF_KERNEL	1	/* flags: ip is a kernel address */

/*
 * Call stacks (MAJOR_UNWIND, FIG. 30): with tprof and callstack (major 0x40)
 * enabled, every tprof sample record is followed in the same CPU's trace
 * buffer by one UNWIND record of the same thread: the interrupted PC first,
 * then return addresses up to the root; kernel frames (the kernel's unwinder
 * from the interrupted registers) before user frames (a frame-pointer walk
 * of the user stack with page faults disabled, from the registers the
 * thread entered the kernel with).  At most the depth limit of PCs in all
 * (ENABLE's stack_depth, default PITRACE_MAX_STACK, and what one buffer
 * segment holds); a stack cut there has PITRACE_UNWIND_TRUNCATED.  The same
 * record as the daemon backend writes (docs/trace-format.md).
 */
#define PITRACE_MAJOR_UNWIND	0x40
#define PITRACE_UNWIND_TICK	0x7fffffff	/* u32 pid, tid, flags; bytes: N x u64 PC */
#define PITRACE_UNWIND_TRUNCATED	1	/* flags: cut at the depth limit */
#define PITRACE_UNWIND_KERN_SHIFT	16	/* flags >> this: kernel PCs (first) */
#define PITRACE_MAX_STACK	127	/* the default and largest depth limit */
/*
 * With dispatch and callstack enabled, a DISPATCH record whose prev thread
 * left the CPU not runnable (prev_state & 0xff != 0, not exiting) is
 * followed in the same CPU's trace buffer by UNWIND_SWITCH, with the same
 * time stamp: the stack of prev as it switched out, kernel frames (the
 * scheduler's first, from the tracepoint's caller) then user frames (the
 * frame-pointer walk taken at schedule()'s entry, where no lock is held;
 * the user PC alone where that was not taken: PITRACE_FEAT_KPROBE_SCHED
 * says whether it can be); layout as UNWIND (PITRACE_FEAT_SCHED).
 */
#define PITRACE_UNWIND_SWITCH	0x7ffffffe	/* u32 pid, tid, flags; bytes: N x u64 PC */

/* MAJOR_DISPATCH minors */
/*
 * DISPATCH prev_state: prev's task state as the scheduler read it (raw
 * TASK_* bits), with its exit state (EXIT_ZOMBIE 0x20, EXIT_DEAD 0x10)
 * added for an exiting thread, and 0 for a preemption.  WAKEUP
 * (PITRACE_FEAT_SCHED, with dispatch): sched_wakeup and sched_wakeup_new;
 * the waker is the thread running where the wake-up ran (0 for the idle
 * task).
 */
#define PITRACE_DISPATCH_SWITCH	1	/* u32 prev_pid, prev_tid, next_pid, next_tid, prev_state */
#define PITRACE_DISPATCH_WAKEUP	2	/* u32 pid, tid, target_cpu, waker_pid, waker_tid, flags */
#define PITRACE_WAKEUP_NEW	1	/* WAKEUP flags: sched_wakeup_new */

/* MAJOR_INTERRUPT minors (exit = entry | PITRACE_EXIT_BIT); u32 irq/vector */
#define PITRACE_INTR_HARD	1
#define PITRACE_INTR_SOFT	2

#define PITRACE_FORK_THREAD	1	/* MTE_FORK flags: a thread (CLONE_THREAD) */
#define PITRACE_LOST_FULL	1	/* LOST reason: no free segment */
#define PITRACE_LOST_OVERWRITE	2	/* LOST reason: wrap mode overwrote */

/*
 * Record payloads: the fixed fields after the header, packed, in the order
 * and widths of the spec table format/trace/codes.go (the cgo test of
 * libperfutil/kmodbackend checks every struct against it).  A STRING
 * record's NUL-terminated string follows the fixed fields.  The module
 * writes records only through these structs.
 */
#define PITRACE_PACKED __attribute__((__packed__))

struct pitrace_rec_time_high {	/* SYS_TIME_HIGH */
	__u32 high;
} PITRACE_PACKED;

struct pitrace_rec_sysinfo {	/* SYS_INFO, then string uname */
	__u32 ncpus;
	__u32 clock_id;
	__u64 clock_hz;
	__u64 wall_ns;
} PITRACE_PACKED;

struct pitrace_rec_lost {	/* SYS_LOST */
	__u64 count;
	__u32 reason;		/* PITRACE_LOST_* */
} PITRACE_PACKED;

struct pitrace_rec_trace_on {	/* SYS_TRACE_ON */
	__u32 majors_lo;
	__u32 rate_hz;
} PITRACE_PACKED;

struct pitrace_rec_buf_full {	/* SYS_BUF_FULL */
	__u32 mte;		/* 1: the MTE buffer filled */
} PITRACE_PACKED;

struct pitrace_rec_process {	/* MTE_PROCESS, then string name */
	__u32 pid;
	__u32 ppid;
} PITRACE_PACKED;

struct pitrace_rec_fork {	/* MTE_FORK */
	__u32 ppid;
	__u32 ptid;
	__u32 pid;
	__u32 tid;
	__u32 flags;		/* PITRACE_FORK_* */
} PITRACE_PACKED;

struct pitrace_rec_task {	/* MTE_EXEC (string path), MTE_EXIT, MTE_THREAD (string name) */
	__u32 pid;
	__u32 tid;
} PITRACE_PACKED;

struct pitrace_rec_segment {	/* MTE_SEGMENT, then string path */
	__u32 pid;
	__u64 start;
	__u64 size;
	__u64 offset;
	__u32 prot;		/* PITRACE_PROT_* */
} PITRACE_PACKED;

struct pitrace_rec_unmap {	/* MTE_UNMAP */
	__u32 pid;
	__u64 start;
	__u64 size;
} PITRACE_PACKED;

/*
 * MTE_FILE: the file an MTE_SEGMENT of a file maps, right after that
 * record: its device and inode when it was mapped, so a reader can tell
 * the file at the path later from the one traced (a package upgrade puts
 * a new file there and may keep the old modification time).
 */
struct pitrace_rec_file {	/* MTE_FILE */
	__u32 pid;
	__u64 start;
	__u32 dev_major;
	__u32 dev_minor;
	__u64 ino;
} PITRACE_PACKED;

struct pitrace_rec_tprof_tick {	/* TPROF_TICK */
	__u32 pid;
	__u32 tid;
	__u64 ip;
	__u32 flags;		/* PITRACE_TPROF_KERNEL */
} PITRACE_PACKED;

struct pitrace_rec_tprof_event {	/* TPROF_EVENT: a tick and the event */
	__u32 pid;
	__u32 tid;
	__u64 ip;
	__u32 flags;
	__u32 event;
} PITRACE_PACKED;

struct pitrace_rec_dispatch {	/* DISPATCH_SWITCH */
	__u32 prev_pid;
	__u32 prev_tid;
	__u32 next_pid;
	__u32 next_tid;
	__u32 prev_state;
} PITRACE_PACKED;

struct pitrace_rec_wakeup {	/* DISPATCH_WAKEUP */
	__u32 pid;
	__u32 tid;
	__u32 target_cpu;
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 flags;		/* PITRACE_WAKEUP_NEW */
} PITRACE_PACKED;

struct pitrace_rec_irq {	/* INTR_HARD, INTR_HARD | EXIT_BIT */
	__u32 irq;
} PITRACE_PACKED;

struct pitrace_rec_softirq {	/* INTR_SOFT, INTR_SOFT | EXIT_BIT */
	__u32 vec;
} PITRACE_PACKED;

struct pitrace_rec_unwind {	/* UNWIND, then the PCs (layout BYTES) */
	__u32 pid;
	__u32 tid;
	__u32 flags;		/* PITRACE_UNWIND_TRUNCATED | kernel << KERN_SHIFT */
} PITRACE_PACKED;

/* MTE_SEGMENT prot bits */
#define PITRACE_PROT_READ	1
#define PITRACE_PROT_WRITE	2
#define PITRACE_PROT_EXEC	4

/* ---- modes and states ---------------------------------------------------- */

#define PITRACE_MODE_NORMAL	0	/* stop when a buffer fills */
#define PITRACE_MODE_WRAP	1	/* trace overwrites its oldest segment; MTE drained */
#define PITRACE_MODE_CONT	2	/* every full segment is handed to the drainer */

#define PITRACE_STATE_FREE	0	/* no buffers */
#define PITRACE_STATE_INIT	1	/* buffers allocated, never on */
#define PITRACE_STATE_ON	2
#define PITRACE_STATE_OFF	3	/* stopped; data held until get, init or free */

/* ---- mapped buffers ------------------------------------------------------- */

/*
 * Each CPU has two buffers: kind 0 (trace) and kind 1 (MTE).  mmap() of
 * /dev/pitrace at offset PITRACE_MMAP_OFFSET(cpu, kind), read-only
 * (PROT_READ, MAP_SHARED), maps one buffer: a struct pitrace_buf_hdr at the
 * start, and the segments from hdr.data_offset on (segment i at
 * data_offset + i * seg_size).  The length must not exceed
 * data_offset + nseg * seg_size (see struct pitrace_status).
 *
 * A segment is FREE, FILLING (the writer's current one) or DONE (complete,
 * ordered by seq).  Every segment starts with a TIME_HIGH record and holds
 * whole records; unused space is zero.  In cont mode (and for MTE in wrap
 * mode) user space copies DONE segments out and gives them back with
 * PITRACE_IOC_RELEASE.  At off the writer's partial segments become DONE.
 */
#define PITRACE_KIND_TRACE	0
#define PITRACE_KIND_MTE	1
#define PITRACE_MMAP_SHIFT	32
#define PITRACE_MMAP_OFFSET(cpu, kind) \
	((((__u64)(cpu) * 2) + (kind)) << PITRACE_MMAP_SHIFT)

#define PITRACE_SEGMENTS	16	/* segments per buffer when the size allows */
#define PITRACE_MIN_SEGMENT	1024
#define PITRACE_MIN_BUF		4096
#define PITRACE_MAX_BUF		(1ULL << 30)	/* per CPU, per buffer */

#define PITRACE_SEG_FREE	0
#define PITRACE_SEG_FILLING	1
#define PITRACE_SEG_DONE	2

struct pitrace_seg {
	__u32 state;		/* PITRACE_SEG_* */
	__u32 used;		/* bytes of records in the segment */
	__u64 seq;		/* completion order (DONE segments) */
	__u64 records;		/* records in the segment */
};

#define PITRACE_BUF_MAGIC	0x46424950u	/* "PIBF" */
#define PITRACE_BUF_FULL	1		/* normal mode: this buffer filled */

struct pitrace_buf_hdr {
	__u32 magic;
	__u32 abi;
	__u32 cpu;
	__u32 kind;
	__u32 mode;
	__u32 seg_size;
	__u32 nseg;
	__u32 flags;		/* PITRACE_BUF_FULL */
	__u64 data_offset;	/* offset of segment 0 from the mapping's start */
	__u64 records;		/* records held or drained (written minus overwritten) */
	__u64 lost;		/* records lost (no room, or overwritten in wrap mode) */
	__u64 bytes;		/* bytes of records written */
	__u64 pending;		/* lost records not yet reported by a LOST record */
	__u64 next_seq;
	__u32 cur;		/* current (FILLING) segment, or PITRACE_NO_SEG */
	__u32 reserved;
	struct pitrace_seg seg[PITRACE_SEGMENTS];
};

#define PITRACE_NO_SEG		0xffffffffu

/* ---- ioctl arguments -------------------------------------------------------- */

/* INIT: allocate the per-CPU buffers (drops earlier ones); not while on. */
struct pitrace_init_arg {
	__u64 trace_size;	/* bytes per CPU, PITRACE_MIN_BUF..PITRACE_MAX_BUF */
	__u64 mte_size;		/* bytes per CPU */
	__u32 mode;		/* PITRACE_MODE_* */
	__u32 reserved;		/* must be 0 */
};

#define PITRACE_PATH_MAX	256

/* SETMODE: the mode and the stream file (kept for user space, not opened). */
struct pitrace_mode_arg {
	__u32 mode;
	__u32 reserved;		/* must be 0 */
	char path[PITRACE_PATH_MAX];	/* NUL-terminated; "" for normal mode */
};

/*
 * ENABLE / DISABLE: major codes 0..255 as a bit mask (SYS and MTE always on).
 * stack_depth (ENABLE only, see "call stacks" below): the call-stack depth
 * limit, 1..PITRACE_MAX_STACK frames; 0 leaves it as it is.  It came with
 * PITRACE_FEAT_CALLSTACK: the ABI 1 struct (PITRACE_MAJORS_SIZE_V1) ends
 * before it.
 */
struct pitrace_majors {
	__u64 mask[4];
	__u32 stack_depth;
	__u32 reserved;		/* must be 0 */
};

#define PITRACE_MAX_RATE	100000
#define PITRACE_EVENT_NAME	32

/* SETRATE: time-based tprof at hz, or event-based every hz events. */
struct pitrace_rate_arg {
	__u32 hz;		/* 1..PITRACE_MAX_RATE */
	__u32 event_type;	/* perf_event_attr.type; with event[0] != 0 */
	__u64 event_config;	/* perf_event_attr.config */
	char event[PITRACE_EVENT_NAME];	/* "" for time-based sampling */
};

#define PITRACE_ST_STOPPED_FULL	1	/* normal mode: a buffer filled, tracing stopped */
#define PITRACE_ST_UNSAVED	2	/* the buffers hold a trace not yet written */
#define PITRACE_ST_EVENT	4	/* event-based tprof */

struct pitrace_status {
	__u32 abi;
	__u32 state;		/* PITRACE_STATE_* */
	__u32 mode;
	__u32 flags;		/* PITRACE_ST_* */
	__u64 trace_size;
	__u64 mte_size;
	__u32 trace_seg_size;
	__u32 trace_nseg;
	__u32 mte_seg_size;
	__u32 mte_nseg;
	__u32 ncpus;		/* buffers exist for CPUs 0..ncpus-1 */
	__u32 rate_hz;
	__u32 event_type;
	__u32 drainer_pid;	/* the process draining wrap/cont buffers, or 0 */
	__u64 event_config;
	__u64 start_wall_ns;	/* CLOCK_REALTIME at the last on */
	__u64 start_clock_ns;	/* CLOCK_MONOTONIC at the last on */
	__u64 enabled[4];	/* enabled majors 0..255 */
	__u64 on_count;		/* number of times tracing was turned on */
	__u64 map_size_trace;	/* bytes to mmap for one trace buffer */
	__u64 map_size_mte;
	char event[PITRACE_EVENT_NAME];
	char path[PITRACE_PATH_MAX];
};

#define PITRACE_CPU_TRACE_FULL	1
#define PITRACE_CPU_MTE_FULL	2

struct pitrace_cpu_status {
	__u32 cpu;		/* in */
	__u32 flags;		/* PITRACE_CPU_* */
	__u64 records;
	__u64 lost;
	__u64 bytes;
	__u64 used;		/* bytes held */
	__u64 mte_records;
	__u64 mte_lost;
	__u64 mte_bytes;
	__u64 mte_used;
};

#define PITRACE_HOOK_MAX_WORDS	64
#define PITRACE_HOOK_MAX_BYTES	512

/*
 * HOOK (TraceHook): a user record in the calling CPU's trace buffer.
 * major >= PITRACE_MAJOR_USER_FIRST.  With len == 0 the record has layout
 * WORDS (the words); otherwise BYTES (the words, a u32 byte count, the bytes).
 */
struct pitrace_hook_arg {
	__u16 major;
	__u16 reserved;		/* must be 0 */
	__u32 minor;
	__u32 nwords;		/* <= PITRACE_HOOK_MAX_WORDS */
	__u32 len;		/* <= PITRACE_HOOK_MAX_BYTES */
	__u64 words;		/* user pointer to nwords __u32 */
	__u64 data;		/* user pointer to len bytes */
};

#define PITRACE_FEAT_KPROBE_EXIT	1	/* segments described at process exit */
#define PITRACE_FEAT_KPROBE_EXEC	2	/* old image described at exec */
#define PITRACE_FEAT_UNMAP		4	/* munmap of executable segments seen */
#define PITRACE_FEAT_MMAP		8	/* executable segments seen as they are mapped */
#define PITRACE_FEAT_KPROBE_SCHED	16	/* UNWIND_SWITCH has the user stack (kprobe at schedule) */
/* What the module's ABI offers (always set, bits 16 and up): */
#define PITRACE_FEAT_SIZED_IOCTL	(1u << 16)	/* the size scheme above */
#define PITRACE_FEAT_PTT_INHERIT	(1u << 17)	/* watched threads' new threads get areas */
#define PITRACE_FEAT_CPU_HOTPLUG	(1u << 18)	/* tprof and PTT follow CPUs */
#define PITRACE_FEAT_EXEC_PATH		(1u << 19)	/* MTE_EXEC: the path the kernel found */
#define PITRACE_FEAT_BUF_FULL_REC	(1u << 20)	/* normal mode: a BUFFER_FULL record */
#define PITRACE_FEAT_PTT_SYSCALLS	(1u << 21)	/* PTT_INIT's PITRACE_PTT_INIT_SYSCALLS */
#define PITRACE_FEAT_PTT_FAULTS		(1u << 22)	/* pitrace_ptt_sys's faults and fault_time */
#define PITRACE_FEAT_PTT_RESUME		(1u << 23)	/* pitrace_ptt_sys's resumes and resume_time */
#define PITRACE_FEAT_CALLSTACK		(1u << 24)	/* UNWIND records; ENABLE's stack_depth */
#define PITRACE_FEAT_ITRACE		(1u << 25)	/* ITRACE_ON / ITRACE_OFF */
#define PITRACE_FEAT_JIT		(1u << 26)	/* JIT (JIT_LOAD/UNLOAD/METHOD) */
#define PITRACE_FEAT_ITRACE_KERNEL	(1u << 27)	/* ITRACE_INTERRUPT/_FAULT records, ITRACE_STATS */
#define PITRACE_FEAT_ITRACE_BLOCK	(1u << 29)	/* block-stepping, ITRACE_ON's STEP_* flags, ITRACE_STATS' block fields */
#define PITRACE_FEAT_SCHED		(1u << 30)	/* WAKEUP and UNWIND_SWITCH records */
#define PITRACE_FEAT_ABI \
	(PITRACE_FEAT_SIZED_IOCTL | PITRACE_FEAT_PTT_INHERIT | \
	 PITRACE_FEAT_CPU_HOTPLUG | PITRACE_FEAT_EXEC_PATH | \
	 PITRACE_FEAT_BUF_FULL_REC | PITRACE_FEAT_PTT_SYSCALLS | \
	 PITRACE_FEAT_PTT_FAULTS | PITRACE_FEAT_PTT_RESUME | \
	 PITRACE_FEAT_CALLSTACK | \
	 PITRACE_FEAT_ITRACE | PITRACE_FEAT_JIT | PITRACE_FEAT_METHOD | \
	 PITRACE_FEAT_ITRACE_KERNEL | PITRACE_FEAT_ITRACE_BLOCK | \
	 PITRACE_FEAT_SCHED)

struct pitrace_sysinfo {
	__u32 abi;
	__u32 ncpus;		/* nr_cpu_ids */
	__u32 online;		/* CPUs online at the call */
	__u32 page_size;
	__u32 clock_id;
	__u32 segments;		/* PITRACE_SEGMENTS */
	__u32 hdr_size;		/* sizeof(struct pitrace_buf_hdr) */
	__u32 features;		/* PITRACE_FEAT_*: kprobe bits known after the first on */
	__u64 min_buf;
	__u64 max_buf;
	__u64 mem_limit;	/* the most all buffers together may take, bytes */
};

/* RELEASE: give a drained DONE segment back (seq must match). */
struct pitrace_release_arg {
	__u32 cpu;
	__u32 kind;
	__u32 seg;
	__u32 reserved;		/* must be 0 */
	__u64 seq;
};

#define PITRACE_BENCH_TPROF	1	/* the tprof sample path */
#define PITRACE_BENCH_MAX	1000000

/*
 * BENCH: run one record path count times while on; cycles is the TSC delta.
 * BENCHMARK ONLY (bench/kmod, scripts/vmtest bench): not a tool interface;
 * it may change or go in any version without a feature bit.
 */
struct pitrace_bench_arg {
	__u32 path;		/* PITRACE_BENCH_* */
	__u32 count;		/* 1..PITRACE_BENCH_MAX */
	__u64 cycles;		/* out */
};

#define PITRACE_IOC_MAGIC	0xE1

/*
 * Sizes and versions.  The size field of an ioctl command number is the
 * size of the caller's argument struct, so a struct may grow at its end
 * (new fields, zero meaning "not used") without breaking either side:
 *   - a caller built with an older, shorter struct passes a smaller size:
 *     the module zero-fills the fields it did not pass;
 *   - a caller built with a newer, longer struct passes a larger size: the
 *     module accepts it if the bytes it does not know are zero (E2BIG
 *     otherwise) and zeroes them in what it returns;
 *   - a size below the first version's (PITRACE_*_SIZE_V1) is not an ioctl
 *     of this module (ENOTTY).
 * HOOK, the record path, takes exactly PITRACE_HOOK_ARG_SIZE_V1 (a new
 * kind of hook would be a new ioctl).
 * PITRACE_IOC_SYSINFO reports the module's ABI version and its
 * PITRACE_ABI_F_* feature bits; a tool checks the bits it needs instead of
 * guessing from the version.  The version changes only for an incompatible
 * change, which this scheme is there to avoid.
 */
#define PITRACE_INIT_ARG_SIZE_V1	24
#define PITRACE_MAJORS_SIZE_V1		32
#define PITRACE_MODE_ARG_SIZE_V1	264
#define PITRACE_RATE_ARG_SIZE_V1	48
#define PITRACE_STATUS_SIZE_V1		432
#define PITRACE_CPU_STATUS_SIZE_V1	72
#define PITRACE_HOOK_ARG_SIZE_V1	32
#define PITRACE_SYSINFO_SIZE_V1		56
#define PITRACE_RELEASE_ARG_SIZE_V1	24
#define PITRACE_BENCH_ARG_SIZE_V1	16
#define PITRACE_PTT_INIT_SIZE_V1	136
#define PITRACE_PTT_STATUS_SIZE_V1	5144
#define PITRACE_PTT_WATCH_SIZE_V1	8
#define PITRACE_PTT_READ_SIZE_V1	24

#define PITRACE_IOC_INIT	_IOW(PITRACE_IOC_MAGIC, 1, struct pitrace_init_arg)
#define PITRACE_IOC_ENABLE	_IOW(PITRACE_IOC_MAGIC, 2, struct pitrace_majors)
#define PITRACE_IOC_DISABLE	_IOW(PITRACE_IOC_MAGIC, 3, struct pitrace_majors)
#define PITRACE_IOC_SETMODE	_IOW(PITRACE_IOC_MAGIC, 4, struct pitrace_mode_arg)
#define PITRACE_IOC_SETRATE	_IOW(PITRACE_IOC_MAGIC, 5, struct pitrace_rate_arg)
#define PITRACE_IOC_ON		_IO(PITRACE_IOC_MAGIC, 6)
#define PITRACE_IOC_OFF		_IO(PITRACE_IOC_MAGIC, 7)
#define PITRACE_IOC_STATUS	_IOR(PITRACE_IOC_MAGIC, 8, struct pitrace_status)
#define PITRACE_IOC_CPU_STATUS	_IOWR(PITRACE_IOC_MAGIC, 9, struct pitrace_cpu_status)
#define PITRACE_IOC_HOOK	_IOW(PITRACE_IOC_MAGIC, 10, struct pitrace_hook_arg)
#define PITRACE_IOC_SYSINFO	_IOR(PITRACE_IOC_MAGIC, 11, struct pitrace_sysinfo)
#define PITRACE_IOC_FREE	_IO(PITRACE_IOC_MAGIC, 12)
#define PITRACE_IOC_RELEASE	_IOW(PITRACE_IOC_MAGIC, 13, struct pitrace_release_arg)
#define PITRACE_IOC_DRAIN	_IO(PITRACE_IOC_MAGIC, 14)
#define PITRACE_IOC_SAVED	_IO(PITRACE_IOC_MAGIC, 15)
#define PITRACE_IOC_BENCH	_IOWR(PITRACE_IOC_MAGIC, 16, struct pitrace_bench_arg)	/* benchmark only */

/* ---- PTT: per-thread metric virtualization (PI Figure 5) ----------------- */

/*
 * PTT_INIT on an open /dev/pitrace selects the metrics of that file (up to
 * eight: the TSC and any counter perf_event can create on a CPU, software
 * or hardware).  Each thread then maps its own work area with
 *   mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, PITRACE_PTT_MMAP_OFFSET)
 * (the area of the calling thread; a second map by the same thread fails
 * with EBUSY).  The kernel keeps the area current at every dispatch and
 * around every interrupt it sees, so that user space reads a per-thread
 * metric without a system call and without a branch on the metric kind:
 *
 *   do {
 *           s = area->seq;          (retry while odd)
 *           v = area->accum[i] + ((rdtsc() - area->last[i]) & area->live[i]);
 *   } while (area->seq != s);
 *
 * live[i] is all ones for the TSC (the value is current to the instant of
 * the read) and 0 for a perf counter: the module reads perf counters at
 * every state change (dispatch, interrupt entry and exit), so a perf
 * metric in the area is current to the thread's last state change.
 *
 * PTT_WATCH adds an area the module keeps for another thread (or the
 * caller) without a mapping: a caller that may ptrace-read the thread
 * (PTRACE_MODE_READ_REALCREDS: same real uid/gid and a dumpable target,
 * or CAP_SYS_PTRACE; security modules are not asked).  Threads the
 * watched thread creates get their own area of the same file at creation.  PTT_READ copies a snapshot of every area of the file (mapped
 * and watched, alive and dead) for tools such as `ptt dump`.
 *
 * PTT_TERM marks every area of the file dead (dead = 1: reads must fail)
 * and stops updating them.  Areas also stop at thread exit, munmap, close
 * of the file and rmmod.
 *
 * PTT_INIT with PITRACE_PTT_INIT_SYSCALLS (PITRACE_FEAT_PTT_SYSCALLS) also
 * measures the system calls of the file's threads (struct pitrace_ptt_sys,
 * in the area's page): for each metric, sys_time[i] is the part of
 * accum[i] the thread spent between the sys_enter and sys_exit tracepoints
 * of its system calls (interrupts and other threads already left out, as
 * everywhere), and syscalls counts the system calls that reached sys_exit.  The
 * thread's metric less sys_time is its time outside those windows; the
 * kernel's entry and exit code around each window (a constant number of
 * instructions per call) stays in it.  The syscall tracepoints, once
 * attached for such a file, stay attached until rmmod: every system call
 * of the machine then passes the module's probe.
 *
 * With PITRACE_FEAT_PTT_FAULTS the same flag also measures the page faults
 * the file's threads take in user mode: fault_time[i] is the part of
 * accum[i] from the page_fault_user tracepoint to the return of the
 * fault's last handle_mm_fault (a kretprobe; a retried fault runs it more
 * than once), faults counts the faults that reached that return.  A fault
 * handle_mm_fault does not serve (a bad address: the signal's way) is in
 * neither.  As for system calls, the kernel's exception entry up to the
 * tracepoint and its way back to user mode after the return stay in the
 * metric (a constant number of instructions per fault).  faults_on says
 * whether the probes are there (the kernel may refuse the kretprobe); once
 * attached they stay until rmmod: every user page fault of the machine
 * then passes the module's probes.
 *
 * With PITRACE_FEAT_PTT_RESUME the same flag also measures the rseq update
 * the kernel makes for the thread on its way back to user mode after it
 * was switched out or migrated (__rseq_handle_notify_resume, run from the
 * exit-to-user work after sys_exit or after an interrupt's exit, for a
 * thread that registered an rseq area): resume_time[i] is the part of
 * accum[i] inside those calls and inside the FPU register reload that
 * follows on the same way out (switch_fpu_return, a second kretprobe;
 * what it does depends on what ran in between), resumes their number.  The signal
 * delivery's call (with a signal to set up) is not one of them: it stays
 * in the metric with the rest of the delivery.  The exit-to-user loop
 * around the call and the probes' own way in and out stay in the metric
 * (a constant number of instructions per resume).
 * resumes_on says whether the probe is there (a kernel without rseq or
 * one that refuses the kretprobe leaves it 0); once attached it stays
 * until rmmod.
 *
 * Perf counters are per-CPU kernel counters shared by all files that ask
 * for the same (type, config); at most PITRACE_PTT_MAX_SLOTS distinct
 * counters exist at once (EBUSY beyond).  A counter the machine lacks
 * (no hardware PMU) fails PTT_INIT with ENOENT, EOPNOTSUPP or ENODEV.
 */
#define PITRACE_PTT_MAX_METRICS	8
#define PITRACE_PTT_MAX_SLOTS	8	/* distinct perf counters, all files */
#define PITRACE_PTT_TSC		0	/* the time stamp counter (rdtsc in user space) */
#define PITRACE_PTT_PERF	1	/* a per-CPU perf_event counter (type, config) */

#define PITRACE_PTT_INIT_SYSCALLS	(1u << 0)	/* pitrace_ptt_init.flags: pitrace_ptt_sys */

#define PITRACE_PTT_MMAP_OFFSET	(1ULL << 47)	/* far beyond PITRACE_MMAP_OFFSET() */

struct pitrace_ptt_metric {
	__u32 kind;		/* PITRACE_PTT_* */
	__u32 type;		/* perf_event_attr.type (PERF); 0 for TSC */
	__u64 config;		/* perf_event_attr.config (PERF); 0 for TSC */
};

struct pitrace_ptt_init {
	__u32 nmetrics;		/* 1..PITRACE_PTT_MAX_METRICS */
	__u32 flags;		/* PITRACE_PTT_INIT_* */
	struct pitrace_ptt_metric m[PITRACE_PTT_MAX_METRICS];
};

/* The work area: one page, read-only in user space. */
struct pitrace_ptt_area {
	__u32 seq;		/* odd while the kernel updates the area */
	__u32 cpu;		/* CPU of the last dispatch */
	__u32 dispatches;	/* times the thread was dispatched */
	__u32 interrupts;	/* outermost interrupts taken while it ran */
	__u32 nmetrics;
	__u32 dead;		/* non-zero: stopped, reads must fail (PITRACE_PTT_DEAD_*) */
	__u64 accum[PITRACE_PTT_MAX_METRICS];	/* totals to the last state change */
	__u64 last[PITRACE_PTT_MAX_METRICS];	/* counters at the last state change */
	__u64 intr_time[PITRACE_PTT_MAX_METRICS]; /* metric spent in interrupts (excluded) */
	__u64 live[PITRACE_PTT_MAX_METRICS];	/* ~0: TSC, add rdtsc() - last; 0: perf */
};

/*
 * PITRACE_PTT_INIT_SYSCALLS: in the same page, at PITRACE_PTT_SYS_OFFSET
 * (zero otherwise, and from modules without PITRACE_FEAT_PTT_SYSCALLS).
 * Changed only in the thread's own kernel work (system calls, page faults,
 * the rseq update on the way back to user mode), so the
 * thread reads it in user mode without the sequence count; PTT_READ's
 * snapshot does not carry it.
 */
#define PITRACE_PTT_SYS_OFFSET	2048
struct pitrace_ptt_sys {
	__u32 sys_on;		/* 1: syscalls and sys_time are kept */
	__u32 syscalls;		/* system calls ended (sys_exit) */
	__u64 sys_time[PITRACE_PTT_MAX_METRICS]; /* of accum: inside system calls */
	/* PITRACE_FEAT_PTT_FAULTS (zero from older modules): */
	__u32 faults_on;	/* 1: faults and fault_time are kept */
	__u32 faults;		/* user-mode page faults handled (handle_mm_fault) */
	__u64 fault_time[PITRACE_PTT_MAX_METRICS]; /* of accum: inside those faults */
	/* PITRACE_FEAT_PTT_RESUME (zero from older modules): */
	__u32 resumes_on;	/* 1: resumes and resume_time are kept */
	__u32 resumes;		/* rseq updates on the way to user mode */
	__u64 resume_time[PITRACE_PTT_MAX_METRICS]; /* of accum: inside those updates */
};

/*
 * Why an area stopped (its dead field): PTT_TERM, close, munmap or the
 * thread's exit; or an exec of the thread that gave it rights its watcher
 * may lack, or left it not dumpable (as PITRACE_ITRACE_END_EXEC): the
 * counts end at that exec.
 */
#define PITRACE_PTT_DEAD_STOPPED	1
#define PITRACE_PTT_DEAD_EXEC		2

/* Interrupt tracepoint pairs PTT hooks (pitrace_ptt_status.hooks bits). */
#define PITRACE_PTT_HOOK_IRQ		(1u << 0)	/* irq_handler_entry/exit */
#define PITRACE_PTT_HOOK_SOFTIRQ	(1u << 1)	/* softirq_entry/exit */
#define PITRACE_PTT_HOOK_TIMER		(1u << 2)	/* local_timer_entry/exit */
#define PITRACE_PTT_HOOK_CALL_FUNC	(1u << 3)	/* call_function_entry/exit */
#define PITRACE_PTT_HOOK_CALL_FUNC1	(1u << 4)	/* call_function_single_entry/exit */
#define PITRACE_PTT_HOOK_RESCHED	(1u << 5)	/* reschedule_entry/exit */
#define PITRACE_PTT_HOOK_IRQ_WORK	(1u << 6)	/* irq_work_entry/exit */
#define PITRACE_PTT_HOOK_PLATFORM	(1u << 7)	/* x86_platform_ipi_entry/exit */
#define PITRACE_PTT_HOOK_SPURIOUS	(1u << 8)	/* spurious_apic_entry/exit */
#define PITRACE_PTT_HOOK_ERROR		(1u << 9)	/* error_apic_entry/exit */
#define PITRACE_PTT_HOOK_THERMAL	(1u << 10)	/* thermal_apic_entry/exit */
#define PITRACE_PTT_HOOK_THRESHOLD	(1u << 11)	/* threshold_apic_entry/exit */
#define PITRACE_PTT_HOOK_DEFERRED	(1u << 12)	/* deferred_error_apic_entry/exit */
#define PITRACE_PTT_HOOK_SYSCALL	(1u << 13)	/* sys_enter/exit (PITRACE_PTT_INIT_SYSCALLS) */
#define PITRACE_PTT_HOOK_FAULT		(1u << 14)	/* page_fault_user + handle_mm_fault kretprobe (the same flag) */
#define PITRACE_PTT_HOOK_RESUME		(1u << 15)	/* __rseq_handle_notify_resume kretprobe (the same flag) */

#define PITRACE_PTT_STATUS_CPUS	64

/*
 * One CPU's interrupt bucket: outermost interrupts seen by PTT and each
 * metric of the calling file spent in them (val[i] for the file's metric
 * i; tsc is the TSC whatever the file's metrics).
 */
struct pitrace_ptt_bucket {
	__u64 interrupts;	/* outermost interrupts */
	__u64 tsc;		/* TSC cycles spent in them */
	__u64 val[PITRACE_PTT_MAX_METRICS];
};

/*
 * PTT_STATUS: buckets of CPUs first_cpu .. first_cpu + ncpus - 1 (call
 * again with a larger first_cpu for more than PITRACE_PTT_STATUS_CPUS).
 */
struct pitrace_ptt_status {
	__u32 first_cpu;	/* in: < nr_cpu_ids */
	__u32 ncpus;		/* out: buckets filled */
	__u32 nr_cpus;		/* out: nr_cpu_ids */
	__u32 hooks;		/* out: PITRACE_PTT_HOOK_* attached */
	__u32 nareas;		/* out: areas being updated (all files) */
	__u32 nmetrics;		/* out: this file's metrics, 0 before PTT_INIT */
	struct pitrace_ptt_bucket cpu[PITRACE_PTT_STATUS_CPUS];
};

/* PTT_WATCH: keep an area for thread tid (in the caller's pid namespace). */
struct pitrace_ptt_watch {
	__s32 tid;
	__u32 flags;		/* must be 0 */
};

/* One area in a PTT_READ snapshot. */
struct pitrace_ptt_thread {
	__s32 tid;		/* in the caller's pid namespace; 0 if gone from it */
	__s32 pid;		/* its process (thread group) */
	char comm[16];		/* name when the area was made */
	__u32 running;		/* on a CPU at the snapshot: accum includes up to then */
	__u32 mapped;		/* 1: mapped by the thread, 0: PTT_WATCH */
	struct pitrace_ptt_area a;
};

/* PTT_READ: up to max areas of this file into buf (an array). */
struct pitrace_ptt_read {
	__u32 max;		/* in: entries buf holds */
	__u32 n;		/* out: entries written */
	__u32 total;		/* out: areas of the file (> n: call with more) */
	__u32 pad;
	__u64 buf;		/* in: struct pitrace_ptt_thread * */
};

#define PITRACE_IOC_PTT_INIT	_IOW(PITRACE_IOC_MAGIC, 17, struct pitrace_ptt_init)
#define PITRACE_IOC_PTT_TERM	_IO(PITRACE_IOC_MAGIC, 18)
#define PITRACE_IOC_PTT_STATUS	_IOWR(PITRACE_IOC_MAGIC, 19, struct pitrace_ptt_status)
#define PITRACE_IOC_PTT_WATCH	_IOW(PITRACE_IOC_MAGIC, 20, struct pitrace_ptt_watch)
#define PITRACE_IOC_PTT_READ	_IOWR(PITRACE_IOC_MAGIC, 21, struct pitrace_ptt_read)

/* ---- ITrace: single-step instruction tracing (pitrace_itrace.c) ---------- */

/*
 * ITRACE_ON single-steps the selected threads (trap flag, a DIE_DEBUG
 * notifier) and writes ITrace records (majors 0x20/0x21,
 * docs/trace-format.md) into the per-CPU trace buffers; tracing must be on.
 * Selection: the calling thread (PITRACE_ITRACE_SELF: ITraceOn), the
 * processes in pids (all their threads; at their next exec with
 * PITRACE_ITRACE_AT_EXEC), every process with a pid >= pids_from (not the
 * caller's).  Threads a traced thread creates are traced; forked children
 * only with PITRACE_ITRACE_FOLLOW.  The caller must be allowed to PTT_WATCH
 * the process (the same rule).  ITRACE_ON is all or nothing: a process of
 * pids that does not exist (ESRCH), is not allowed (EPERM) or has no thread
 * left to trace (ESRCH), or no memory, fails the call with nothing of it
 * traced.  pids_from takes every such process (none left out for their
 * number; those not allowed or exiting are counted in skipped); EAGAIN if
 * processes keep appearing faster than they are counted.  ITRACE_OFF
 * stops the selected threads (SELF, pids) or, with neither, every traced
 * thread; tracing off does too.
 */
#define PITRACE_ITRACE_SELF	1
#define PITRACE_ITRACE_FOLLOW	2
#define PITRACE_ITRACE_AT_EXEC	4
/*
 * How traps are taken (PITRACE_FEAT_ITRACE_BLOCK; neither: block-step, a
 * trap per taken branch (BTF), where the CPU honours it, blocks the module
 * cannot decode exactly single-stepped; single-step where BTF is ignored).
 * STEP_SINGLE: always single-step.  STEP_VERIFY: single-step and run the
 * block decoder at each taken branch as if block-stepping, counting the
 * blocks checked and the disagreements (ITRACE_STATS).  Not both.
 */
#define PITRACE_ITRACE_STEP_SINGLE	8
#define PITRACE_ITRACE_STEP_VERIFY	16
#define PITRACE_ITRACE_MAX_PIDS	1024

struct pitrace_itrace_on {
	__u32 flags;		/* PITRACE_ITRACE_* */
	__u32 npids;		/* entries at pids, <= PITRACE_ITRACE_MAX_PIDS */
	__s32 pids_from;	/* > 0: every process with pid >= pids_from */
	__u32 threads;		/* out: threads selected (or processes waiting for exec) */
	__u64 pids;		/* user pointer to npids __s32 */
	__u32 skipped;		/* out: processes left out (not allowed, kernel threads) */
	__u32 reserved;		/* must be 0 */
};

struct pitrace_itrace_off {
	__u32 flags;		/* PITRACE_ITRACE_SELF */
	__u32 npids;
	__u64 pids;		/* user pointer to npids __s32 */
	__u32 threads;		/* out: threads stopped */
	__u32 reserved;		/* must be 0 */
	__u64 instructions;	/* out: instructions the stopped threads ran traced */
	__u64 records;		/* out: ITrace records they wrote (in the buffers, or counted lost) */
};

/* ITrace record fields (packed; minors in docs/trace-format.md) */
#define PITRACE_ITRACE_THREAD	0x10
#define PITRACE_ITRACE_START	0x11
#define PITRACE_ITRACE_END	0x12
#define PITRACE_ITRACE_SYSCALL	1	/* major ITRACE_K */
#define PITRACE_ITRACE_SIGNAL	2	/* major ITRACE_K */
#define PITRACE_ITRACE_INTERRUPT	3	/* major ITRACE_K */
#define PITRACE_ITRACE_FAULT	4	/* major ITRACE_K */
#define PITRACE_ITRACE_IRQ_DEVICE	0x100	/* ITRACE_INTERRUPT irq: 0x100 + a device's IRQ number */
#define PITRACE_ITRACE_START_EXEC	1	/* ITRACE_START flags */
#define PITRACE_ITRACE_SIG_HANDLER	1	/* ITRACE_SIGNAL flags */
#define PITRACE_ITRACE_END_EXIT	1
#define PITRACE_ITRACE_END_OFF	2
/*
 * An exec that gives the thread rights its tracer may lack (set-user-ID,
 * set-group-ID, file capabilities, an LSM transition: AT_SECURE), or
 * leaves it not dumpable: ITrace of the thread ends before the new image
 * runs (count: the old image's last block, ending at the exec's syscall).
 * A thread waiting to start (AT_EXEC, or not yet on its way back to user
 * space) that makes such an exec gets this record with count 0 and no
 * ITRACE_START.
 */
#define PITRACE_ITRACE_END_EXEC	3

struct pitrace_rec_itrace_block {	/* ITRACE_U minors 0..6: a taken branch */
	__u64 to;
	__u32 count;
	__u32 from_off;
} PITRACE_PACKED;

struct pitrace_rec_itrace_thread {	/* ITRACE_THREAD */
	__u32 pid;
	__u32 tid;
} PITRACE_PACKED;

struct pitrace_rec_itrace_start {	/* ITRACE_START */
	__u32 pid;
	__u32 tid;
	__u64 ip;
	__u32 flags;
} PITRACE_PACKED;

struct pitrace_rec_itrace_end {		/* ITRACE_END */
	__u32 pid;
	__u32 tid;
	__u32 count;
	__u32 from_off;
	__u32 reason;
} PITRACE_PACKED;

struct pitrace_rec_itrace_syscall {	/* ITRACE_SYSCALL */
	__u64 to;
	__u32 count;
	__u32 from_off;
	__u32 nr;
	__u32 dur_ns;		/* saturates at 2^32-1 */
} PITRACE_PACKED;

struct pitrace_rec_itrace_signal {	/* ITRACE_SIGNAL */
	__u64 to;
	__u32 count;
	__u32 from_off;
	__u32 signo;
	__u32 flags;		/* PITRACE_ITRACE_SIG_HANDLER */
} PITRACE_PACKED;

/*
 * ITRACE_INTERRUPT: an interrupt taken while the thread ran user code;
 * ITRACE_FAULT: a page fault of its user code.  Neither moves control: the
 * block goes on at to.  dur_ns runs from the kernel's entry tracepoint to
 * the module's next point in the thread (its next trap, system call or
 * signal), docs/itrace.md.
 */
struct pitrace_rec_itrace_interrupt {	/* ITRACE_INTERRUPT */
	__u64 to;
	__u32 count;
	__u32 from_off;
	__u32 irq;		/* APIC vector (< 0x100), or PITRACE_ITRACE_IRQ_DEVICE + IRQ */
	__u32 dur_ns;
} PITRACE_PACKED;

struct pitrace_rec_itrace_fault {	/* ITRACE_FAULT */
	__u64 to;
	__u32 count;
	__u32 from_off;
	__u64 addr;		/* the faulting address (cr2) */
	__u32 error;		/* the x86 page-fault error code */
	__u32 dur_ns;
} PITRACE_PACKED;

/*
 * ITRACE_STATS (PITRACE_FEAT_ITRACE_KERNEL): the calling thread's last
 * ITrace, once it ended (ITRACE_OFF of SELF): what the -icount identity
 * "user instructions + kernel instructions = TSC delta" is made of.  TSC
 * ticks read at points the module controls; -ENOENT if the caller's last
 * ITrace is not the last one that ended.
 */
struct pitrace_itrace_stats {
	__u32 tid;		/* out */
	__u32 reserved;
	__u64 instructions;	/* user instructions, as the records count them */
	__u64 start_tsc;	/* the span: from the first trap's notifier entry */
	__u64 end_tsc;		/* to the sys_enter of the thread's own ITRACE_OFF (else its end) */
	__u64 traps;		/* single-step traps handled */
	__u64 trap_tsc;		/* summed from the notifier's entry to its last point */
	__u64 syscalls;		/* ended (not the ITRACE_OFF) */
	__u64 sys_tsc;		/* summed from sys_enter to sys_exit */
	__u64 interrupts;
	__u64 irq_tsc;		/* summed as the records' dur_ns, in TSC ticks */
	__u64 faults;
	__u64 fault_tsc;
	__u64 reps;		/* rep string instructions ended: callgrind's + 1 each */
	/* PITRACE_FEAT_ITRACE_BLOCK (PITRACE_ITRACE_STATS_SIZE_V1 ends above) */
	__u64 blocks;		/* blocks decoded: block-stepped, or checked (STEP_VERIFY) */
	__u64 disagreements;	/* STEP_VERIFY: blocks the decoder ended elsewhere than single-step */
	__u64 block_traps;	/* traps taken with BTF set; STEP_VERIFY: the traps
				 * block-stepping would take (one a block, one an
				 * instruction of a line it cannot decode) */
	__u64 refused;		/* blocks the decoder cannot end exactly: single-stepped */
	__u32 step;		/* the ITrace's PITRACE_ITRACE_STEP_* flags */
	__u32 btf_ignored;	/* 1: BTF was found ignored on this machine (single-stepped) */
	__u64 signals;		/* handlers entered (signal delivery) */
	__u64 sig_tsc;		/* summed from the signal_deliver tracepoint to the
				 * module's point after the handler's frame is set up */
};

#define PITRACE_ITRACE_ON_SIZE_V1	32
#define PITRACE_ITRACE_OFF_SIZE_V1	40

#define PITRACE_IOC_ITRACE_ON	_IOWR(PITRACE_IOC_MAGIC, 24, struct pitrace_itrace_on)
#define PITRACE_IOC_ITRACE_OFF	_IOWR(PITRACE_IOC_MAGIC, 25, struct pitrace_itrace_off)
#define PITRACE_ITRACE_STATS_SIZE_V1	104
#define PITRACE_IOC_ITRACE_STATS	_IOR(PITRACE_IOC_MAGIC, 26, struct pitrace_itrace_stats)

/* ---- JIT code names (JProf's agent, docs/jprof.md) ---------------------- */

/*
 * JIT writes one record of major PITRACE_MAJOR_JITLOAD (0x14) into the calling
 * CPU's trace buffer, the layout pitraced's "jprof" op writes
 * (format/trace/codes.go), with the process and thread of the caller
 * (tgid / pid), never from the argument:
 *   JIT_LOAD    STRING: u32 pid, u32 tid, u64 addr, u64 size; the name
 *   JIT_UNLOAD  FIXED:  u32 pid, u64 addr, u64 size (name_len must be 0)
 *   JIT_METHOD  STRING: u32 pid, u64 id (in size); the name
 * Written only while tracing is on (EINVAL otherwise; ENOSPC in normal mode
 * once stopped full) and when PITRACE_MAJOR_JITLOAD or PITRACE_MAJOR_TPROF is enabled (else
 * nothing is written and the call returns 0).  No lock: the record path.
 * The argument is exactly PITRACE_JIT_ARG_SIZE_V1 bytes (as HOOK's).
 */
#define PITRACE_JIT_LOAD	1
#define PITRACE_JIT_UNLOAD	2
#define PITRACE_JIT_METHOD	3
#define PITRACE_JIT_NAME_MAX	480	/* bytes of a name (not NUL-terminated) */

struct pitrace_jit_arg {
	__u32 minor;		/* PITRACE_JIT_* */
	__u32 name_len;		/* 1..PITRACE_JIT_NAME_MAX; 0 for JIT_UNLOAD */
	__u64 addr;		/* LOAD / UNLOAD: the code's address; METHOD: 0 */
	__u64 size;		/* LOAD / UNLOAD: its size; METHOD: the method id */
	__u64 name;		/* user pointer to name_len bytes */
	__u64 reserved;		/* must be 0 */
};

struct pitrace_rec_jit_load {		/* JIT_LOAD, then the name */
	__u32 pid;
	__u32 tid;
	__u64 addr;
	__u64 size;
} PITRACE_PACKED;

struct pitrace_rec_jit_unload {		/* JIT_UNLOAD */
	__u32 pid;
	__u64 addr;
	__u64 size;
} PITRACE_PACKED;

struct pitrace_rec_jit_method {		/* JIT_METHOD, then the name */
	__u32 pid;
	__u64 id;
} PITRACE_PACKED;

#define PITRACE_JIT_ARG_SIZE_V1	40

#define PITRACE_IOC_JIT		_IOW(PITRACE_IOC_MAGIC, 36, struct pitrace_jit_arg)

/* ---- Java method entry/exit (JProf calltree,trace; docs/jprof.md) -------- */

/*
 * METHOD writes one method entry or exit record of the calling thread into
 * the calling CPU's trace buffer, time-stamped by the module at the call
 * (the trace's clock, never the caller's): major PITRACE_MAJOR_INTERP
 * (interpreted) or PITRACE_MAJOR_JITTED (jitted), minor
 * PITRACE_METHOD_ENTRY or PITRACE_METHOD_EXIT, layout WORDS: u32 pid,
 * tid (tgid / pid of the caller, never from the argument), method id low,
 * high — the record pitraced's "jprof" op writes (analysis/merge reads
 * it; a JIT_METHOD record names the id).  Written only while tracing is
 * on (EINVAL otherwise; ENOSPC in normal mode once stopped full) and when
 * the record's major is enabled (else nothing is written and the call
 * returns 0).  No lock: the record path.  One ioctl per event: each record
 * has the time of its own call.  The argument is exactly
 * PITRACE_METHOD_ARG_SIZE_V1 bytes; reserved fields must be 0.
 */
#define PITRACE_FEAT_METHOD		(1u << 28)	/* METHOD */
#define PITRACE_MAJOR_INTERP	0x30
#define PITRACE_MAJOR_JITTED	0x50
#define PITRACE_METHOD_ENTRY	0x10
#define PITRACE_METHOD_EXIT	(PITRACE_METHOD_ENTRY | PITRACE_EXIT_BIT)

struct pitrace_method_arg {
	__u16 major;		/* PITRACE_MAJOR_INTERP or PITRACE_MAJOR_JITTED */
	__u16 reserved;		/* must be 0 */
	__u32 minor;		/* PITRACE_METHOD_ENTRY or PITRACE_METHOD_EXIT */
	__u64 id;		/* the method id (JIT_METHOD names it) */
	__u64 reserved2;	/* must be 0 */
};

struct pitrace_rec_method {		/* METHOD entry / exit: u32 words */
	__u32 pid;
	__u32 tid;
	__u32 id_lo;
	__u32 id_hi;
} PITRACE_PACKED;

#define PITRACE_METHOD_ARG_SIZE_V1	24

#define PITRACE_IOC_METHOD	_IOW(PITRACE_IOC_MAGIC, 37, struct pitrace_method_arg)

/* ---- MSR access (pitrace_msr.c; the msr tool) ----------------------------- */

/*
 * MSR_READ / MSR_WRITE: one model-specific register on one online CPU.
 * Root only (CAP_SYS_RAWIO): EPERM otherwise.  A register that faults is
 * EIO; an offline or unknown CPU ENXIO.  Writes outside the allowlist of
 * docs/hwevents.md are EACCES unless the module parameter allow_writes
 * is 1 (at load, or root through /sys/module/pitrace/parameters).
 */
struct pitrace_msr {
	__u32 cpu;		/* in */
	__u32 reg;		/* in: the MSR number */
	__u64 value;		/* out (READ), in (WRITE) */
	__u32 flags;		/* must be 0 */
	__u32 reserved;		/* must be 0 */
};

#define PITRACE_IOC_MSR_READ	_IOWR(PITRACE_IOC_MAGIC, 40, struct pitrace_msr)
#define PITRACE_IOC_MSR_WRITE	_IOW(PITRACE_IOC_MAGIC, 41, struct pitrace_msr)

#endif /* _UAPI_PITRACE_H */
