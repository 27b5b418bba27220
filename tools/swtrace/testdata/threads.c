/* threads TOTAL BATCH MS [nodump]: TOTAL threads, BATCH at a time, each
 * alive MS milliseconds; or, with "nodump", a busy non-dumpable process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static int ms;

static void *run(void *arg)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	(void)arg;
	nanosleep(&ts, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	int total, batch, done = 0, i;
	pthread_t *t;
	pthread_attr_t attr;

	if (argc > 1 && strcmp(argv[1], "nodump") == 0) {
		prctl(PR_SET_DUMPABLE, 0);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			;
	}
	if (argc < 4)
		return 2;
	total = atoi(argv[1]);
	batch = atoi(argv[2]);
	ms = atoi(argv[3]);
	t = calloc(batch, sizeof(*t));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	while (done < total) {
		int n = total - done < batch ? total - done : batch;

		for (i = 0; i < n; i++)
			if (pthread_create(&t[i], &attr, run, NULL)) {
				perror("pthread_create");
				return 1;
			}
		if (done == 0) {
			printf("started\n");
			fflush(stdout);
		}
		for (i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		done += n;
	}
	printf("done %d\n", done);
	return 0;
}
