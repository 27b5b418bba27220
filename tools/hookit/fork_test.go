package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"perfinsp/analysis/callflow"
)

// A forked child of a traced program records its own calls into its own
// files (testdata/forked.c). perf's counter pages are not copied into a
// child (VM_DONTCOPY), and the child's first hook read the parent's page
// through PTT's state: the child died of SIGSEGV and its calls were lost
// (a -O2 program forking a worker: 100 of 1,605 calls missing against
// uftrace). Its reports name its program and metric (its own info file).
func TestForkedChildRecords(t *testing.T) {
	const n = 100
	setup(t)
	prog := filepath.Join(t.TempDir(), "forked")
	if out, err := exec.Command("gcc", "-O1", "-finstrument-functions", "-pthread", "-o", prog, "testdata/forked.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	dir := runHookit(t, "--", prog, fmt.Sprint(n))
	procs, err := callflow.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 {
		t.Fatalf("%d processes, want 2 (the program and its child)", len(procs))
	}
	for _, p := range procs {
		var work uint64
		for _, tr := range callflow.Analyze(p).Trees {
			tr.Root.Walk(func(nd *callflow.Node) {
				if nd.Name == "work" {
					work += nd.Calls
				}
			})
		}
		child := len(p.Threads) == 1
		want := uint64(2)
		if child {
			want = n
		}
		if work != want {
			t.Errorf("pid %d (%d threads): work %d calls, want %d", p.Info.PID, len(p.Threads), work, want)
		}
		if p.Info.Metric == "" || filepath.Base(p.Info.Exe) != "forked" {
			t.Errorf("pid %d: info metric %q exe %q: want the program's", p.Info.PID, p.Info.Metric, p.Info.Exe)
		}
	}
}
