/* sigstate: what a program inherits: its signal mask, the signals it
 * ignores, its environment. "spin FILE": write the pid to FILE, then loop
 * until a signal ends it; "spin FILE handler": on SIGINT finish a loop far
 * too long to single-step and exit 3. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;
static volatile sig_atomic_t stop;

static void on_int(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "spin") == 0) {
		char tmp[4096];
		FILE *f;
		volatile unsigned long n = 0;

		if (argc == 4 && strcmp(argv[3], "handler") == 0)
			signal(SIGINT, on_int);
		snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
		f = fopen(tmp, "w");
		if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) || rename(tmp, argv[2]))
			return 2;
		while (!stop)
			n++;
		for (n = 0; n < 200000000UL; n++)
			;
		return 3;
	}
	sigset_t blocked;
	sigprocmask(SIG_BLOCK, NULL, &blocked);
	for (int s = 1; s < 32; s++) {
		struct sigaction sa;
		sigaction(s, NULL, &sa);
		printf("%d%s%s\n", s, sigismember(&blocked, s) ? " blocked" : "",
		       sa.sa_handler == SIG_IGN ? " ignored" : "");
	}
	for (char **e = environ; *e; e++)
		puts(*e);
	return 0;
}
