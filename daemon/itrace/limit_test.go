package itrace

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const threadsC = `#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static pthread_barrier_t all;
static volatile unsigned long sink;
static void *work(void *arg) {
	(void)arg;
	pthread_barrier_wait(&all); /* every thread exists at once */
	for (int i = 0; i < 1000; i++)
		sink += i;
	return 0;
}
static void *hold(void *arg) { (void)arg; sleep(60); return 0; }
int main(int argc, char **argv) {
	pthread_t t[4];
	if (argc > 1 && strcmp(argv[1], "hold") == 0) {
		pthread_create(&t[0], 0, hold, 0);
		printf("ready\n");
		fflush(stdout);
		sleep(60);
		return 0;
	}
	pthread_barrier_init(&all, 0, 5);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], 0, work, 0);
	pthread_barrier_wait(&all);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], 0);
	printf("ok %lu\n", sink);
	return 0;
}
`

func buildThreads(t *testing.T) string {
	t.Helper()
	needTool(t, "gcc")
	prog := filepath.Join(t.TempDir(), "threads")
	if err := os.WriteFile(prog+".c", []byte(threadsC), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", "-O2", "-pthread", "-o", prog, prog+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return prog
}

// TestThreadLimitPerSession: a tracer holds at most MaxThreads threads: a
// process with more is refused at attach, and threads created past the
// limit run untraced (counted) while the program runs to its normal end.
func TestThreadLimitPerSession(t *testing.T) {
	prog := buildThreads(t)

	held := exec.Command(prog, "hold")
	out, _ := held.StdoutPipe()
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { held.Process.Kill(); held.Wait() }()
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("hold: %q %v", l, err)
	}
	if tr, err := Start(Options{PIDs: []int{held.Process.Pid}, MaxThreads: 1}, &capture{}); err == nil {
		tr.Stop()
		t.Error("a 2-thread process was attached with a limit of 1 thread")
	} else if !strings.Contains(err.Error(), "the limit of one session") {
		t.Errorf("attach past the limit: %v", err)
	}

	cmd := exec.Command("sh", "-c", `kill -STOP $$; exec "$0"`, prog)
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, cmd.Process.Pid, 'T')
	tr, err := Start(Options{PIDs: []int{cmd.Process.Pid}, AtExec: true, MaxThreads: 2}, &capture{})
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	waitTracerDone(t, tr)
	_ = cmd.Wait() // the tracer, in this process, may have reaped it already
	st := tr.Stats()
	if !strings.HasPrefix(b.String(), "ok ") {
		t.Errorf("the program under a 2-thread limit wrote %q", b.String())
	}
	if st.ThreadsLeftOut != 3 || st.Instructions == 0 {
		t.Errorf("%d threads left out, %d instructions traced; want 3 left out (main and one worker traced)", st.ThreadsLeftOut, st.Instructions)
	}
}
