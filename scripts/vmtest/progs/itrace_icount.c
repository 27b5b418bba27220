// SPDX-License-Identifier: GPL-2.0
/*
 * itrace_icount: one section of the -icount identity test (run.sh icount,
 * scripts/vmtest/guest/icount.sh).  The calling thread traces itself with
 * PITRACE_IOC_ITRACE_ON (SELF) and _OFF issued by `syscall` instructions in
 * the same asm block as the section, so the user instructions traced are
 * known exactly: the section's, then the four register moves and the
 * syscall of ITRACE_OFF.  It prints the module's ITRACE_STATS: the terms of
 * "user instructions + kernel instructions = TSC delta".
 *
 *   itrace_icount nops200 | nops400 | sys | fault | sig | mix
 *   (sig: 10 signals sent with tkill to the thread itself, each running a
 *    one-instruction handler and libc's two-instruction restorer)
 *   itrace_icount popf      (clears TF itself, then 10 instructions: all traced)
 *   itrace_icount touch     (not traced: TSC ticks per page fault of 256 fresh
 *                            pages, the cost an ITrace on elsewhere adds)
 *
 * Tracing must be on (swtrace init; swtrace on).  Built with -mno-red-zone:
 * the sections call and push below the C frame's stack pointer.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pitrace.h"

extern const char __executable_start[], etext[];

#define NSYS	20	/* getppid calls of section sys */
#define NFAULT	16	/* fresh pages written by section fault */
#define NSIGS	10	/* signals of section sig */

/* the handler: one instruction (libc's restorer adds two: mov, syscall) */
asm(".pushsection .text\n\t.globl icount_handler\n\t.type icount_handler, @function\n"
    "icount_handler:\n\tret\n\t.popsection");
void icount_handler(int sig);

/* tkill(r8 = own tid, SIGUSR1): 4 instructions, the handler's 1, the restorer's 2 */
#define SIG_BODY "mov %%r8, %%rdi\n\tmov $10, %%esi\n\tmov $200, %%eax\n\tsyscall\n\t"
#define SIG_INSNS (4 + 1 + 2)

/* the ITRACE_ON syscall, the section, the ITRACE_OFF syscall */
#define SECTION(body)							\
	"mov %%r12, %%rdi\n\tmov %%r13, %%rsi\n\tmov %%r14, %%rdx\n\t"	\
	"mov $16, %%eax\n\tsyscall\n\t"					\
	body								\
	"mov %%r12, %%rdi\n\tmov %%r15, %%rsi\n\tmov %%rbx, %%rdx\n\t"	\
	"mov $16, %%eax\n\tsyscall\n\t"

#define REPT(n, insn) ".rept " #n "\n\t" insn "\n\t.endr\n\t"

/* the user instructions of SECTION("") that ITrace sees: OFF's five */
#define FRAME_INSNS 5

struct run {
	long fd, on_cmd, off_cmd;
	struct pitrace_itrace_on *on;
	struct pitrace_itrace_off *off;
	char *pages;
};

#define RUN(r, body)							\
	do {								\
		register long r12 asm("r12") = (r)->fd;			\
		register long r13 asm("r13") = (r)->on_cmd;		\
		register long r14 asm("r14") = (long)(r)->on;		\
		register long r15 asm("r15") = (r)->off_cmd;		\
		register long rbx asm("rbx") = (long)(r)->off;		\
		register long r8 asm("r8") = (long)(r)->pages;		\
		asm volatile(SECTION(body)				\
			     : "+r"(r8)					\
			     : "r"(r12), "r"(r13), "r"(r14), "r"(r15),	\
			       "r"(rbx)					\
			     : "rax", "rcx", "rdx", "rsi", "rdi", "r9",	\
			       "r10", "r11", "memory", "cc");		\
	} while (0)

/*
 * mix: a loop of 30 calls to a two-instruction leaf, a conditional branch
 * per iteration, a system call, two page faults (r8: fresh pages), and a
 * signal to the thread itself (gettid, tkill: its handler runs).
 */
#define MIX_BODY							\
	"mov $30, %%r9\n\t"						\
	"jmp 2f\n\t"							\
	"1: add $3, %%r10\n\t"						\
	"ret\n\t"							\
	"2: call 1b\n\t"						\
	"test $1, %%r9\n\t"						\
	"jz 3f\n\t"							\
	"add $1, %%r10\n\t"						\
	"3: dec %%r9\n\t"						\
	"jnz 2b\n\t"							\
	"mov $110, %%eax\n\tsyscall\n\t"				\
	"movb $1, (%%r8)\n\tadd $4096, %%r8\n\t"			\
	"movb $1, (%%r8)\n\t"						\
	"mov $186, %%eax\n\tsyscall\n\tmov %%rax, %%r8\n\t"		\
	SIG_BODY

/* the stack below main's frame present: the signal frames go there */
__attribute__((noinline)) static void touch_stack(void)
{
	volatile char buf[64 * 1024];

	for (unsigned int i = 0; i < sizeof(buf); i += 1024)
		buf[i] = 0;
}

static inline uint64_t tsc(void)
{
	uint32_t lo, hi;

	asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
}

static int touch(void)
{
	enum { N = 256 };
	volatile char *p = mmap(NULL, N * 4096, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t t0, t1;

	if (p == MAP_FAILED) {
		perror("itrace_icount: mmap");
		return 1;
	}
	t0 = tsc();
	for (int i = 0; i < N; i++)
		p[i * 4096] = 1;
	t1 = tsc();
	printf("touch: %llu ticks for %d page faults\n",
	       (unsigned long long)(t1 - t0), N);
	return 0;
}

int main(int argc, char **argv)
{
	struct pitrace_itrace_on on;
	struct pitrace_itrace_off off;
	struct pitrace_itrace_stats st;
	struct run r;
	const char *what = argc > 1 ? argv[1] : "";
	long expect = -1;	/* user instructions, where known a priori */

	if (!strcmp(what, "touch"))
		return touch();
	memset(&on, 0, sizeof(on));
	memset(&off, 0, sizeof(off));
	memset(&st, 0, sizeof(st));
	on.flags = PITRACE_ITRACE_SELF;
	off.flags = PITRACE_ITRACE_SELF;
	r.fd = open(PITRACE_DEVICE, O_RDWR);
	if (r.fd < 0) {
		perror("itrace_icount: open " PITRACE_DEVICE);
		return 1;
	}
	r.on_cmd = PITRACE_IOC_ITRACE_ON;
	r.off_cmd = PITRACE_IOC_ITRACE_OFF;
	r.on = &on;
	r.off = &off;
	r.pages = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r.pages == MAP_FAILED) {
		perror("itrace_icount: mmap");
		return 1;
	}
	/* the sections' code pages present: no instruction-fetch fault inside */
	for (const volatile char *c = __executable_start; c < etext; c += 4096)
		(void)*c;
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = icount_handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL)) {
		perror("itrace_icount: sigaction");
		return 1;
	}
	touch_stack();
	if (!strcmp(what, "nops200")) {
		RUN(&r, REPT(200, "nop"));
		expect = 200 + FRAME_INSNS;
	} else if (!strcmp(what, "nops400")) {
		RUN(&r, REPT(400, "nop"));
		expect = 400 + FRAME_INSNS;
	} else if (!strcmp(what, "sys")) {
		RUN(&r, REPT(20, "mov $110, %%eax\n\tsyscall"));
		expect = 2 * NSYS + FRAME_INSNS;
	} else if (!strcmp(what, "fault")) {
		RUN(&r, REPT(16, "movb $1, (%%r8)\n\tadd $4096, %%r8"));
		expect = 2 * NFAULT + FRAME_INSNS;
	} else if (!strcmp(what, "sig")) {
		struct run rs = r;

		rs.pages = (char *)syscall(SYS_gettid);
		RUN(&rs, REPT(10, SIG_BODY)); /* NSIGS */
		expect = NSIGS * SIG_INSNS + FRAME_INSNS;
	} else if (!strcmp(what, "mix")) {
		RUN(&r, MIX_BODY);
		/*
		 * 2 + 30 x (call, add, ret, test, jz, dec, jnz) + 15 adds + 2 + 3,
		 * gettid's 3, the signal's 7
		 */
		expect = 2 + 30 * 7 + 15 + 2 + 3 + 3 + SIG_INSNS + FRAME_INSNS;
	} else if (!strcmp(what, "popf")) {
		/* popf of a flags word without TF, then ten nops */
		RUN(&r, "pushfq\n\tandq $-257, (%%rsp)\n\tpopfq\n\t" REPT(10, "nop"));
		expect = 3 + 10 + FRAME_INSNS;
	} else {
		fprintf(stderr, "usage: itrace_icount nops200|nops400|sys|fault|sig|mix|popf|touch\n");
		return 2;
	}
	if (off.threads != 1) {
		fprintf(stderr, "itrace_icount: ITRACE_OFF stopped %u threads (ITRACE_ON failed? tracing on?)\n",
			off.threads);
		return 1;
	}
	if (ioctl(r.fd, PITRACE_IOC_ITRACE_STATS, &st)) {
		fprintf(stderr, "itrace_icount: ITRACE_STATS: %s\n", strerror(errno));
		return 1;
	}
	printf("icount: %s expect %ld instructions %llu span %llu traps %llu trap_tsc %llu syscalls %llu sys_tsc %llu interrupts %llu irq_tsc %llu faults %llu fault_tsc %llu reps %llu signals %llu sig_tsc %llu\n",
	       what, expect, (unsigned long long)st.instructions,
	       (unsigned long long)(st.end_tsc - st.start_tsc),
	       (unsigned long long)st.traps, (unsigned long long)st.trap_tsc,
	       (unsigned long long)st.syscalls, (unsigned long long)st.sys_tsc,
	       (unsigned long long)st.interrupts, (unsigned long long)st.irq_tsc,
	       (unsigned long long)st.faults, (unsigned long long)st.fault_tsc,
	       (unsigned long long)st.reps, (unsigned long long)st.signals,
	       (unsigned long long)st.sig_tsc);
	return 0;
}
