/*
 * The JVM's generated code as a jitdump file (docs/jprof.md): the format
 * `perf inject --jit` reads (the jitdump specification of the Linux perf
 * tools) and post's A2N reads from its perf-map directory: DIR/jit-PID.dump,
 * DIR the perf-map directory (/tmp unless dir=).
 *
 * A 40-byte header (magic "JiTD", version 1, the machine, the pid, the
 * time, flags 0: CLOCK_MONOTONIC times), then one JIT_CODE_LOAD record per
 * compiled method or stub: its name, address, size and a copy of its code
 * bytes, taken in the JVMTI callback while the code is there. The file is
 * mapped once PROT_EXEC so that perf record, which sees the mapping, knows
 * where the file is (what perf inject --jit looks for).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "jprof.h"

#define JITD_MAGIC	0x4A695444
#define JIT_CODE_LOAD	0
#define JIT_CODE_CLOSE	3

#if defined(__x86_64__)
#define JITD_MACH	EM_X86_64
#elif defined(__aarch64__)
#define JITD_MACH	EM_AARCH64
#else
#define JITD_MACH	EM_NONE
#endif

static pthread_mutex_t jd_lock = PTHREAD_MUTEX_INITIALIZER;	/* the file's end */
static int jd_fd = -1;
static uint64_t jd_index;
static unsigned long jd_loads;
static char jd_path[4096];

static uint64_t jd_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* All of n bytes, or -1 (the file is then closed: a half record ends it). */
static int jd_write(const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t w = write(jd_fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int jitdump_open(const char *dir)
{
	struct {
		uint32_t magic, version, total_size, elf_mach, pad1, pid;
		uint64_t timestamp, flags;
	} hdr = { JITD_MAGIC, 1, sizeof(hdr), JITD_MACH, 0, 0, 0, 0 };
	long pg = sysconf(_SC_PAGESIZE);
	void *m;

	if (jd_fd >= 0)
		return 0;
	snprintf(jd_path, sizeof(jd_path), "%s/jit-%d.dump", dir, (int)getpid());
	/* replaced only when ours (see jstacks.c) */
	if (unlink(jd_path) != 0 && errno != ENOENT) {
		fprintf(stderr, "jprof: %s exists and is not ours to replace (%s): no jitdump; give dir=DIR\n", jd_path, strerror(errno));
		return -1;
	}
	jd_fd = open(jd_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (jd_fd < 0) {
		fprintf(stderr, "jprof: cannot create %s (%s): no jitdump; give dir=DIR\n", jd_path, strerror(errno));
		return -1;
	}
	hdr.pid = (uint32_t)getpid();
	hdr.timestamp = jd_now();
	if (jd_write(&hdr, sizeof(hdr)) != 0) {
		close(jd_fd);
		jd_fd = -1;
		return -1;
	}
	/* perf record sees this mapping: the file's path for perf inject */
	m = mmap(NULL, (size_t)pg, PROT_READ | PROT_EXEC, MAP_PRIVATE, jd_fd, 0);
	if (m == MAP_FAILED)
		fprintf(stderr, "jprof: cannot map %s (%s): perf inject --jit will not find it\n", jd_path, strerror(errno));
	return 0;
}

void jitdump_load(const char *name, const void *addr, uint64_t size)
{
	struct {
		uint32_t id, total_size;
		uint64_t timestamp;
		uint32_t pid, tid;
		uint64_t vma, code_addr, code_size, code_index;
	} r;
	size_t nl = strlen(name) + 1;

	if (size == 0 || size > (1u << 30))
		return;
	pthread_mutex_lock(&jd_lock);
	if (jd_fd < 0) {
		pthread_mutex_unlock(&jd_lock);
		return;
	}
	r.id = JIT_CODE_LOAD;
	r.total_size = (uint32_t)(sizeof(r) + nl + size);
	r.timestamp = jd_now();
	r.pid = (uint32_t)getpid();
	r.tid = (uint32_t)syscall(SYS_gettid);
	r.vma = r.code_addr = (uint64_t)(uintptr_t)addr;
	r.code_size = size;
	r.code_index = jd_index++;
	if (jd_write(&r, sizeof(r)) != 0 || jd_write(name, nl) != 0 || jd_write(addr, size) != 0) {
		fprintf(stderr, "jprof: writing %s: %s: the jitdump ends here\n", jd_path, strerror(errno));
		close(jd_fd);
		jd_fd = -1;
	} else {
		jd_loads++;
	}
	pthread_mutex_unlock(&jd_lock);
}

void jitdump_close(int verbose)
{
	struct {
		uint32_t id, total_size;
		uint64_t timestamp;
	} rec = { JIT_CODE_CLOSE, sizeof(rec), 0 };

	pthread_mutex_lock(&jd_lock);
	if (jd_fd >= 0) {
		rec.timestamp = jd_now();
		(void)jd_write(&rec, sizeof(rec));
		close(jd_fd);
		jd_fd = -1;
		if (verbose)
			fprintf(stderr, "jprof: %lu code loads with their bytes in %s\n", jd_loads, jd_path);
	}
	pthread_mutex_unlock(&jd_lock);
}
