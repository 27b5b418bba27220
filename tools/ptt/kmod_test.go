package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"perfinsp/libperfutil/ptt"
)

func TestKmodBackendWithoutModule(t *testing.T) {
	if _, err := os.Stat("/dev/pitrace"); err == nil {
		t.Skip("the pitrace module is loaded here (the VM test covers ptt on the module)")
	}
	env := agentEnv(t)
	cmd := exec.Command(pttBin, "on", "-p", "1")
	cmd.Env = append(env, "PERFINSP_BACKEND=kmod")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "kmod is not available: module not loaded") {
		t.Errorf("ptt on with PERFINSP_BACKEND=kmod and no module: %v %q", err, out)
	}
	cmd = exec.Command(pttBin, "on", "-p", "1")
	cmd.Env = append(env, "PERFINSP_BACKEND=bogus")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `"bogus"`) || !strings.Contains(string(out), "use kmod, daemon or auto") {
		t.Errorf("unknown backend: %v %q", err, out)
	}
}

func TestPrintDumpModule(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	d := &ptt.Dump{Backend: "kmod", Metrics: []string{"tsc", "page-faults"}, Target: "pid 42", Started: time.Unix(0, 0), Note: "backend kmod (pitrace module): asynchronous interrupts are factored out",
		Threads: []ptt.ThreadDump{{Pid: 42, Tid: 43, Name: "burn", Values: map[string]uint64{"tsc": 123456, "page-faults": 77},
			Dispatches: u(5), Interrupts: u(9), InterruptTime: u(999), InterruptValues: map[string]uint64{"tsc": 999, "page-faults": 1}, Running: true}},
		CPUs: []ptt.CPUBucket{{CPU: 0, Interrupts: 31, TSC: 5555, Values: map[string]uint64{"tsc": 5555, "page-faults": 2}}}}
	var b strings.Builder
	printDump(&b, d)
	out := b.String()
	for _, w := range []string{"INTR-tsc", "INTR-page-faults", "123456", "(running)", "per-CPU interrupt buckets", "5555", "factored out"} {
		if !strings.Contains(out, w) {
			t.Errorf("text dump lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "n/a") {
		t.Errorf("module dump shows n/a:\n%s", out)
	}
	t.Logf("\n%s", out)
}
