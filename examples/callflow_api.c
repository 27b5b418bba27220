// SPDX-License-Identifier: GPL-2.0
/*
 * callflow_api.c - an agent-like user of libhookit's in-process API
 * (libperfutil/c/hookit/hookit_api.h), as the JVMTI agent uses it: not
 * preloaded, started with hookit_init, events with ids that are not code
 * addresses, method types, names, an exception exit, a thread that ends
 * its file, a thread started again on its OS thread, and shutdown. The test (tools/hookit) checks the report.
 *
 *   callflow_api DIR [METRIC]
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hookit_api.h"

enum { RUN = 0x1000, CALL = 0x2000, HELPER = 0x3000, NEVER = 0x4000 };

static void *second(void *arg)
{
	(void)arg;
	hookit_enter(RUN, HOOKIT_TYPE_JITTED);
	for (int i = 0; i < 10; i++) {
		hookit_enter(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
		hookit_exit(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
	}
	hookit_exit(RUN, HOOKIT_TYPE_JITTED);
	hookit_thread_end();
	/* After the thread's end: not recorded. */
	hookit_enter(NEVER, HOOKIT_TYPE_OTHER);
	hookit_exit(NEVER, HOOKIT_TYPE_OTHER);
	/* A thread attached to the same OS thread: a file of its own. */
	hookit_thread_start();
	hookit_enter(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
	hookit_exit(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
	return NULL;
}

int main(int argc, char **argv)
{
	char opts[4200];
	pthread_t th;

	if (argc < 2) {
		fprintf(stderr, "usage: callflow_api DIR [METRIC]\n");
		return 2;
	}
	/* Before init: no effect. */
	hookit_enter(NEVER, HOOKIT_TYPE_OTHER);
	hookit_exit(NEVER, HOOKIT_TYPE_OTHER);
	if (hookit_init("dir=/tmp,bogus=1") == 0 || !strstr(hookit_error(), "bogus")) {
		fprintf(stderr, "a bad option was accepted (error '%s')\n", hookit_error());
		return 1;
	}
	snprintf(opts, sizeof(opts), "dir=%s,metric=%s", argv[1], argc > 2 ? argv[2] : "rdtsc");
	if (hookit_init(opts) != 0) {
		fprintf(stderr, "hookit_init: %s\n", hookit_error());
		return 1;
	}
	if (hookit_init(NULL) != 0) { /* a second init is a no-op */
		fprintf(stderr, "second hookit_init: %s\n", hookit_error());
		return 1;
	}
	hookit_name(RUN, "Main.run()V");
	hookit_name(CALL, "Native.call(I)I");
	hookit_name(HELPER, "Main.helper\n(J)V"); /* the newline is replaced */

	hookit_enter(RUN, HOOKIT_TYPE_JITTED);
	for (int i = 0; i < 1000; i++) {
		hookit_enter(CALL, HOOKIT_TYPE_NATIVE);
		hookit_exit(CALL, HOOKIT_TYPE_NATIVE);
	}
	hookit_enter(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
	hookit_exception_exit(HELPER, HOOKIT_TYPE_INTERPRETED_STATIC);
	if (pthread_create(&th, NULL, second, NULL) != 0 || pthread_join(th, NULL) != 0) {
		perror("pthread");
		return 1;
	}
	hookit_exit(RUN, HOOKIT_TYPE_JITTED);
	hookit_shutdown();
	/* After shutdown: not recorded. */
	hookit_enter(NEVER, HOOKIT_TYPE_OTHER);
	hookit_exit(NEVER, HOOKIT_TYPE_OTHER);
	if (hookit_init(opts) == 0) {
		fprintf(stderr, "hookit_init after the shutdown succeeded\n");
		return 1;
	}
	printf("dropped %llu\n", (unsigned long long)hookit_dropped());
	return 0;
}
