/*
 * The heap footprint any preloaded library with thread-local storage and
 * one thread of its own has, whatever it does: glibc's TLS table of every
 * thread grows by one slot, and the thread's table comes from the heap.
 * The baseline libhookit's is compared with.
 */
#include <pthread.h>
#include <unistd.h>

__thread int tls_slot __attribute__((tls_model("initial-exec")));

static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

__attribute__((constructor)) static void start(void)
{
	pthread_t t;

	tls_slot = 1;
	if (pthread_create(&t, NULL, idle, NULL) == 0)
		pthread_detach(t);
}
