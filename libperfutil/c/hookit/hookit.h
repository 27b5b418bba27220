/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hookit.h - the thread file of libhookit (read by libperfutil/callflow;
 * its record layout is checked there against this header).
 *
 * DIR/hookit-PID-TID.bin is an array of 32-byte records. Record 0 is the
 * header: kind_fn = HK_MAGIC, site = pid << 32 | tid, early = version.
 * Every other record: kind_fn = kind << 56 | api << 55 | type << 48 | id
 * (a function address, or an id given to hookit_enter: 48 bits), site = the
 * stack pointer of the event (for stack repair; 0 from the API: no repair),
 * early / late = the metric read at the hook's start and end. type is the
 * method type (hookit_api.h, 0..7: the sequence-minima key); api says the
 * event came through hookit_enter/exit (its own calibration path).
 * A record is complete when kind_fn is non-zero (it is written last); the
 * file ends at its size or at the first zero record (a killed process).
 */
#ifndef HOOKIT_H
#define HOOKIT_H

#include <stdint.h>

#define HK_MAGIC 0x3154494b4f4f48ULL /* "HOOKIT1" */
#define HK_VERSION 2
#define HK_KIND_SHIFT 56
#define HK_API_SHIFT 55
#define HK_TYPE_SHIFT 48
#define HK_TYPE_MASK 7ULL
#define HK_FN_MASK ((1ULL << HK_TYPE_SHIFT) - 1)
#define HK_WINDOW (16u << 20) /* bytes mapped at a time per thread */

enum {
	HK_ENTER = 1,  /* function entry */
	HK_EXIT = 2,   /* function exit */
	HK_ADJUST = 3, /* a pause of the runtime (early..late), charged to no one */
	HK_MARK = 4,   /* a marker: the function field says which */
	HK_EXC_EXIT = 5, /* exception exit (hookit_exception_exit) */
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
/* n empty pairs through hookit_enter / hookit_exit (the API's path). */
void hk_calib_api_calls(int n);

#endif
