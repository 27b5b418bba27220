// SPDX-License-Identifier: GPL-2.0
/*
 * callflow_exc.cc - C++ exceptions thrown through instrumented frames, for
 * the stack repair of libhookit (tools/hookit's test). Built with
 * g++ -finstrument-functions: g++ calls the exit hook of each frame the
 * unwinder leaves (the hook is in a cleanup), so the tree stays exact;
 * catcher_c's throws pass two C frames built without -fexceptions
 * (examples/callflow_exc_c.c): the unwinder leaves them without running
 * their exit hooks, and the stack pointer of the next entry from the
 * catching frame closes them (the stack repair).
 *
 *   callflow_exc [N]      N throws (default 100)
 */
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" void c_through(void (*f)(int), int v);

__attribute__((noinline)) void leaf(int v)
{
	__asm__ volatile("" ::: "memory");
	(void)v;
}

__attribute__((noinline)) void thrower(int v)
{
	leaf(v);
	if (v >= 0)
		throw std::runtime_error("thrown");
}

__attribute__((noinline)) void middle(int v)
{
	thrower(v);
	leaf(v); // never reached when thrower throws
}

__attribute__((noinline)) int catcher(int v)
{
	try {
		middle(v);
	} catch (const std::exception &) {
		return 1;
	}
	return 0;
}

__attribute__((noinline)) int catcher_c(int v)
{
	try {
		c_through(thrower, v);
	} catch (const std::exception &) {
		leaf(v); /* an entry from this frame: the stack pointer closes c_through and c_layer */
		return 1;
	}
	return 0;
}

__attribute__((noinline)) void after(void)
{
	leaf(0);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100, caught = 0;

	for (int i = 0; i < n; i++) {
		caught += catcher(i);
		after();
	}
	for (int i = 0; i < n; i++) {
		caught += catcher_c(i);
		after();
	}
	printf("caught %d\n", caught);
	return caught == 2 * n ? 0 : 1;
}
