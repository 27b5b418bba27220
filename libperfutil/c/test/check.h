/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C test programs' one check (the PTT C library's tests, the VM's
 * module tests): a condition that does not hold prints
 * "PREFIX: FAIL (file:line): message" and counts in `fails`, which the
 * program declares and turns into its exit status.
 *
 *   #define CHECK_PREFIX "harden"
 *   #include "check.h"
 */
#ifndef PERFINSP_TEST_CHECK_H
#define PERFINSP_TEST_CHECK_H

#include <stdio.h>

#ifndef CHECK_PREFIX
#error "define CHECK_PREFIX (the program's name) before including check.h"
#endif

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			printf(CHECK_PREFIX ": FAIL (%s:%d): ", __FILE__,    \
			       __LINE__);                                    \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
			fails++;                                             \
		}                                                            \
	} while (0)

#endif
