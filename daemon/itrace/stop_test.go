package itrace

import (
	"bufio"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const spinner = `int main(void)
{
	volatile unsigned long n = 0;
	for (;;)
		n++;
}
`

// TestStopLeavesNoTrap: Stop interrupts a thread that is single-stepping.
// The interrupt's stop can come after a step's trap was queued and before
// it was delivered (the job-control trap is taken first); a thread
// detached there would die of that SIGTRAP. Over many Start/Stop cycles
// at random points of a busy loop the process must live on untraced.
func TestStopLeavesNoTrap(t *testing.T) {
	cmd := exec.Command(buildC(t, "spin", spinner))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	const cycles = 60
	pending := 0
	for i := 0; i < cycles; i++ {
		tr, err := Start(Options{PIDs: []int{pid}, Step: "single"}, &capture{})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		time.Sleep(time.Duration(rand.Intn(2000)) * time.Microsecond)
		st := tr.Stop()
		pending += int(st.TrapsDropped)
		time.Sleep(time.Millisecond) // a queued SIGTRAP is delivered as soon as the thread runs
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
			t.Fatalf("cycle %d: after Stop the process ended: %v (signal %v); %d queued traps dropped before", i, ws, ws.Signal(), pending)
		}
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("cycle %d: process gone after Stop: %v", i, err)
		}
	}
	t.Logf("%d Start/Stop cycles; %d times a step's trap was queued at the stop and dropped", cycles, pending)
}

func buildC(t *testing.T, name, text string) string {
	t.Helper()
	needTool(t, "gcc")
	dir := t.TempDir()
	src, prog := filepath.Join(dir, name+".c"), filepath.Join(dir, name)
	if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-O1", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return prog
}

// queuedTrap queues itself a SIGTRAP with a single step's si_code while
// SIGTRAP is blocked, says so, and spins: the tracer then unblocks
// SIGTRAP with PTRACE_SETSIGMASK at a PTRACE_INTERRUPT stop, which is the
// state the race leaves (a step's trap queued, the thread stopped for the
// interrupt before the trap was delivered), made at will.
const queuedTrap = `#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void)
{
	sigset_t s;
	siginfo_t si;
	volatile unsigned long n = 0;

	sigemptyset(&s);
	sigaddset(&s, SIGTRAP);
	sigprocmask(SIG_BLOCK, &s, NULL);
	memset(&si, 0, sizeof(si));
	si.si_signo = SIGTRAP;
	si.si_code = TRAP_TRACE;
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGTRAP, &si))
		return 2;
	printf("queued\n");
	fflush(stdout);
	for (;;)
		n++;
}
`

// TestDetachDropsAQueuedStepTrap: a thread stopped for an interrupt with
// a step's SIGTRAP queued dies of it when simply detached (the control),
// and lives on when the tracer's detach takes the trap first.
func TestDetachDropsAQueuedStepTrap(t *testing.T) {
	prog := buildC(t, "queuedtrap", queuedTrap)
	runtime.LockOSThread() // every ptrace request from this thread
	defer runtime.UnlockOSThread()
	for _, drop := range []bool{false, true} {
		cmd := exec.Command(prog)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "queued\n" {
			cmd.Process.Kill()
			t.Fatalf("queuedtrap said %q, %v", l, err)
		}
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0); e != 0 {
			cmd.Process.Kill()
			t.Fatalf("seize: %v", e)
		}
		var ws unix.WaitStatus
		if err := ptraceSig(unix.PTRACE_INTERRUPT, pid, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || ws.TrapCause() != unix.PTRACE_EVENT_STOP {
			t.Fatalf("interrupt: %v, status %v", err, ws)
		}
		var none uint64
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SETSIGMASK, uintptr(pid), 8, uintptr(unsafe.Pointer(&none)), 0, 0); e != 0 {
			t.Fatalf("setsigmask: %v", e)
		}
		if !stepTrapQueued(pid) {
			t.Fatal("the queued step trap is not seen")
		}
		tr := &Tracer{threads: map[int]*thread{}, earlyOut: map[int]bool{}, spaces: map[int]*insnCache{}}
		sig := 0
		if drop {
			sig = tr.dropStepTrap(&thread{tid: pid, pid: pid}, 0)
		}
		if err := ptraceSig(unix.PTRACE_DETACH, pid, sig); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		cmd.Process.Kill()
		cmd.Wait()
		died := got == pid && ws.Signaled() && ws.Signal() == unix.SIGTRAP
		switch {
		case !drop && !died:
			t.Fatalf("control: detached with the trap queued, the process did not die of SIGTRAP (status %v): the test does not make the race's state", ws)
		case drop && got == pid:
			t.Fatalf("detached after dropStepTrap, the process ended: %v", ws)
		case drop && tr.stats.TrapsDropped != 1:
			t.Fatalf("%d traps dropped, want 1", tr.stats.TrapsDropped)
		}
	}
}

// handled runs a SIGINT handler when told and says when the handler has
// returned (its main loop sees the flag the handler set).
const handled = `#include <signal.h>
#include <unistd.h>
static volatile sig_atomic_t flag;
static void on_int(int sig) { (void)sig; flag = 1; }
int main(void)
{
	volatile unsigned long n = 0;
	signal(SIGINT, on_int);
	write(1, "ready\n", 6);
	for (;;) {
		n++;
		if (flag) {
			flag = 0;
			write(1, "back\n", 5);
		}
	}
}
`

// TestStopAfterSignalHandler: a thread that ran a signal handler under
// the tracer and returned from it (rt_sigreturn, which leaves no system
// call number in orig_rax) is let go at Stop like any other, and runs on.
func TestStopAfterSignalHandler(t *testing.T) {
	cmd := exec.Command(buildC(t, "handled", handled))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	rd := bufio.NewReader(out)
	if l, err := rd.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("handled said %q, %v", l, err)
	}
	pid := cmd.Process.Pid
	tr, err := Start(Options{PIDs: []int{pid}, Step: "single"}, &capture{})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "back\n" {
		tr.Stop()
		t.Fatalf("after SIGINT handled said %q, %v", l, err)
	}
	stopped := make(chan Stats, 1)
	go func() { stopped <- tr.Stop() }()
	select {
	case st := <-stopped:
		if st.Signals == 0 {
			t.Errorf("the handled signal is not in the trace: %+v", st)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Stop did not let the thread go within 60 s of its handler's return")
	}
	// Untraced, it runs its handler again (a trap flag left set would kill
	// it with SIGTRAP first).
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "back\n" {
		t.Fatalf("after Stop and a second SIGINT handled said %q, %v", l, err)
	}
}
