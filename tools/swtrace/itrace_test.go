package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
)

// itraceEnds counts the ITRACE_END records by reason, and the instructions
// of the branch records.
func itraceEnds(t *testing.T, path string) (map[uint64]int, int) {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ends, branches := map[uint64]int{}, 0
	err = f.Records(func(r *trace.Record) error {
		switch {
		case r.Major == trace.MajorITraceU && r.Minor == trace.ITraceEnd:
			ends[r.Field(4)]++
		case r.Major == trace.MajorITraceU && r.Minor <= trace.ITraceUndefd:
			branches++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ends, branches
}

// waitTraced waits until pid has a tracer (TracerPid != 0), or not.
func waitTraced(t *testing.T, pid int, traced bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Fatalf("process %d: %v", pid, err)
		}
		on := !strings.Contains(string(b), "TracerPid:\t0\n")
		if on == traced {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d: traced should be %v", pid, traced)
}

// TestITraceOffFromAnotherShell: itrace on -p PID of a running process,
// then itrace off from another swtrace: the process goes on untraced and
// finishes normally; its threads' traces end with reason "off".
func TestITraceOffFromAnotherShell(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("init", "-t", "16M")
	e.Sw("disable", "tprof") // the buffers then hold ITrace records only
	e.Sw("on")
	// Two threads busy in a loop for a while (the example's worker and main).
	cmd := exec.Command(e.Burn, "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	out := e.Sw("itrace", "on", "-p", strconv.Itoa(pid))
	if !strings.Contains(out, "itrace on: session") {
		t.Fatalf("itrace on: %s", out)
	}
	waitTraced(t, pid, true)
	waitRecords(t, e, 500) // branches are recorded: the assertion below needs them
	out = e.Sw("itrace", "off", strconv.Itoa(pid))
	if !strings.Contains(out, "itrace off: 1 sessions") {
		t.Fatalf("itrace off: %s", out)
	}
	waitTraced(t, pid, false)
	// The process runs on, untraced: it still answers signals normally.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Fatalf("after itrace off the process did not end by SIGINT: %v", err)
	}
	e.Sw("off")
	e.Sw("get", "off.nrm2")
	ends, branches := itraceEnds(t, filepath.Join(e.Dir, "off.nrm2"))
	if ends[trace.ITraceEndOff] < 1 || branches == 0 {
		t.Fatalf("ITRACE_END by reason %v, %d branch records: want the threads ended by off (2)", ends, branches)
	}
	if out, code := e.SwCode("itrace", "off", strconv.Itoa(pid)); code == 0 {
		t.Fatalf("itrace off of a process no longer traced succeeded: %s", out)
	}
}

// waitRecords waits until the trace buffers hold at least n records.
func waitRecords(t *testing.T, e *tracetest.Env, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, l := range strings.Split(e.Sw("info"), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "all" {
				if got, _ := strconv.Atoi(f[1]); got >= n {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the buffers never held %d records:\n%s", n, e.Sw("info"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestITraceKilledMidTrace: a traced process killed with SIGKILL ends its
// trace (reason exit) and swtrace off does not wait for it.
func TestITraceKilledMidTrace(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("init", "-t", "16M")
	e.Sw("disable", "tprof") // the buffers then hold ITrace records only
	e.Sw("on")
	cmd := exec.Command(e.Burn, "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	e.Sw("itrace", "on", "-p", strconv.Itoa(pid))
	waitTraced(t, pid, true)
	waitRecords(t, e, 500) // it is being stepped
	cmd.Process.Kill()
	cmd.Wait()
	e.Sw("off")
	e.Sw("get", "kill.nrm2")
	ends, branches := itraceEnds(t, filepath.Join(e.Dir, "kill.nrm2"))
	if ends[trace.ITraceEndExit] < 1 || branches == 0 {
		t.Fatalf("ITRACE_END by reason %v, %d branch records: want the threads ended by exit (1)", ends, branches)
	}
	// Tracing needs the facility on, and something to trace.
	if out, code := e.SwCode("itrace", "on", "-p", strconv.Itoa(os.Getpid())); code == 0 || !strings.Contains(out, "swtrace on") {
		t.Fatalf("itrace on with tracing off: exit %d\n%s", code, out)
	}
	if out, code := e.SwCode("itrace", "on"); code != 2 || !strings.Contains(out, "say what to trace") {
		t.Fatalf("itrace on without pids: exit %d\n%s", code, out)
	}
}

// TestITraceFillsTheBuffers: in normal mode ITrace fills a small buffer;
// tracing stops, the traced process is let go and runs on, and the trace
// says the buffer filled.
func TestITraceFillsTheBuffers(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("init", "-t", "64K")
	e.Sw("disable", "tprof") // the buffers fill with ITrace records, not ticks (more of them on a busy machine)
	e.Sw("on")
	cmd := exec.Command(e.Burn, "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	e.Sw("itrace", "on", "-p", strconv.Itoa(pid))
	// 64 KB per CPU holds a few thousand branch records: the buffer fills,
	// the facility turns off and the process is detached.
	waitTraced(t, pid, false)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.Sw("info"), "state: off") {
		if time.Now().After(deadline) {
			t.Fatalf("tracing did not stop when the buffer filled:\n%s", e.Sw("info"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Fatalf("after the buffer filled the process did not run on and end by SIGINT: %v", err)
	}
	e.Sw("get", "full.nrm2")
	f, err := nrm2.Open(filepath.Join(e.Dir, "full.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	branches := 0
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorITraceU && r.Minor <= trace.ITraceUndefd {
			branches++
		}
		return nil
	})
	if f.Header.Flags&nrm2.FlagBufferFull == 0 || branches < 500 {
		t.Fatalf("file flags %#x (want buffer full), %d branch records", f.Header.Flags, branches)
	}
}

const forker = `#include <sys/wait.h>
#include <unistd.h>
int main(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(3);
	int st;
	waitpid(p, &st, 0);
	return WEXITSTATUS(st) == 3 ? 0 : 1;
}
`

// TestITraceFollowsChildrenOnlyWithF: a process that forks is traced alone,
// and with -f its child too (from the fork on, in its own address space).
func TestITraceFollowsChildrenOnlyWithF(t *testing.T) {
	e := tracetest.Setup(t)
	src := filepath.Join(e.Dir, "forker.c")
	prog := filepath.Join(e.Bin, "forker")
	os.WriteFile(src, []byte(forker), 0o644)
	if out, err := exec.Command("gcc", "-O1", "-static", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, follow := range []bool{false, true} {
		e.Sw("init", "-t", "16M")
		e.Sw("on", "--discard")
		cmd := exec.Command("sh", "-c", `kill -STOP $$; exec "$0"`, prog)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'T' {
				break
			}
			time.Sleep(time.Millisecond)
		}
		args := []string{"itrace", "on", "--at-exec", "-p", strconv.Itoa(pid)}
		if follow {
			args = append(args, "-f")
		}
		e.Sw(args...)
		cmd.Process.Signal(syscall.SIGCONT)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("forker (follow %v): %v", follow, err)
		}
		e.Sw("off")
		e.Sw("get", "fork.nrm2")
		f, err := nrm2.Open(filepath.Join(e.Dir, "fork.nrm2"))
		if err != nil {
			t.Fatal(err)
		}
		pids := map[uint64]int{}
		_ = f.Records(func(r *trace.Record) error {
			if r.Major == trace.MajorITraceU && r.Minor == trace.ITraceEnd {
				pids[r.Field(0)] += int(r.Field(2))
			}
			return nil
		})
		want := 1
		if follow {
			want = 2
		}
		if len(pids) != want || pids[uint64(pid)] == 0 {
			t.Errorf("follow %v: threads ended per pid %v, want %d processes (the forker %d first)", follow, pids, want, pid)
		}
	}
}

// TestITraceContinuous: in continuous mode an ITrace larger than the
// buffers streams to the file; every record the tracer wrote is in the
// file or counted as lost.
func TestITraceContinuous(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("init", "-t", "64K", "-m", "64K")
	e.Sw("disable", "tprof") // ITrace records only in the trace buffers
	e.Sw("mode", "cont", "-f", "cont.nrm2")
	e.Sw("on")
	cmd := exec.Command(e.Burn, "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	e.Sw("itrace", "on", "-p", strconv.Itoa(pid))
	// Wait until ITrace wrote twice what the trace buffers hold.
	waitRecords(t, e, 2*runtime.NumCPU()*(64<<10)/28)
	path := filepath.Join(e.Dir, "cont.nrm2")
	out := e.Sw("itrace", "off", "-p", strconv.Itoa(pid))
	var sessions, threads, written int
	var insts uint64
	if _, err := fmt.Sscanf(out, "itrace off: %d sessions, %d threads, %d instructions, %d records", &sessions, &threads, &insts, &written); err != nil {
		t.Fatalf("itrace off said %q: %v", out, err)
	}
	e.Sw("off")
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	inFile := 0
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorITraceU || r.Major == trace.MajorITraceK {
			inFile++
		}
		return nil
	})
	lost, _ := f.Lost()
	t.Logf("tracer wrote %d records; %d in the file, %d lost", written, inFile, lost)
	if inFile+int(lost) != written {
		t.Fatalf("tracer wrote %d ITrace records; the file holds %d and counts %d lost", written, inFile, lost)
	}
	if capacity := int(f.Header.NCPUs) * 64 << 10; inFile*28 <= capacity {
		t.Fatalf("the file holds %d ITrace records (%d bytes at least), not more than the trace buffers (%d bytes)", inFile, inFile*28, capacity)
	}
}
