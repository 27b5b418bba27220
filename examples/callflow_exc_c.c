// SPDX-License-Identifier: GPL-2.0
/*
 * callflow_exc_c.c - C frames between a C++ throw and its catch
 * (examples/callflow_exc.cc). Built with -finstrument-functions and without
 * -fexceptions: the unwinder passes them (x86-64 has unwind tables by
 * default) but runs no cleanup, so their exit events are missed.
 */
void c_layer(void (*f)(int), int v)
{
	f(v);
	__asm__ volatile("" ::: "memory");
}

void c_through(void (*f)(int), int v)
{
	c_layer(f, v);
	__asm__ volatile("" ::: "memory");
}
