package itrace

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMaxInsnsEndsTheSession: a session with an instruction limit ends by
// itself once it traced that many instructions (within one block), says
// so, and lets the process run on untraced.
func TestMaxInsnsEndsTheSession(t *testing.T) {
	cmd := exec.Command(buildC(t, "spin", spinner))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	const max = 20000
	tr, err := Start(Options{PIDs: []int{pid}, Step: "single", MaxInsns: max}, &capture{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Minute):
		tr.Stop()
		t.Fatal("the session did not end at its instruction limit")
	}
	st := tr.Stats()
	if !st.LimitReached || st.Instructions < max || st.Instructions > max+64 {
		t.Fatalf("limit %d: LimitReached %v after %d instructions", max, st.LimitReached, st.Instructions)
	}
	var ws syscall.WaitStatus
	if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
		t.Fatalf("the process ended when the session did: %v", ws)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("process gone after the limit: %v", err)
	}
	t.Logf("limit %d: the session ended after %d instructions, %d records", max, st.Instructions, st.Records)
}

// manyThreads N hold|forever|churn: N threads, all alive at once. With
// hold the program first reads a byte from its standard input (so a
// tracer can attach before any thread exists), and the threads end
// together once the last is created (then "done N"); with forever they
// sleep until killed and the program says "ready" once they all exist;
// with churn it says "ready" and then creates and joins threads, N at a
// time, until killed.
const manyThreads = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int gate[2];
static void *run(void *a)
{
	char c;
	(void)a;
	while (read(gate[0], &c, 1) != 0)
		;
	return NULL;
}
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), i;
	pthread_t t[4096];
	if (pipe(gate))
		return 1;
	if (strcmp(argv[2], "churn") == 0) {
		close(gate[1]);
		printf("ready\n");
		fflush(stdout);
		for (;;) {
			for (i = 0; i < n; i++)
				if (pthread_create(&t[i], NULL, run, NULL))
					return 1;
			for (i = 0; i < n; i++)
				pthread_join(t[i], NULL);
		}
	}
	if (strcmp(argv[2], "hold") == 0 && read(0, &argc, 1) != 1)
		return 1;
	for (i = 0; i < n && i < 4096; i++)
		if (pthread_create(&t[i], NULL, run, NULL))
			return 1;
	if (strcmp(argv[2], "forever") == 0) {
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	close(gate[1]);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("done %d\n", n);
	return 0;
}
`

// taskStates returns each thread's state letter and tracer pid.
func taskStates(t *testing.T, pid int) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/task/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var state, tracer string
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "State:\t"); ok {
				state = v[:1]
			}
			if v, ok := strings.CutPrefix(l, "TracerPid:\t"); ok {
				tracer = v
			}
		}
		tid, _ := strconv.Atoi(e.Name())
		out[tid] = state + " tracer " + tracer
	}
	return out
}

// TestTooManyThreadsRefusedAtAttach: a process with more threads than a
// session may trace is refused at once, and the threads attached before
// the limit was found are let go: none is left traced or stopped.
func TestTooManyThreadsRefusedAtAttach(t *testing.T) {
	cmd := startReady(t, "40", "forever")
	pid := cmd.Process.Pid
	tr, err := Start(Options{PIDs: []int{pid}, Step: "single", MaxThreads: 8}, &capture{})
	if err == nil {
		tr.Stop()
		t.Fatal("a 41-thread process attached by a session of at most 8 threads")
	}
	if !strings.Contains(err.Error(), "more than 8 threads") {
		t.Fatalf("refusal: %v, want the limit named", err)
	}
	for tid, st := range taskStates(t, pid) {
		if !strings.HasSuffix(st, "tracer 0") || strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") {
			t.Errorf("thread %d after the refusal: %s", tid, st)
		}
	}
}

// TestThreadsPastTheLimitRunUntraced: a traced process that creates many
// threads (a member's way to make its tracer hold without bound) has
// those past the session's limit let go untraced, counted, and it runs to
// its end.
func TestThreadsPastTheLimitRunUntraced(t *testing.T) {
	const n, max = 64, 4
	cmd := exec.Command(buildC(t, "many", manyThreads), itoa(n), "hold")
	var out strings.Builder
	cmd.Stdout = &out
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	tr, err := Start(Options{PIDs: []int{cmd.Process.Pid}, MaxThreads: max}, &capture{})
	if err != nil {
		t.Fatal(err)
	}
	// Attached to the one thread the program has: now it makes the rest.
	if _, err := gate.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Minute):
		tr.Stop()
		t.Fatal("the session did not end with the process")
	}
	// The tracer, a thread of this process, may reap the program before
	// cmd.Wait does (ECHILD): its last line says it ran to its end.
	if err := cmd.Wait(); (err != nil && !errors.Is(err, syscall.ECHILD)) || out.String() != "done 64\n" {
		t.Fatalf("the traced program: %v %q", err, out.String())
	}
	st := tr.Stats()
	// All n+1 threads are alive at once: the first max are traced.
	if st.ThreadsLeftOut != n+1-max {
		t.Fatalf("%d threads left out, want %d: %d threads at once, %d traced", st.ThreadsLeftOut, n+1-max, n+1, max)
	}
	t.Logf("%d threads left out, %d instructions traced", st.ThreadsLeftOut, st.Instructions)
}

// TestAttachWhileThreadsAreCreated: attaching to a process that creates
// threads all the time succeeds. A thread its seized creator makes while
// the session attaches is traced already, by the session itself: it is
// taken when it first stops, not refused as "traced by another". And the
// sessions' ends leave the process alive and untraced: a thread stepped
// into a system call and stopped by the end can report that step's trap
// once the call completes, after its detach, and die of it; a thread
// created at the end is let go, not left to the tracer's exit. The race
// is rare (about one session in ten thousand before it was handled):
// 10,000 sessions.
func TestAttachWhileThreadsAreCreated(t *testing.T) {
	cmd := startReady(t, "8", "churn")
	pid := cmd.Process.Pid
	for i := 0; i < 10000; i++ {
		tr, err := Start(Options{PIDs: []int{pid}}, &capture{})
		if err != nil {
			t.Fatalf("attach %d to a process creating threads: %v%s", i, err, ended(cmd))
		}
		tr.Stop()
		<-tr.Done()
		if e := ended(cmd); e != "" {
			t.Fatalf("after session %d%s", i, e)
		}
		for tid, st := range taskStates(t, pid) {
			if !strings.HasSuffix(st, "tracer 0") {
				t.Fatalf("after session %d, thread %d: %s", i, tid, st)
			}
		}
	}
}

// ended says how cmd's process ended, when it has ("" while it runs).
func ended(cmd *exec.Cmd) string {
	b, err := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/stat")
	if err == nil && !strings.Contains(string(b), ") Z ") {
		return ""
	}
	_ = cmd.Wait()
	return fmt.Sprintf(": the process ended (%v)", cmd.ProcessState)
}

// startReady starts manyThreads with args (forever or churn), dying with
// the test, and waits for its "ready".
func startReady(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return startProgram(t, "many", manyThreads, args...)
}

// startProgram builds the C program src (name), starts it with args,
// dying with the test, and waits for its "ready".
func startProgram(t *testing.T, name, src string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(buildC(t, name, src), args...)
	dieWithTest(cmd)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("the program: %q %v", l, err)
	}
	return cmd
}

// dieWithTest makes a program that runs until killed die with the test
// too (a timeout does not run the test's deferred kill): the kernel kills
// it when the thread that started it ends, so the test keeps its thread
// (locked, never unlocked: the thread ends with the test's goroutine; a
// tracer's locked thread, which ends with its session, never starts it).
func dieWithTest(cmd *exec.Cmd) {
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// vforker says "ready", then vforks children that exit at once, until
// killed.
const vforker = `#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		pid_t c = vfork();
		if (c == 0)
			_exit(0);
		if (c > 0)
			waitpid(c, 0, 0);
	}
}
`

// TestSessionsEndWhileVforking: sessions following children end while
// the process vforks all the time (a vfork's parent waits for its child,
// which the session holds at its first stop until the session lets it
// go): every session ends, the process lives on untraced.
func TestSessionsEndWhileVforking(t *testing.T) {
	cmd := startProgram(t, "vforker", vforker)
	pid := cmd.Process.Pid
	for i := 0; i < 300; i++ {
		tr, err := Start(Options{PIDs: []int{pid}, Follow: true}, &capture{})
		if err != nil {
			t.Fatalf("attach %d to a process vforking: %v%s", i, err, ended(cmd))
		}
		go tr.Stop() // (Stop waits for the end)
		select {
		case <-tr.Done():
		case <-time.After(time.Minute):
			t.Fatalf("session %d did not end in a minute", i)
		}
		if e := ended(cmd); e != "" {
			t.Fatalf("after session %d%s", i, e)
		}
		for tid, st := range taskStates(t, pid) {
			if !strings.HasSuffix(st, "tracer 0") {
				t.Fatalf("after session %d, thread %d: %s", i, tid, st)
			}
		}
	}
}
