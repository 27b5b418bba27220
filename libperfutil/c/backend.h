/* SPDX-License-Identifier: GPL-2.0 */
/*
 * backend.h - the one backend policy of libperfutil's C code and its
 * in-process agents (the Go one is control.ChooseBackend). Header-only, so
 * every library that chooses a backend (libperfutil, libhookit, the JVMTI
 * agent) has it without another object to link.
 */
#ifndef PERFINSP_BACKEND_H
#define PERFINSP_BACKEND_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pu_backend {
	PU_BACKEND_UNKNOWN = -1,
	PU_BACKEND_AUTO,	/* the module when /dev/pitrace exists, else daemon */
	PU_BACKEND_KMOD,	/* the pitrace module */
	PU_BACKEND_DAEMON,	/* mainline kernel mechanisms (perf events, pitraced) */
};

/*
 * $PERFINSP_BACKEND names kmod, daemon or auto (or nothing: auto); "perf",
 * PTT's former name of the no-module backend, is taken as daemon.
 * PU_BACKEND_UNKNOWN, with the reason in err, for any other name.
 */
static inline enum pu_backend pu_backend_choice(char *err, size_t errlen)
{
	const char *b = getenv("PERFINSP_BACKEND");

	if (!b || !*b || !strcmp(b, "auto"))
		return PU_BACKEND_AUTO;
	if (!strcmp(b, "kmod"))
		return PU_BACKEND_KMOD;
	if (!strcmp(b, "daemon") || !strcmp(b, "perf"))
		return PU_BACKEND_DAEMON;
	snprintf(err, errlen, "unknown backend \"%s\" in $PERFINSP_BACKEND: use kmod, daemon or auto", b);
	return PU_BACKEND_UNKNOWN;
}

#endif
