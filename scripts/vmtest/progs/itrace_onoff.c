/*
 * ITraceOn / ITraceOff around one call (run.sh itrace): only traced_call
 * and what ITraceOn's and ITraceOff's own returns and calls run may be in
 * the trace; before_section and after_section must not. Without the
 * module (on the host under callgrind) ITraceOn fails and the program goes
 * on, so callgrind's count of traced_call is the expected one.
 */
#include <stdio.h>

#include "perfutil.h"

static volatile unsigned long sink;

__attribute__((noinline)) static void before_section(void)
{
	for (int i = 0; i < 50; i++)
		sink += i;
}

__attribute__((noinline)) static void traced_call(int n)
{
	for (int i = 0; i < n; i++)
		sink += i * 3;
}

__attribute__((noinline)) static void after_section(void)
{
	for (int i = 0; i < 70; i++)
		sink ^= i;
}

int main(void)
{
	int on;

	before_section();
	on = ITraceOn();
	traced_call(1000);
	if (on == 0 && ITraceOff() != 0)
		fprintf(stderr, "ITraceOff: %s\n", ITraceStrerror());
	after_section();
	if (on != 0)
		fprintf(stderr, "ITraceOn: %s\n", ITraceStrerror());
	printf("itrace_onoff: on=%d sink=%lu\n", on, sink);
	return 0;
}
