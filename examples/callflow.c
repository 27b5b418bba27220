/*
 * callflow.c - the bundled example of call flows (docs/callflow.md), built
 * with -finstrument-functions -fno-inline -fno-optimize-sibling-calls so
 * that every call in the source is a call the hooks see.
 *
 *   callflow [N]      main -> work(N): leaf() N times, an empty function
 *                     N times, chain1 -> chain2 -> chain3 -> leaf, fib(10),
 *                     shared() from caller_a and from caller_b, and a
 *                     second thread created mid-run that runs worker(N/10).
 *   callflow longjmp  main -> jumper -> deep1 -> deep2 -> longjmp back to
 *                     jumper; then after_jump() (stack repair).
 *   callflow deepexit main -> deep1 -> deep2 -> deep_exit -> exit(0).
 *   callflow spin     calls leaf() 100 times a millisecond until killed
 *                     (SIGKILL and rtdriver tests), printing "ready" first.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;
static jmp_buf jb;

void empty(void)
{
}

void leaf(void)
{
	sink++;
}

void chain3(void)
{
	leaf();
}

void chain2(void)
{
	chain3();
}

void chain1(void)
{
	chain2();
}

int fib(int n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

void shared(void)
{
	leaf();
}

void caller_a(void)
{
	shared();
}

void caller_b(void)
{
	shared();
	shared();
}

void *worker(void *arg)
{
	long n = (long)arg;

	for (long i = 0; i < n; i++)
		leaf();
	return NULL;
}

void work(long n)
{
	pthread_t th;

	for (long i = 0; i < n / 2; i++)
		leaf();
	/* a thread created mid-run */
	if (pthread_create(&th, NULL, worker, (void *)(n / 10)) != 0) {
		perror("pthread_create");
		exit(1);
	}
	for (long i = n / 2; i < n; i++)
		leaf();
	for (long i = 0; i < n; i++)
		empty();
	chain1();
	sink += (unsigned long)fib(10);
	caller_a();
	caller_b();
	pthread_join(th, NULL);
}

void deep2(void)
{
	longjmp(jb, 1);
}

void deep1(void)
{
	deep2();
}

void after_jump(void)
{
	leaf();
}

void jumper(void)
{
	if (setjmp(jb) == 0)
		deep1();
	after_jump();
}

void deep_exit(void)
{
	leaf();
	exit(0);
}

void exit1(void)
{
	deep_exit();
}

void exit2(void)
{
	exit1();
}

void spin(void)
{
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		for (int i = 0; i < 100; i++)
			leaf();
		usleep(1000); /* about 100,000 calls a second: small files */
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "100000";

	if (!strcmp(mode, "longjmp"))
		jumper();
	else if (!strcmp(mode, "deepexit"))
		exit2();
	else if (!strcmp(mode, "spin"))
		spin();
	else
		work(atol(mode));
	return 0;
}
