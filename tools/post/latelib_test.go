package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/tracetest"
)

// A library loaded late (dlopen) and run at once, built without frame
// pointers: with --unwind dwarf the samples taken while the agent still
// loads its call-frame table wait for the table, so every stack in the
// library reaches main; none is cut there. The library has a few thousand
// functions, so its table takes a while to load.
func TestLateLibraryStacksWaitForTheirTable(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	var lib strings.Builder
	lib.WriteString("#include <stdlib.h>\n")
	const nfn = 4000
	for i := 0; i < nfn; i++ {
		fmt.Fprintf(&lib, "__attribute__((noinline)) long pad%d(long x) { return x * %d + (long)rand(); }\n", i, i+3)
	}
	lib.WriteString(`__attribute__((noinline)) long late_spin(long n)
{
	volatile long s = 0;
	for (long i = 0; i < n; i++)
		s += i ^ (s >> 3);
	return s;
}
__attribute__((noinline)) long late_outer(long n) { long r = late_spin(n); return r + pad1(r); }
`)
	libSrc, libSo := filepath.Join(dir, "late.c"), filepath.Join(e.Bin, "liblate.so")
	if err := os.WriteFile(libSrc, []byte(lib.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", libSo, libSrc).CombinedOutput(); err != nil {
		t.Fatalf("build library: %v\n%s", err, out)
	}
	src, prog := filepath.Join(dir, "latemain.c"), filepath.Join(e.Bin, "latemain")
	if err := os.WriteFile(src, []byte(`#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long caller(long (*f)(long), long n) { long r = f(n); return r + 1; }
int main(int argc, char **argv)
{
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	long (*f)(long) = (long (*)(long))dlsym(h, "late_outer");
	volatile long r = caller(f, atol(argv[2]));
	return r == 42;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", prog, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	sw("enable", "--only", "--unwind", "dwarf", "tprof", "callstack")
	sw("on")
	cmd := exec.Command(prog, libSo, "300000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("latemain: %v\n%s", err, out)
	}
	offOut := sw("off")
	sw("get", "late.nrm2")
	folded := filepath.Join(dir, "late.folded")
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "late.nrm2"), "-tprof", "--pid", strconv.Itoa(cmd.Process.Pid), "--folded", folded); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	inLib, whole := 0, 0
	var cut []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		c, _ := strconv.Atoi(l[i+1:])
		if !strings.HasSuffix(l[:i], ";late_spin") {
			continue
		}
		inLib += c
		if strings.Contains(l[:i], ";main;caller;late_outer;late_spin") {
			whole += c
		} else {
			cut = append(cut, l)
		}
	}
	t.Logf("%d ticks in late_spin, %d unwound up to main; swtrace off: %s", inLib, whole, strings.TrimSpace(offOut))
	if inLib < 50 || whole != inLib {
		t.Errorf("%d ticks in late_spin, %d with main;caller;late_outer above; the others:\n%s", inLib, whole, strings.Join(cut, "\n"))
	}
}
