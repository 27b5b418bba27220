// SPDX-License-Identifier: GPL-2.0
/*
 * agentconn.c - libperfutil's C client of pitraced (agentconn.h): one JSON
 * request per line on the agent's control socket ($PERFINSP_SOCKET, else
 * the system agent's), one JSON answer per line (docs/agent.md). Used by
 * ITraceOn/ITraceOff/TraceHook (itrace.c) and the JVMTI agent's JIT records.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

int pu_agent_call(int fd, const char *req, char *err, size_t errlen)
{
	char buf[4096];
	size_t n = 0, len = strlen(req);
	const char *e;
	char *q;

	while (n < len) {
		ssize_t w = write(fd, req + n, len - n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		n += (size_t)w;
	}
	n = 0;
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
