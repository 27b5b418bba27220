// Command pitest runs inside the VM test's guest: it checks trace files
// written through the pitrace module, drives the three modes, and hammers
// /dev/pitrace with random ioctls. Each subcommand prints what it checked
// and exits non-zero on a failed check.
//
//	pitest check-tprof FILE EXE      tprof samples name EXE's hot function first; MTE of the exited child
//	pitest modes                     normal / wrap / cont with small buffers
//	pitest badinput                  each ioctl's validation (EINVAL, ENOTTY, EFAULT, EPERM, ENOMEM)
//	pitest fuzz N SEED               N random ioctls (and mmaps)
//	pitest toggle N [STOPFILE]       up to N rounds of init/on/off/get (until STOPFILE exists), tolerant of concurrent fuzzers
//	pitest unmap FILE                map FILE executable and unmap it while tracing: MTE_SEGMENT and MTE_UNMAP
//	pitest holdmap                   map every buffer and sleep (to be killed)
//	pitest bench                     per-record cost in TSC ticks (guest instructions under -icount)
//	pitest stacks                    call stacks through the module: cpuburn's paths, truncation, kernel frames
//	pitest offcpu                    the module's WAKEUP and UNWIND_SWITCH: the waits example's sleeps and pipe reads in post's off-CPU profile against its clock
//	pitest schedbytes FILE           FILE's DISPATCH, WAKEUP and UNWIND_SWITCH records and their bytes per DISPATCH
//	pitest perfsched PROG N [g]      PROG N under perf's recording of the scheduler tracepoints (g: switch call chains): bytes per switch
//	pitest stacks-ratio              cpuburn's paths in the 60/30/10 ratio of its instructions (-icount VM)
//	pitest pttgo                     the Go PTT library on the module backend (tsc through the work area)
//	pitest itrace-count FILE         ITrace records in FILE and the trace buffers' lost records
//	pitest itrace-go                 the Go library's ITraceOn/ITraceOff on the module around one call
//	pitest itrace-cmp WANT GOT [FUNC...]  callgrind files: the same exclusive instructions and calls per function
//	pitest msr                       the MSR ioctls through the msr tool's code: TSC vs rdtsc, TSC_AUX, allowlist, faults, non-root
//	pitest pttmod [PTT]              perf metrics on the module: the Go library (tsc,page-faults) and the ptt tool PTT (default /bin/ptt) on a busy child
package main

import (
	"fmt"
	"os"
	"strconv"

	_ "perfinsp/libperfutil/backends"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "check-tprof":
		if len(os.Args) != 4 {
			usage()
		}
		err = checkTprof(os.Args[2], os.Args[3])
	case "modes":
		err = modes()
	case "badinput":
		err = badInput()
	case "fuzz":
		if len(os.Args) != 4 {
			usage()
		}
		n, _ := strconv.Atoi(os.Args[2])
		seed, _ := strconv.ParseInt(os.Args[3], 10, 64)
		err = fuzz(n, seed)
	case "toggle":
		if len(os.Args) < 3 {
			usage()
		}
		n, _ := strconv.Atoi(os.Args[2])
		stop := ""
		if len(os.Args) > 3 {
			stop = os.Args[3]
		}
		err = toggle(n, stop)
	case "unmap":
		if len(os.Args) != 3 {
			usage()
		}
		err = unmapCheck(os.Args[2])
	case "mteexec":
		if len(os.Args) != 4 {
			usage()
		}
		err = mteExec(os.Args[2], os.Args[3])
	case "agent-stop":
		err = agentStop()
	case "holdmap":
		err = holdMap()
	case "bench":
		err = bench(os.Args[2:])
	case "stacks":
		err = stacks()
	case "offcpu":
		err = offcpu()
	case "perfsched":
		err = perfSched(os.Args[2:])
	case "schedbytes":
		if len(os.Args) != 3 {
			usage()
		}
		err = schedBytes(os.Args[2])
	case "stacks-ratio":
		err = stacksRatio()
	case "pttgo":
		err = pttGo()
	case "pttmod":
		err = pttMod(os.Args[2:])
	case "itrace-count":
		if len(os.Args) != 3 {
			usage()
		}
		err = itraceCount(os.Args[2])
	case "itrace-go":
		err = itraceGo()
	case "itrace-exec":
		err = itraceExec(os.Args[2:])
	case "itrace-cmp":
		if len(os.Args) < 4 {
			usage()
		}
		err = itraceCmp(os.Args[2], os.Args[3], os.Args[4:])
	case "msr":
		err = msrTest(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pitest %s: FAIL: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: pitest check-tprof FILE EXE | modes | badinput | fuzz N SEED | toggle N [STOPFILE] | unmap FILE | mteexec DIR NAME | agent-stop | holdmap | bench | stacks | offcpu | schedbytes FILE | perfsched PROG N [g] | pttgo | pttmod [PTT] | msr | itrace-count FILE | itrace-go | itrace-cmp WANT GOT [FUNC...] | itrace-exec FILE N setuid=PID atexec=PID plain=PID")
	os.Exit(2)
}
