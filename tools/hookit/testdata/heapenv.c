/*
 * A program whose output depends on its heap and its environment: the
 * heap's figures and block offsets after mallocs in two threads, and every
 * environment variable. Run with libhookit and without, it must print the
 * same heap figures as beside a library that only has thread-local
 * storage and one thread (testdata/tlsthread.c), and the same environment
 * as alone.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static char *mk(size_t n)
{
	char *p = malloc(n);

	memset(p, 1, n);
	return p;
}

static void *worker(void *arg)
{
	(void)arg;
	free(mk(300));
	return NULL;
}

int main(void)
{
	pthread_t t;
	char *a = mk(100), *b = mk(5000);
	pthread_create(&t, NULL, worker, NULL);
	pthread_join(t, NULL);
	char *c = mk(100);
	struct mallinfo2 mi = mallinfo2();

	printf("arena %zu used %zu chunks %zu mmapped %zu\n", mi.arena, mi.uordblks, mi.ordblks, mi.hblkhd);
	printf("b-a %td c-a %td\n", b - a, c - a);
	for (char **e = environ; *e; e++)
		printf("env %s\n", *e);
	return 0;
}
