// SPDX-License-Identifier: GPL-2.0
/*
 * calib.c - the empty function that libhookit's start-up calibration calls,
 * built with -finstrument-functions like the programs it measures, so that
 * the calibration runs the very code path of a program's call: the
 * function's own calls of the hooks (through the PLT), and its caller.
 */
#include "hookit.h"

__attribute__((noinline)) void hk_calib_empty(void)
{
	__asm__ volatile("" ::: "memory");
}

/* Not instrumented itself (see mk/callflow.mk): the caller of n calls. */
__attribute__((noinline, no_instrument_function)) void hk_calib_calls(int n)
{
	for (int i = 0; i < n; i++)
		hk_calib_empty();
}
