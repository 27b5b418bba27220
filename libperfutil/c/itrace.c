/*
 * ITraceOn / ITraceOff / TraceHook for C programs (docs/itrace.md). Two
 * backends, picked as PTT picks them: with the pitrace module loaded
 * (/dev/pitrace exists) or $PERFINSP_BACKEND=kmod, one ioctl on the module
 * (PITRACE_IOC_ITRACE_ON/_OFF with PITRACE_ITRACE_SELF, PITRACE_IOC_HOOK),
 * which single-steps the thread with the trap flag; else ($PERFINSP_BACKEND
 * =daemon, or no module) requests to pitraced over its control socket (one
 * JSON request per line, one JSON answer per line), which single-steps the
 * calling thread with ptrace between ITraceOn and ITraceOff; the caller
 * must be allowed to ptrace itself (same user, dumpable), as both check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perfutil.h"
#include "agentconn.h"
#include "backend.h"
#include "../../kmod/uapi/pitrace.h"

static __thread int itrace_fd = -1;
static __thread int itrace_kfd = -1;	/* /dev/pitrace while traced by the module */
static __thread char itrace_err[256];

/* 1: the module; 0: pitraced; -1: an unknown backend (said in itrace_err). */
static int use_module(void)
{
	switch (pu_backend_choice(itrace_err, sizeof(itrace_err))) {
	case PU_BACKEND_KMOD:
		return 1;
	case PU_BACKEND_DAEMON:
		return 0;
	case PU_BACKEND_AUTO:
		return access(PITRACE_DEVICE, F_OK) == 0;
	default:
		return -1;
	}
}

static int open_module(void)
{
	int fd = open(PITRACE_DEVICE, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		snprintf(itrace_err, sizeof(itrace_err), "open %s: %s%s", PITRACE_DEVICE, strerror(errno),
			 errno == EACCES ? " (run as root, or see docs/kmod.md: module parameter perm)" : "");
	return fd;
}

static void module_err(const char *op)
{
	int e = errno;

	snprintf(itrace_err, sizeof(itrace_err), "pitrace module: %s: %s%s", op, strerror(e),
		 e == ENODATA ? " (tracing is not on: swtrace init; swtrace on)" :
		 e == ENOTTY ? " (the loaded module has no ITrace: load a newer one)" : "");
}

static int itrace_on_module(void)
{
	struct pitrace_itrace_on a;
	int fd = open_module();

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.flags = PITRACE_ITRACE_SELF;
	/* the last system call before the traced section */
	if (ioctl(fd, PITRACE_IOC_ITRACE_ON, &a) < 0) {
		module_err("ITraceOn");
		close(fd);
		return -1;
	}
	itrace_kfd = fd;
	return 0;
}

static int itrace_off_module(void)
{
	struct pitrace_itrace_off a;
	int rc = 0;

	memset(&a, 0, sizeof(a));
	a.flags = PITRACE_ITRACE_SELF;
	if (ioctl(itrace_kfd, PITRACE_IOC_ITRACE_OFF, &a) < 0) {
		module_err("ITraceOff");
		rc = -1;
	}
	close(itrace_kfd);
	itrace_kfd = -1;
	return rc;
}

static int hook_module(uint16_t major, uint32_t minor, const uint32_t *words, int nwords)
{
	struct pitrace_hook_arg a;
	int fd = open_module(), rc = 0;

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.major = major;
	a.minor = minor;
	a.nwords = (uint32_t)nwords;
	a.words = (uint64_t)(uintptr_t)words;
	if (ioctl(fd, PITRACE_IOC_HOOK, &a) < 0) {
		module_err("TraceHook");
		rc = -1;
	}
	close(fd);
	return rc;
}

int ITraceOn(void)
{
	char req[128];
	int fd;

	if (itrace_fd >= 0 || itrace_kfd >= 0) {
		snprintf(itrace_err, sizeof(itrace_err), "this thread is already traced");
		return -1;
	}
	int m = use_module();

	if (m < 0)
		return -1;
	if (m)
		return itrace_on_module();
	fd = pu_agent_dial(itrace_err, sizeof(itrace_err));
	if (fd < 0)
		return -1;
	snprintf(req, sizeof(req), "{\"op\":\"itrace-on\",\"args\":{\"tids\":[%ld]}}\n", (long)syscall(SYS_gettid));
	if (pu_agent_call(fd, req, itrace_err, sizeof(itrace_err)) < 0) {
		close(fd);
		return -1;
	}
	itrace_fd = fd;
	return 0;
}

int ITraceOff(void)
{
	char req[128];
	int rc;

	if (itrace_kfd >= 0)
		return itrace_off_module();
	if (itrace_fd < 0) {
		snprintf(itrace_err, sizeof(itrace_err), "ITraceOff without ITraceOn on this thread");
		return -1;
	}
	snprintf(req, sizeof(req), "{\"op\":\"itrace-off\",\"args\":{\"tids\":[%ld]}}\n", (long)syscall(SYS_gettid));
	rc = pu_agent_call(itrace_fd, req, itrace_err, sizeof(itrace_err));
	close(itrace_fd);
	itrace_fd = -1;
	return rc;
}

int TraceHook(uint16_t major, uint32_t minor, const uint32_t *words, int nwords)
{
	char req[2048];
	struct timespec ts;
	size_t n;
	int fd, rc, i;

	if (nwords < 0 || nwords > 64 || (nwords > 0 && !words)) {
		snprintf(itrace_err, sizeof(itrace_err), "TraceHook: 0 to 64 words");
		return -1;
	}
	rc = use_module();
	if (rc < 0)
		return -1;
	if (rc)
		return hook_module(major, minor, words, nwords);
	fd = pu_agent_dial(itrace_err, sizeof(itrace_err));
	if (fd < 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = (size_t)snprintf(req, sizeof(req), "{\"op\":\"hook\",\"args\":{\"cpu\":%d,\"time\":%llu,\"major\":%u,\"minor\":%u,\"words\":[",
			     sched_getcpu(), (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec,
			     major, minor);
	for (i = 0; i < nwords && n < sizeof(req) - 32; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, "%s%u", i ? "," : "", words[i]);
	snprintf(req + n, sizeof(req) - n, "]}}\n");
	rc = pu_agent_call(fd, req, itrace_err, sizeof(itrace_err));
	close(fd);
	return rc;
}

const char *ITraceStrerror(void)
{
	return itrace_err;
}
