// SPDX-License-Identifier: GPL-2.0
/*
 * calib.c - the empty function that libhookit's start-up calibration calls,
 * built with -finstrument-functions like the programs it measures, so that
 * the calibration runs the very code path of a program's call: the
 * function's own calls of the hooks (through the PLT), and its caller.
 */
#include "hookit.h"
#include "hookit_api.h"

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

/* The API's path: what an agent does around a method with no body. */
__attribute__((noinline, no_instrument_function)) void hk_calib_api_calls(int n)
{
	for (int i = 0; i < n; i++) {
		hookit_enter((uint64_t)(uintptr_t)hk_calib_empty, HOOKIT_TYPE_OTHER);
		__asm__ volatile("" ::: "memory");
		hookit_exit((uint64_t)(uintptr_t)hk_calib_empty, HOOKIT_TYPE_OTHER);
	}
}

/* The same loops uninstrumented: what the caller's loop and call cost
 * without the hooks, taken out of t_O (it is the caller's own work). */
__attribute__((noinline, no_instrument_function)) void hk_calib_plain_empty(void)
{
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline, no_instrument_function)) void hk_calib_plain_calls(int n)
{
	for (int i = 0; i < n; i++)
		hk_calib_plain_empty();
}

__attribute__((noinline, no_instrument_function)) void hk_calib_plain_api_calls(int n)
{
	for (int i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
}
