// SPDX-License-Identifier: GPL-2.0
/*
 * itrace_block: ITrace's step modes (PITRACE_ITRACE_STEP_*) in the VM
 * (run.sh itrace, scripts/vmtest/guest/itrace.sh).
 *
 *   itrace_block on auto|single|verify PID
 *       ITRACE_ON of process PID at its next exec, in that step mode
 *       (until swtrace takes a step mode itself).
 *   itrace_block self auto|single|verify
 *       trace a fixed workload of this thread (calls, taken and not-taken
 *       branches, a loop, rep movsb, a system call) with ITRACE_ON/OFF of
 *       SELF, then print ITRACE_STATS:
 *       "itrace_block: MODE instructions I traps T blocks B disagreements D
 *        block_traps K refused R step S btf_ignored X"
 *
 * Tracing must be on (swtrace init; swtrace on).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "pitrace.h"

static __attribute__((noinline)) int leaf(int i)
{
	return i & 1 ? i * 3 : i + 7;
}

static __attribute__((noinline)) long work(void)
{
	static char src[64] = "block-stepping", dst[64];
	long s = 0, n = sizeof(src);
	void *d = dst;
	const void *sp = src;
	int i;

	for (i = 0; i < 200; i++) {
		s += leaf(i);
		if (s % 5 == 0)
			s ^= i;
	}
	asm volatile("rep movsb" : "+D"(d), "+S"(sp), "+c"(n) : : "memory");
	s += getppid() > 0;
	return s + dst[3];
}

static uint32_t mode(const char *m)
{
	if (!strcmp(m, "single"))
		return PITRACE_ITRACE_STEP_SINGLE;
	if (!strcmp(m, "verify"))
		return PITRACE_ITRACE_STEP_VERIFY;
	if (!strcmp(m, "auto"))
		return 0;
	fprintf(stderr, "itrace_block: mode %s: use auto, single or verify\n", m);
	exit(2);
}

int main(int argc, char **argv)
{
	struct pitrace_itrace_on on = { 0 };
	struct pitrace_itrace_off off = { 0 };
	struct pitrace_itrace_stats st = { 0 };
	int32_t pid;
	long r;
	int fd;

	if (argc < 3 || (strcmp(argv[1], "self") && argc < 4)) {
		fprintf(stderr, "usage: itrace_block on MODE PID | self MODE\n");
		return 2;
	}
	fd = open(PITRACE_DEVICE, O_RDWR);
	if (fd < 0) {
		perror("itrace_block: " PITRACE_DEVICE);
		return 1;
	}
	on.flags = mode(argv[2]);
	if (!strcmp(argv[1], "on")) {
		pid = atoi(argv[3]);
		on.flags |= PITRACE_ITRACE_AT_EXEC;
		on.npids = 1;
		on.pids = (uintptr_t)&pid;
		if (ioctl(fd, PITRACE_IOC_ITRACE_ON, &on)) {
			perror("itrace_block: ITRACE_ON");
			return 1;
		}
		printf("itrace_block: %s at the exec of %d\n", argv[2], pid);
		return 0;
	}
	on.flags |= PITRACE_ITRACE_SELF;
	off.flags = PITRACE_ITRACE_SELF;
	if (ioctl(fd, PITRACE_IOC_ITRACE_ON, &on)) {
		perror("itrace_block: ITRACE_ON");
		return 1;
	}
	r = work();
	if (ioctl(fd, PITRACE_IOC_ITRACE_OFF, &off) ||
	    ioctl(fd, PITRACE_IOC_ITRACE_STATS, &st)) {
		perror("itrace_block: ITRACE_OFF / ITRACE_STATS");
		return 1;
	}
	printf("itrace_block: %s instructions %llu traps %llu blocks %llu disagreements %llu block_traps %llu refused %llu step %u btf_ignored %u (work %ld)\n",
	       argv[2], (unsigned long long)st.instructions,
	       (unsigned long long)st.traps, (unsigned long long)st.blocks,
	       (unsigned long long)st.disagreements,
	       (unsigned long long)st.block_traps,
	       (unsigned long long)st.refused, st.step, st.btf_ignored, r);
	return 0;
}
