package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
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
	// A 64-byte copy holds too little of the stack to unwind to main: the
	// stacks unwound by it are marked truncated, and none claims the whole
	// path. (Stacks that met a table still loading keep the frame-pointer
	// walk, which finds no callers in this build: neither marked nor whole.)
	cut, all, whole := 0, 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		c, _ := strconv.Atoi(l[i+1:])
		all += c
		f := strings.Split(l[:i], ";")
		if len(f) > 1 && f[1] == "[truncated]" {
			cut += c
		} else if slices.Contains(f, "main") {
			whole += c
		}
	}
	if all < 300 || cut < all*3/4 || whole > all/50 {
		t.Fatalf("a 64-byte stack copy: %d of %d stacks marked truncated, %d unmarked up to main", cut, all, whole)
	}
	if o, code := e.SwCode("enable", "--unwind", "dwarf,100", "callstack"); code == 0 || !strings.Contains(o, "multiple of 8") {
		t.Fatalf("dwarf,100 accepted: %s", o)
	}
	if o, code := e.SwCode("enable", "--unwind", "lbr", "callstack"); code == 0 || !strings.Contains(o, "use fp") {
		t.Fatalf("--unwind lbr accepted: %s", o)
	}
}

// A short program built without frame pointers spending its time in the
// vDSO (clock_gettime): with --unwind dwarf its stacks go through the vDSO,
// libc and its own frameless functions up to main. (The vDSO's frames are
// unwound by the daemon's own vDSO image, TestVDSOAndABI; this vDSO also
// keeps frame pointers, so this test passes without that too: it checks
// the whole path, not that table.) The program maps its libraries and
// runs at once, so their tables load while it runs (prefetched at its
// mmaps); a short run would otherwise lose half its stacks.
func TestVDSOFramesUnwoundDWARF(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	src := filepath.Join(dir, "vdsospin.c")
	prog := filepath.Join(e.Bin, "vdsospin")
	if err := os.WriteFile(src, []byte(`#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long spin(long n)
{
	struct timespec ts;
	long s = 0;
	for (long i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		s += ts.tv_nsec;
	}
	return s;
}
__attribute__((noinline)) long outer(long n) { long r = spin(n); return r + 1; }
int main(int argc, char **argv) { volatile long r = outer(atol(argv[1])); return r == 42; }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	sw("enable", "--only", "--unwind", "dwarf", "tprof", "callstack")
	// The stacks taken while a library's table still loads are cut there
	// (the first part of the run; longer on a busy machine): the share that
	// reaches main is checked up to three times.
	n := 0
	testenv.Retry(t, 3, "vDSO stacks unwound to main", func(a *testenv.Attempt) {
		n++
		vdsoOnce(t, e, prog, fmt.Sprintf("v%d", n), a)
	})
}

func vdsoOnce(t *testing.T, e *tracetest.Env, prog, name string, a *testenv.Attempt) {
	dir, sw := e.Dir, e.Sw
	sw("on")
	cmd := exec.Command(prog, "100000000")
	if err := cmd.Run(); err != nil {
		t.Fatalf("vdsospin: %v", err)
	}
	sw("off")
	sw("get", name+".nrm2")
	// Which frames are the vDSO's is read from the profile's mappings, not
	// from the symbols' spelling: a kernel's vDSO may call its functions
	// clock_gettime or __vdso_clock_gettime.
	pb := filepath.Join(dir, name+".pb.gz")
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, name+".nrm2"), "-tprof", "--pid", strconv.Itoa(cmd.Process.Pid), "--pprof", pb); code != 0 {
		t.Fatal(errs)
	}
	prof := readProfile(t, pb)
	inVDSO, reached := int64(0), int64(0)
	var sample []string
	for _, s := range prof.Sample {
		if len(s.Location) == 0 {
			continue
		}
		leaf := s.Location[0]
		if leaf.Mapping == nil || leaf.Mapping.File != "[vdso]" {
			continue
		}
		var names []string // root first
		for i := len(s.Location) - 1; i >= 0; i-- {
			for j := len(s.Location[i].Line) - 1; j >= 0; j-- {
				names = append(names, s.Location[i].Line[j].Function.Name)
			}
		}
		stack := ";" + strings.Join(names, ";") + ";"
		inVDSO += s.Value[0]
		if strings.Contains(stack, ";main;outer;spin;") {
			reached += s.Value[0]
		} else if len(sample) < 5 {
			sample = append(sample, stack)
		}
	}
	if inVDSO < 50 || reached < inVDSO*9/10 {
		a.Errorf("%d ticks in the vDSO, %d of them with main;outer;spin above; others: %q", inVDSO, reached, sample)
	}
	t.Logf("%d ticks in the vDSO, %d unwound up to main", inVDSO, reached)
}
