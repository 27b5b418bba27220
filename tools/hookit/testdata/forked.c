/*
 * Built -finstrument-functions: a program that forks after its threads
 * have recorded (their counters set up), and a child that calls work N
 * times and exits; the program exits with the child's status (a child
 * killed by a signal: 128 + the signal).
 *   forked N
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void work(long x)
{
	sink += x;
}

static void *thread(void *arg)
{
	(void)arg;
	work(1);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	pthread_t th;
	int st;

	work(0);
	if (pthread_create(&th, NULL, thread, NULL) != 0 || pthread_join(th, NULL) != 0)
		return 1;
	pid_t c = fork();

	if (c < 0)
		return 1;
	if (c == 0) {
		for (int i = 0; i < n; i++)
			work(i);
		exit(0);
	}
	if (waitpid(c, &st, 0) != c)
		return 1;
	printf("child %d\n", (int)c);
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}
