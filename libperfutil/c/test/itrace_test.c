/*
 * ITraceOn / ITraceOff / TraceHook from C: traces exactly one call of
 * itrace_target(); itrace_before() and itrace_after() run untraced. The Go
 * test libperfutil/itrace/control_test.go runs it and reads the trace.
 */
#include <stdio.h>
#include <stdint.h>

#include "perfutil.h"

static volatile unsigned long sink;

__attribute__((noinline)) void itrace_leaf(unsigned long i)
{
	sink += i;
}

__attribute__((noinline)) void itrace_before(void)
{
	for (unsigned long i = 0; i < 10; i++)
		itrace_leaf(i);
}

__attribute__((noinline)) void itrace_target(void)
{
	for (unsigned long i = 0; i < 7; i++)
		itrace_leaf(i);
}

__attribute__((noinline)) void itrace_after(void)
{
	itrace_before();
}

int main(void)
{
	uint32_t words[2] = { 1, 2 };

	itrace_before();
	if (TraceHook(0x1234, 1, words, 2) != 0) {
		fprintf(stderr, "TraceHook: %s\n", ITraceStrerror());
		return 1;
	}
	if (ITraceOn() != 0) {
		fprintf(stderr, "ITraceOn: %s\n", ITraceStrerror());
		return 1;
	}
	itrace_target();
	if (ITraceOff() != 0) {
		fprintf(stderr, "ITraceOff: %s\n", ITraceStrerror());
		return 1;
	}
	itrace_after();
	if (ITraceOff() == 0) {
		fprintf(stderr, "a second ITraceOff succeeded\n");
		return 1;
	}
	printf("itrace C test done\n");
	return 0;
}
