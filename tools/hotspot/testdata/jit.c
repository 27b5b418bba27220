/*
 * A stand-in for JIT code: the hot loop runs in anonymous executable
 * memory (no file behind it, so no uprobe can be placed there).
 *   jit SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int main(int argc, char **argv)
{
	/* mov ecx, 100000; 1: dec ecx; jnz 1b; ret */
	static const unsigned char code[] = { 0xb9, 0xa0, 0x86, 0x01, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3 };
	double secs = argc > 1 ? atof(argv[1]) : 5;
	struct timespec ts;
	double end, t;
	void (*fn)(void);
	unsigned char *m;
	unsigned long n = 0;

	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(m, code, sizeof(code));
	fn = (void (*)(void))m;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = ts.tv_sec + ts.tv_nsec / 1e9 + secs;
	do {
		fn();
		n++;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t = ts.tv_sec + ts.tv_nsec / 1e9;
	} while (t < end);
	printf("jit: %lu calls\n", n);
	return 0;
}
