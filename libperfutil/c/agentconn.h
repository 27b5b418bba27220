/* SPDX-License-Identifier: GPL-2.0 */
/*
 * agentconn.h - libperfutil's C client of pitraced (internal to
 * libperfutil and its in-process agents; not part of perfutil.h).
 */
#ifndef PERFINSP_AGENTCONN_H
#define PERFINSP_AGENTCONN_H

#include <stddef.h>

/* Connects to the agent's socket; -1 with the reason in err. */
int pu_agent_dial(char *err, size_t errlen);

/* Sends one request line and reads the answer: 0 if it says "ok":true,
 * else -1 with the agent's error (or "no answer") in err. */
int pu_agent_call(int fd, const char *req, char *err, size_t errlen);

/* Sends one binary frame (daemonproto.FrameMagic): op, then the payload
 * gathered from iov[0..n) (at most 1 MiB in all), and reads the answer as
 * pu_agent_call does. */
struct iovec;
int pu_agent_call_frame(int fd, const char *op, const struct iovec *iov, int n, char *err, size_t errlen);

#endif
