/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hookit.h - the thread file of libhookit (read by analysis/callflow;
 * its record layout is checked there against this header).
 *
 * DIR/hookit-PID-TID.bin (DIR/hookit-PID-TID.N.bin for the Nth thread of
 * an OS thread that ended and was attached again, N >= 2) is a sequence of
 * 64-bit words, little-endian. Its first four are the header (two struct
 * hk_rec): {HK_MAGIC, pid << 32 | tid}, {HK_VERSION, 0}. Then records of
 * one word (a short event) or two (struct hk_rec: tag, then d), told
 * apart by the first word's top bits: 11 is a short event, else the top
 * byte is the record's kind.
 * A record of two words is an event:
 *   tag = kind << 56 | api << 55 | inl << 54 | type << 48 | id
 *     (id: a function address, or the id given to hookit_enter: 48 bits;
 *     type: the method type of hookit_api.h, 0..7, the sequence-minima key;
 *     api: the event came through hookit_enter/exit, its own calibration
 *     path; inl: a hook's entry made from the call site and stack pointer
 *     of the thread's previous hook entry — a function the compiler inlined
 *     into the one entered before, whose hooks gcc calls with the
 *     caller's call site — so that stack repair does not take it for a
 *     sibling called after a longjmp; a marker's id is what << 0 | resets << 8)
 *   d = interval | hook << 32 | spd << 48
 *     interval: this event's early read minus the previous event's late read
 *     (the metric charged to the function on top of the stack), 32 bits;
 *     hook: the previous event's late read minus its early read (the
 *     runtime's own time, charged to no one), 16 bits;
 *     spd: the stack pointer of this event minus the previous one's, in
 *     8-byte units, signed 16 bits (0 and ignored for API events, which
 *     have no stack pointer: they are never closed by stack repair).
 * A short event (one word: an entry or an exit, not an exception exit) is
 *   3 << 62 | exit << 61 | api << 60 | inl << 59 | slot << 48 | spd << 32 | interval
 *   (exit: 1 an exit, 0 an entry; inl, interval and spd as above, hook 0;
 *   with api 1, hookit_enter/exit's, the type in spd's place, bits 32-34)
 * and names its function by its slot, HK_SLOT(fn): the id of the
 * thread's last two-word entry or exit event (hooks' and API's alike)
 * whose id has that slot (the reader keeps the same table). One is
 * written where the slot holds the id, the previous event took no hook
 * time (one metric read per hook) and the values fit.
 * When a value does not fit (and at a thread's first event), a sync
 * (kind HK_SYNC, two records) comes first: {HK_SYNC << 56, the previous
 * event's late read}, {this event's early read, its stack pointer}; the
 * event's own d is then 0. A thread's file ends with a sync whose second
 * record is {HK_END, HK_END} (the first: the last event's late read); a file without it was cut
 * short (a killed process).
 * With the pitrace module (PTT backend kmod) a record {HK_DSIN << 56,
 * dispatches | interrupts << 32} comes before an event when the thread was
 * dispatched or interrupted since the previous event (the counts of the
 * thread's PTT work area): they happened in the interval the event ends.
 * Where the module measures the thread's system calls (info file: sys=in
 * or sys=out) a record {HK_SYS << 56 | calls, metric} comes before an
 * event when the thread made system calls in the interval the event ends:
 * their number and the metric they took (the module's windows plus the
 * calibrated kernel code around each, sys_glue), which the interval holds
 * (sys=in: metric tsc) or does not (sys=out: metric tsc-user).
 * Where it measures the thread's user page faults too (faults=in or out)
 * a record {HK_FLT << 56 | faults, metric} likewise for the faults (the
 * module's windows plus fault_glue each).
 * A record {HK_WALL << 56, CLOCK_MONOTONIC ns} comes before an event whose
 * early read it dates: a thread's first event, the first of each buffer,
 * and the first after the thread was scheduled out and in. Between two,
 * a time metric runs with the wall clock (ns_per_unit in the info file).
 *
 * The records reach the thread file by one pwrite per HK_BUF bytes from a
 * per-thread buffer, which is a shared mapping of DIR/hookit-PID-TID.tail:
 * words 0 and 1 {HK_TAIL_MAGIC, the thread file's size when the buffer
 * was last cleared}, then the records since (a record's first word written
 * last; the rest zero). A process killed with SIGKILL leaves it: the
 * reader appends its records up to the first whose first word is zero
 * to the thread file cut at that size,
 * unless the thread file is already longer (killed between the write and
 * the clearing). At exit the tail files are removed.
 * Blocks are allocated ahead of the thread file's end (fallocate keeping
 * its size, up to 4 MB ahead) and given back when the file is finished:
 * a killed process's file may keep them; its size is what was written.
 */
#ifndef HOOKIT_H
#define HOOKIT_H

#include <stdint.h>

#define HK_MAGIC 0x3154494b4f4f48ULL /* "HOOKIT1" */
#define HK_VERSION 6 /* 5: no inl bit; 4: two-word records only */
#define HK_KIND_SHIFT 56
#define HK_API_SHIFT 55
#define HK_INL_SHIFT 54
#define HK_TYPE_SHIFT 48
#define HK_TYPE_MASK 7ULL
#define HK_FN_MASK ((1ULL << HK_TYPE_SHIFT) - 1)
#define HK_HOOK_SHIFT 32
#define HK_SPD_SHIFT 48
#define HK_SHORT 3ULL /* word >> HK_SHORT_SHIFT of a short event */
#define HK_SHORT_SHIFT 62
#define HK_SHORT_EXIT_SHIFT 61
#define HK_SHORT_API_SHIFT 60
#define HK_SHORT_INL_SHIFT 59
#define HK_SLOT_SHIFT 48
#define HK_SHORT_SPD_SHIFT 32
#define HK_SLOTS 1024u
#define HK_SLOT(fn) ((unsigned)(((fn) >> 4) ^ ((fn) >> 14)) & (HK_SLOTS - 1))
#define HK_SHORT_TAG(exit, slot) \
	(HK_SHORT << HK_SHORT_SHIFT | (uint64_t)(exit) << HK_SHORT_EXIT_SHIFT | (uint64_t)(slot) << HK_SLOT_SHIFT)
#define HK_TAIL_WORDS 2 /* the tail file's header */
#define HK_END (~0ULL) /* the second record of the final sync */
#define HK_TAIL_MAGIC 0x4c494154544b48ULL /* "HKTTAIL" */
#define HK_BUF (64u << 10) /* the per-thread buffer: the tail file */

enum {
	HK_ENTER = 1,  /* function entry */
	HK_EXIT = 2,   /* function exit */
	HK_ADJUST = 3, /* a pause of the runtime (early..late), charged to no one */
	HK_MARK = 4,   /* a marker: the function field says which */
	HK_EXC_EXIT = 5, /* exception exit (hookit_exception_exit) */
	HK_SYNC = 6,   /* absolute values (two records) */
	HK_DSIN = 7,   /* dispatches | interrupts << 32 since the last one */
	HK_WALL = 8,   /* the wall clock (CLOCK_MONOTONIC ns) at the next event's early read */
	HK_SYS = 9,    /* system calls (tag's low 32 bits) and their metric since the last one */
	HK_FLT = 10,   /* user page faults (tag's low 32 bits) and their metric since the last one */
};

enum {
	HK_MARK_EXIT = 1,  /* the process exits: open frames end here */
	HK_MARK_RESET = 2, /* rtdriver reset: figures restart here */
	HK_MARK_START = 3, /* tracing switched on */
	HK_MARK_END = 4,   /* tracing switched off */
};

struct hk_rec {
	uint64_t tag;
	uint64_t d;
};

/* calib.c (built with -finstrument-functions): an empty instrumented
 * function and an uninstrumented loop that calls it n times. */
void hk_calib_empty(void);
void hk_calib_calls(int n);
/* n empty pairs through hookit_enter / hookit_exit (the API's path). */
void hk_calib_api_calls(int n);
/* The two loops uninstrumented (no hooks, no API calls). */
void hk_calib_plain_calls(int n);
void hk_calib_plain_api_calls(int n);

#endif
