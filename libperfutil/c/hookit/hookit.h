/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hookit.h - the thread file of libhookit (read by libperfutil/callflow;
 * its record layout is checked there against this header).
 *
 * DIR/hookit-PID-TID.bin is an array of 32-byte records. Record 0 is the
 * header: kind_fn = HK_MAGIC, site = pid << 32 | tid, early = version.
 * Every other record: kind_fn = kind << 56 | function address, site = the
 * stack pointer of the event (for stack repair), early / late = the metric read at the hook's start and end.
 * A record is complete when kind_fn is non-zero (it is written last); the
 * file ends at its size or at the first zero record (a killed process).
 */
#ifndef HOOKIT_H
#define HOOKIT_H

#include <stdint.h>

#define HK_MAGIC 0x3154494b4f4f48ULL /* "HOOKIT1" */
#define HK_VERSION 1
#define HK_KIND_SHIFT 56
#define HK_FN_MASK ((1ULL << HK_KIND_SHIFT) - 1)
#define HK_WINDOW (16u << 20) /* bytes mapped at a time per thread */

enum {
	HK_ENTER = 1,  /* function entry */
	HK_EXIT = 2,   /* function exit */
	HK_ADJUST = 3, /* a pause of the runtime (early..late), charged to no one */
	HK_MARK = 4,   /* a marker: the function field says which */
};

enum {
	HK_MARK_EXIT = 1,  /* the process exits: open frames end here */
	HK_MARK_RESET = 2, /* rtdriver reset: figures restart here */
	HK_MARK_START = 3, /* tracing switched on */
	HK_MARK_END = 4,   /* tracing switched off */
};

struct hk_rec {
	uint64_t kind_fn;
	uint64_t site; /* the stack pointer (enter, exit); resets (marks) */
	uint64_t early;
	uint64_t late;
};

/* calib.c (built with -finstrument-functions): an empty instrumented
 * function and an uninstrumented loop that calls it n times. */
void hk_calib_empty(void);
void hk_calib_calls(int n);

#endif
