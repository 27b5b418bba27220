/*
 * Built -finstrument-functions: signals whose handler runs instrumented
 * code reach each new thread from its start to its end: while its first
 * hook event opens the thread's files and while it exits (the runtime's
 * and PTT's thread-exit work). The main thread sends them without pause
 * until it has joined the thread.
 *   sigopen N [DIR]   N threads, one after the other; with DIR (the
 *                     runtime's directory) each thread's signals start
 *                     once its thread file exists: its first event (body's
 *                     entry) is then opening the files, not a handler's
 *   prints the handler's runs
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int handled;

__attribute__((noinline)) void in_handler(void)
{
	handled++;
}

static void handler(int sig)
{
	(void)sig;
	in_handler();
}

__attribute__((noinline)) void *body(void *arg)
{
	(void)arg;
	return NULL;
}

__attribute__((no_instrument_function)) static int bins(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);

		n += l > 4 && strcmp(e->d_name + l - 4, ".bin") == 0;
	}
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20;
	const char *dir = argc > 2 ? argv[2] : NULL;
	struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_RESTART};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	for (int i = 0; i < n; i++) {
		pthread_t th;
		int before = dir ? bins(dir) : 0;

		if (pthread_create(&th, NULL, body, NULL) != 0)
			return 1;
		int rc = EBUSY;

		if (dir) /* until the thread's file exists, or the thread ended */
			while (bins(dir) == before && (rc = pthread_tryjoin_np(th, NULL)) == EBUSY)
				;
		while (rc == EBUSY && (rc = pthread_tryjoin_np(th, NULL)) == EBUSY)
			pthread_kill(th, SIGUSR1);
		if (rc != 0)
			return 1;
	}
	printf("%d threads, %d signals handled\n", n, handled);
	return 0;
}
