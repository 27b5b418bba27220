// SPDX-License-Identifier: GPL-2.0
/*
 * agentconn.c - libperfutil's C client of pitraced (agentconn.h): one JSON
 * request per line on the agent's control socket ($PERFINSP_SOCKET, else
 * the system agent's), or a binary frame of raw bytes, one JSON answer per
 * line (docs/agent.md). Used by
 * ITraceOn/ITraceOff/TraceHook (itrace.c) and the JVMTI agent's JIT records.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "agentconn.h"

#define PU_AGENT_DEFAULT_SOCKET "/run/perfinsp/pitraced.sock"

static const char *socket_path(void)
{
	const char *p = getenv("PERFINSP_SOCKET");

	return p && *p ? p : PU_AGENT_DEFAULT_SOCKET;
}

int pu_agent_dial(char *err, size_t errlen)
{
	struct sockaddr_un a;
	const char *path = socket_path();
	int fd;

	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	strcpy(a.sun_path, path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		snprintf(err, errlen,
			 "cannot reach pitraced at %s (%s): start it (swtrace on starts it as root)",
			 path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads the answer to a request: 0 if it says "ok":true, else -1. */
static int answer(int fd, char *err, size_t errlen)
{
	char buf[4096];
	size_t n = 0;
	const char *e;
	char *q;

	while (n < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (memchr(buf, '\n', n))
			break;
	}
	buf[n] = 0;
	if (strstr(buf, "\"ok\":true"))
		return 0;
	e = strstr(buf, "\"error\":\"");
	snprintf(err, errlen, "pitraced: %.200s", e ? e + 9 : "no answer");
	if (e && errlen > 10 && (q = strchr(err + 10, '"')) != NULL)
		*q = 0;		/* the message ends at its closing quote */
	return -1;
}

int pu_agent_call(int fd, const char *req, char *err, size_t errlen)
{
	size_t n = 0, len = strlen(req);

	while (n < len) {
		ssize_t w = write(fd, req + n, len - n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		n += (size_t)w;
	}
	return answer(fd, err, errlen);
}

#define PU_FRAME_MAX_IOV 8

int pu_agent_call_frame(int fd, const char *op, const struct iovec *iov, int n, char *err, size_t errlen)
{
	struct iovec v[PU_FRAME_MAX_IOV + 1];
	unsigned char head[2 + 32 + 4];
	size_t oplen = strlen(op), total = 0, hlen;
	uint32_t len;
	int i, nv;

	if (oplen == 0 || oplen > 32 || n < 0 || n > PU_FRAME_MAX_IOV) {
		snprintf(err, errlen, "bad frame: op of %zu bytes, %d pieces", oplen, n);
		return -1;
	}
	for (i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total > (1u << 20)) {
		snprintf(err, errlen, "bad frame: %zu bytes, at most 1 MiB", total);
		return -1;
	}
	len = (uint32_t)total;
	head[0] = 0;			/* daemonproto.FrameMagic */
	head[1] = (unsigned char)oplen;
	memcpy(head + 2, op, oplen);
	head[2 + oplen] = (unsigned char)len;		/* little-endian */
	head[3 + oplen] = (unsigned char)(len >> 8);
	head[4 + oplen] = (unsigned char)(len >> 16);
	head[5 + oplen] = (unsigned char)(len >> 24);
	hlen = 6 + oplen;
	v[0].iov_base = head;
	v[0].iov_len = hlen;
	for (i = 0; i < n; i++)
		v[i + 1] = iov[i];
	nv = n + 1;
	total += hlen;
	for (i = 0; total > 0;) {
		ssize_t w = writev(fd, v + i, nv - i);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		total -= (size_t)w;
		while (i < nv && (size_t)w >= v[i].iov_len) {
			w -= (ssize_t)v[i].iov_len;
			i++;
		}
		if (i < nv) {
			v[i].iov_base = (char *)v[i].iov_base + w;
			v[i].iov_len -= (size_t)w;
		}
	}
	return answer(fd, err, errlen);
}
