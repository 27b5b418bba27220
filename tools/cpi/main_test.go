package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"perfinsp/libperfutil/events"
)

func runCPI(hasPMU func() bool, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	rc := run(append([]string{"cpi"}, args...), &out, &errb, hasPMU)
	return out.String(), errb.String(), rc
}

// Without a hardware PMU: exactly one line, exit 1, nothing on stdout, and
// the command is not run.
func TestNoPMUOneLine(t *testing.T) {
	marker := t.TempDir() + "/ran"
	for _, args := range [][]string{
		{"--", "sh", "-c", "touch " + marker},
		{"-p", strconv.Itoa(os.Getpid())},
		{"-a", "-d", "1"},
	} {
		out, errs, rc := runCPI(func() bool { return false }, args...)
		if rc != 1 || out != "" || errs != "cpi: "+errNoPMU+"\n" {
			t.Errorf("cpi %q without a PMU: exit %d stdout %q stderr %q", args, rc, out, errs)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("cpi ran the command on a machine without a PMU")
	}
}

// Options that contradict each other are usage errors (one line, exit 2)
// said before anything is counted or run, as mpevt's are, PMU or not (they
// were found after the header was printed, exit 1, or hidden behind the
// missing PMU).
func TestConflictingTargets(t *testing.T) {
	marker := t.TempDir() + "/ran"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", strconv.Itoa(os.Getpid()), "--", "sh", "-c", "touch " + marker}, "cpi: -p cannot be combined with -a or a command (cpi --help for more)\n"},
		{[]string{"-p", strconv.Itoa(os.Getpid()), "-a"}, "cpi: -p cannot be combined with -a or a command (cpi --help for more)\n"},
		{[]string{"-p", "-5"}, "cpi: -p -5: not a process id (cpi --help for more)\n"},
		{[]string{"-a", "-i", "0.001"}, "cpi: -i: the interval must be at least 0.01 s (cpi --help for more)\n"},
	} {
		for _, pmu := range []bool{true, false} {
			out, errs, rc := runCPI(func() bool { return pmu }, c.args...)
			if rc != 2 || out != "" || errs != c.want {
				t.Errorf("cpi %q (PMU %v): exit %d stdout %q stderr %q; want 2 and %q", c.args, pmu, rc, out, errs, c.want)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("cpi ran the command")
	}
}

// On this machine for real: without a PMU the binary prints the one line.
func TestThisMachine(t *testing.T) {
	if events.HasPMU() {
		stdout, out, rc := runCPI(events.HasPMU, "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
		errs := out // beside a command the report is on stderr, the command's stdout its own
		if rc != 0 || stdout != "" || !strings.Contains(out, "# totals") {
			t.Fatalf("cpi with a PMU: exit %d %s\n%s", rc, errs, out)
		}
		f := strings.Fields(out[strings.Index(out, "# totals"):])
		if len(f) < 8 {
			t.Fatalf("totals row: %q", out)
		}
		cyc, _ := strconv.ParseUint(f[5], 10, 64)
		ins, _ := strconv.ParseUint(f[6], 10, 64)
		if cyc == 0 || ins == 0 {
			t.Errorf("cycles %d instructions %d of a busy loop", cyc, ins)
		}
		return
	}
	out, errs, rc := runCPI(events.HasPMU, "--", "true")
	if rc != 1 || out != "" || errs != "cpi: "+errNoPMU+"\n" {
		t.Errorf("cpi on this machine (no PMU): exit %d stdout %q stderr %q", rc, out, errs)
	}
	// and the real binary, as a user runs it
	bin := t.TempDir() + "/cpi"
	if b, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v %s", err, b)
	}
	var so, se bytes.Buffer
	cmd := exec.Command(bin, "--", "true")
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || so.Len() != 0 || se.String() != "cpi: "+errNoPMU+"\n" {
		t.Errorf("bin/cpi -- true: %v stdout %q stderr %q", err, so.String(), se.String())
	}
}

func TestUsageErrors(t *testing.T) {
	_, errs, rc := runCPI(func() bool { return true })
	if rc != 2 || !strings.Contains(errs, "nothing to measure") {
		t.Errorf("cpi with no target: exit %d %q", rc, errs)
	}
	_, errs, rc = runCPI(func() bool { return true }, "-i", "-1", "-a")
	if rc != 2 || !strings.Contains(errs, "positive") {
		t.Errorf("cpi -i -1: exit %d %q", rc, errs)
	}
}

// The rows: totals over the units, CPI = cycles / instructions, per unit
// rows when there are several, interval deltas against prev.
func TestRows(t *testing.T) {
	s := events.Sample{
		Units: []events.Unit{{TID: 10, CPU: -1, Comm: "a"}, {TID: 11, CPU: -1, Comm: "b"}},
		Readings: [][]events.Reading{
			{{Value: 3000, Enabled: 10, Running: 10}, {Value: 1000, Enabled: 10, Running: 5}}, // cycles (b multiplexed: x2)
			{{Value: 2000, Enabled: 10, Running: 10}, {Value: 0, Enabled: 10, Running: 10}},   // instructions
		},
	}
	var b bytes.Buffer
	printRows(&b, "total", s, nil)
	want := "total               5000               2000    2.500  all\n" +
		"total               3000               2000    1.500  tid 10 (a)\n" +
		"total               2000                  0        -  tid 11 (b)\n"
	if b.String() != want {
		t.Errorf("rows:\n%s\nwant:\n%s", b.String(), want)
	}
	prev := [][]events.Reading{
		{{Value: 1000, Enabled: 5, Running: 5}, {Value: 1000, Enabled: 5, Running: 5}},
		{{Value: 1000, Enabled: 5, Running: 5}, {Value: 0, Enabled: 5, Running: 5}},
	}
	b.Reset()
	printRows(&b, "1.000", s, prev)
	if !strings.HasPrefix(b.String(), "1.000               2000               1000    2.000  all\n") {
		t.Errorf("interval rows:\n%s", b.String())
	}
}
