package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/tracetest"
)

// The example built without frame pointers: the frame-pointer walk loses
// every caller (the control: it must, or this test proves nothing), and
// `--unwind dwarf` recovers the exact call paths from the code's
// call-frame information, in the ratio the example is built with; a stack
// copy too small for the whole stack gives stacks marked truncated.
func TestExampleCallStacksDWARF(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	nofp := filepath.Join(e.Bin, "cpuburn-nofp")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", nofp, filepath.Join(tracetest.Root(), "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	e.Burn = nofp
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	record := func(name, unwind string) (folded, offOut string) {
		t.Helper()
		sw("enable", "--only", "--unwind", unwind, "tprof", "callstack")
		sw("on")
		pid, _ := e.RunBurn(150)
		offOut = sw("off")
		sw("get", name+".nrm2")
		folded = filepath.Join(dir, name+".folded")
		if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, name+".nrm2"), "-tprof", "--pid", strconv.Itoa(pid), "--folded", folded); code != 0 {
			t.Fatal(errs)
		}
		return folded, offOut
	}

	folded, _ := record("fp", "fp")
	paths, total := examplePaths(t, folded)
	on := 0
	for p := range exampleWant {
		on += paths[p]
	}
	if total < 300 || on > total/5 {
		t.Fatalf("control: frame pointers of the example built without them gave %d of %d ticks on its call paths (%v): the DWARF run below would prove nothing", on, total, paths)
	}

	folded, offOut := record("dwarf", "dwarf")
	n := checkExamplePaths(t, folded)
	if !strings.Contains(offOut, "unwound by call-frame information") {
		t.Fatalf("swtrace off does not say how stacks were unwound:\n%s", offOut)
	}
	t.Logf("frame pointers: %d of %d ticks on the call paths; dwarf: %d ticks on them\n%s", on, total, n, offOut)

	folded, _ = record("cut", "dwarf,64")
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	cut, all := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		c, _ := strconv.Atoi(l[i+1:])
		all += c
		if f := strings.Split(l[:i], ";"); len(f) > 1 && f[1] == "[truncated]" {
			cut += c
		}
	}
	if all < 300 || cut < all*9/10 {
		t.Fatalf("a 64-byte stack copy: %d of %d stacks marked truncated", cut, all)
	}
	if o, code := e.SwCode("enable", "--unwind", "dwarf,100", "callstack"); code == 0 || !strings.Contains(o, "multiple of 8") {
		t.Fatalf("dwarf,100 accepted: %s", o)
	}
	if o, code := e.SwCode("enable", "--unwind", "lbr", "callstack"); code == 0 || !strings.Contains(o, "use fp") {
		t.Fatalf("--unwind lbr accepted: %s", o)
	}
}
