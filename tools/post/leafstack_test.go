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

// leafProg is a true leaf (gcc -O2 builds st_leaf without a frame even
// with -fno-omit-frame-pointer) under two callers, st_mid_a running it
// twice as long as st_mid_b (noipa: no call is hoisted out of the loop).
const leafProg = `#include <stdlib.h>
__attribute__((noipa)) long st_leaf(long x)
{
	long s = 0;
	for (long i = 0; i < x; i++)
		s += i ^ (s >> 1);
	return s;
}
__attribute__((noipa)) long st_mid_a(long n) { long r = st_leaf(n); return r * 3 + 1; }
__attribute__((noipa)) long st_mid_b(long n) { long r = st_leaf(n); return r * 5 + 2; }
__attribute__((noipa)) long st_outer(long n, long rounds)
{
	long s = 0;
	for (long k = 0; k < rounds; k++) {
		s += st_mid_a(2 * n);
		s += st_mid_b(n);
	}
	return s;
}
int main(int argc, char **argv)
{
	volatile long r = st_outer(1000, atol(argv[1]));
	return r == 42;
}
`

// Frame-pointer stacks (-g) of a sample in a function that has not set up
// its frame lose its caller (the walk starts from the caller's RBP): post
// puts it back from the function's call-frame information, so the leaf's
// stacks are main;st_outer;st_mid_a;st_leaf and ...;st_mid_b;st_leaf, in
// the program's 2:1 ratio. Stacks unwound by call-frame information
// (--unwind dwarf) are whole already and stay as they are.
func TestFramePointerStacksKeepALeafsCaller(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	src, prog := filepath.Join(dir, "leaf.c"), filepath.Join(e.Bin, "leafprog")
	if err := os.WriteFile(src, []byte(leafProg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if dis, err := exec.Command("objdump", "-d", "--no-show-raw-insn", prog).Output(); err != nil {
		t.Fatalf("objdump: %v", err)
	} else if i := strings.Index(string(dis), "<st_leaf>:\n"); i < 0 || strings.Contains(strings.SplitN(string(dis[i:]), "\n\n", 2)[0], "push") {
		t.Fatal("gcc built st_leaf with a frame: the test would not test a true leaf")
	}
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	for _, unwind := range []string{"fp", "dwarf"} {
		sw("enable", "--only", "--unwind", unwind, "tprof", "callstack")
		sw("on")
		cmd := exec.Command(prog, "150000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("leafprog: %v\n%s", err, out)
		}
		sw("off")
		sw("get", unwind+".nrm2")
		folded := filepath.Join(dir, unwind+".folded")
		if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, unwind+".nrm2"), "-tprof", "--pid", strconv.Itoa(cmd.Process.Pid), "--folded", folded); code != 0 {
			t.Fatal(errs)
		}
		b, err := os.ReadFile(folded)
		if err != nil {
			t.Fatal(err)
		}
		leaf, viaA, viaB := 0, 0, 0
		var other []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			i := strings.LastIndexByte(l, ' ')
			c, _ := strconv.Atoi(l[i+1:])
			if !strings.HasSuffix(l[:i], ";st_leaf") {
				continue
			}
			leaf += c
			switch {
			case strings.HasSuffix(l[:i], ";main;st_outer;st_mid_a;st_leaf"):
				viaA += c
			case strings.HasSuffix(l[:i], ";main;st_outer;st_mid_b;st_leaf"):
				viaB += c
			default:
				other = append(other, l)
			}
		}
		t.Logf("--unwind %s: %d ticks in st_leaf: %d under st_mid_a, %d under st_mid_b", unwind, leaf, viaA, viaB)
		if leaf == 0 {
			t.Logf("%s", b)
		}
		if leaf < 100 || viaA+viaB < leaf*98/100 {
			t.Errorf("--unwind %s: %d ticks in st_leaf, %d of them main;st_outer;st_mid_a;st_leaf, %d ...;st_mid_b;st_leaf; others:\n%s",
				unwind, leaf, viaA, viaB, strings.Join(other, "\n"))
		} else if share := float64(viaA) / float64(viaA+viaB); share < 0.55 || share > 0.78 {
			t.Errorf("--unwind %s: st_mid_a has %.0f %% of st_leaf's ticks, want about 67 %% (it runs it twice as long)", unwind, 100*share)
		}
	}
}
