/* A2N test program: prints the addresses of its functions and of a function
 * in a shared library, then waits so its mappings can be read. */
#include <stdio.h>
#include <unistd.h>

extern int lib_work(int);

__attribute__((noinline)) int prog_hot(int x) { return x * 3 + lib_work(x); }
__attribute__((noinline)) int prog_cold(int x) { return x - 1; }

int main(void)
{
	printf("%p %p %p\n", (void *)prog_hot, (void *)prog_cold, (void *)lib_work);
	fflush(stdout);
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	return prog_hot(1) + prog_cold(2);
}
