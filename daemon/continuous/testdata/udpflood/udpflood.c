/* udpflood: a program whose time goes partly to softirqs of its own.
 * It sends N datagrams (default 200000) over the loopback device to a
 * socket of its own that it never reads: the kernel receives each one in
 * the NET_RX softirq run on the sending thread's CPU as the send returns,
 * so the program's thread is the one that softirq takes its time from.
 * It prints its pid at the end:
 *
 *	pid 12345
 *
 *	udpflood [N]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	char buf[64] = "udpflood";
	int rx = socket(AF_INET, SOCK_DGRAM, 0);
	int tx = socket(AF_INET, SOCK_DGRAM, 0);

	if (rx < 0 || tx < 0 || bind(rx, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(rx, (struct sockaddr *)&a, &len) < 0) {
		perror("udpflood: socket");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		if (sendto(tx, buf, sizeof(buf), 0, (struct sockaddr *)&a, sizeof(a)) < 0) {
			perror("udpflood: sendto");
			return 1;
		}
	}
	printf("pid %d\n", (int)getpid());
	return 0;
}
