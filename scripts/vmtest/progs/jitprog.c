/*
 * The JIT records through the module, for the VM test
 * (scripts/vmtest/guest/jit.sh): copies a hot loop into anonymous
 * executable memory, names it with a JIT_LOAD through JProf's own client
 * (tools/jprof/agent/jittrace.c, compiled in), runs it, then unloads it.
 * A forked child first reports a JIT_LOAD of "Forged.name" over the same
 * range: the module writes it with the child's pid, so the parent's ticks
 * must still be named by the parent's name.
 *
 *   jitprog SECONDS
 *
 * Prints "jitprog: pid P sent S failed F err E".
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jittrace.h"

/* x86-64: mov %rdi,%rax; 1: dec %rax; jnz 1b; ret */
static const unsigned char hot_loop[] = {
	0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3,
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2, end;
	unsigned long sent, failed, sent0, failed0;
	unsigned long long send_ns;
	const char *err;
	unsigned long (*fn)(unsigned long);
	size_t size = 4096;
	unsigned char *code;
	pid_t child;
	int st;

	code = mmap(NULL, size, PROT_READ | PROT_WRITE | PROT_EXEC,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("jitprog: mmap");
		return 1;
	}
	memcpy(code, hot_loop, sizeof(hot_loop));
	__builtin___clear_cache((char *)code, (char *)code + sizeof(hot_loop));
	fn = (unsigned long (*)(unsigned long))(void *)code;

	jt_load((unsigned)gettid(), (unsigned long long)(uintptr_t)code, sizeof(hot_loop), "JitHot.spin");
	jt_method(7, "JitHot.spin");

	/* another process claims the same range: it must stay its own */
	jt_stats(&sent0, &failed0, &err, &send_ns);
	child = fork();
	if (child == 0) {
		jt_load((unsigned)gettid(), (unsigned long long)(uintptr_t)code, sizeof(hot_loop), "Forged.name");
		jt_stats(&sent, &failed, &err, &send_ns);
		_exit(sent == sent0 + 1 && failed == failed0 ? 0 : 2);
	}
	if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "jitprog: the child's JIT_LOAD failed\n");
		return 1;
	}

	end = now() + secs;
	while (now() < end)
		fn(1000000);

	jt_unload((unsigned long long)(uintptr_t)code, sizeof(hot_loop));
	jt_flush();
	jt_stats(&sent, &failed, &err, &send_ns);
	printf("jitprog: pid %d sent %lu failed %lu err %s\n", (int)getpid(), sent, failed, err[0] ? err : "-");
	return failed || sent != 3;
}
