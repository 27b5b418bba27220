/* A2N naming test program: functions of several shapes for the stripped
 * copy (.eh_frame grouping), aliases, a zero-size FUNC symbol, an
 * assembler label (NOTYPE), a PLT call, and the vDSO's clock_gettime.
 * Prints the addresses the test checks, then waits on stdin. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

extern int lib_work(int);

__attribute__((noinline)) static int fn_static_leaf(int x) { return x * 7 + 3; }
__attribute__((noinline)) int fn_heavy(int x)
{
	int s = 0;
	for (int i = 0; i < x; i++)
		s += fn_static_leaf(i) ^ (s >> 3);
	return s;
}
__attribute__((noinline)) int fn_medium(int x) { return fn_heavy(x / 2) + x; }
__attribute__((noinline)) int fn_light(int x) { return x > 3 ? fn_medium(x - 1) : x; }

/* Aliases at one address: a global prefixed name, a weak unprefixed one, a
 * hidden internal one. The unprefixed name is what a user expects. */
__attribute__((noinline)) int __libc_fn_alias(int x) { return x + 11; }
extern int fn_alias(int) __attribute__((weak, alias("__libc_fn_alias")));
extern int __GI_fn_alias(int) __attribute__((alias("__libc_fn_alias"), visibility("hidden")));

/* A FUNC symbol of size 0 (owns nothing) followed by an assembler label
 * (NOTYPE, size 0: names its code, nothing else does). */
__asm__(".text\n"
	".globl fn_zero_size\n"
	".type fn_zero_size, @function\n"
	"fn_zero_size:\n"
	"	nop\n	nop\n	nop\n	nop\n"
	".globl asm_label\n"
	"asm_label:\n"
	"	mov %edi, %eax\n"
	"	ret\n");
extern int asm_label(int);
extern void fn_zero_size(void);

int main(int argc, char **argv)
{
	void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *cg = vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL;
	printf("%p %p %p %p %p %p %p %p %p\n", (void *)fn_heavy, (void *)fn_medium, (void *)fn_light,
	       (void *)fn_static_leaf, (void *)__libc_fn_alias, (void *)fn_zero_size,
	       (void *)asm_label, cg, (void *)lib_work);
	fflush(stdout);
	char c;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (read(0, &c, 1) < 0)
		return 1;
	return fn_light(argc + 5) + fn_alias(1) + __GI_fn_alias(2) + asm_label(3) + lib_work(4) + (int)ts.tv_nsec % 2 + (argv[0][0] == 0);
}
