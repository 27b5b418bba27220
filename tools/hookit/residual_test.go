package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// tinyFuncs is an -O2 program of tiny functions (a hash of short keys and
// a small arithmetic step per iteration), where what the calibration
// leaves per call weighs most.
const tinyFuncs = `#include <stdio.h>
#include <stdlib.h>
static unsigned tab[4096];
__attribute__((noinline)) unsigned hash(unsigned k) { return (k * 2654435761u) >> 20; }
__attribute__((noinline)) void put(unsigned k) { tab[hash(k) & 4095]++; }
__attribute__((noinline)) unsigned get(unsigned k) { return tab[hash(k) & 4095]; }
__attribute__((noinline)) long add(long a, long b) { return a + b; }
__attribute__((noinline)) long mul(long a, long b) { return a * b % 1000003; }
__attribute__((noinline)) long step(long acc, long i) { return i & 1 ? mul(acc, get((unsigned)i)) : add(acc, get((unsigned)i)); }
int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000, acc = 1;
	for (long i = 0; i < n; i++) {
		put((unsigned)i & 1023);
		acc = step(acc, i);
	}
	printf("%ld\n", acc);
	return 0;
}
`

// TestResidualErrorBar: run.hookit -o plain=PROG runs the uninstrumented
// build first; log-gen gives the residual per call of the calibrated
// total over its CPU time, and every function's ERR covers its calls
// times that residual, so the bars add up to at least the whole residual.
func TestResidualErrorBar(t *testing.T) {
	setup(t)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "tiny.c")
	if err := os.WriteFile(src, []byte(tinyFuncs), 0o600); err != nil {
		t.Fatal(err)
	}
	prog, plainProg := filepath.Join(tmp, "tiny"), filepath.Join(tmp, "tiny.plain")
	for _, b := range [][]string{{"-finstrument-functions", "-o", prog}, {"-o", plainProg}} {
		if out, err := exec.Command("gcc", append([]string{"-O2", "-g", src}, b...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
	}
	dir := runHookit(t, "-o", "plain="+plainProg, "--", prog, "300000")
	gen, err := os.ReadFile(filepath.Join(dir, "log-gen"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`residual: calibrated total (\d+) against (\d+) for the uninstrumented run's CPU time: ([-+][0-9.]+) ns per call`).FindSubmatch(gen)
	if m == nil {
		t.Fatalf("log-gen has no residual line:\n%s", gen)
	}
	total, _ := strconv.ParseFloat(string(m[1]), 64)
	plain, _ := strconv.ParseFloat(string(m[2]), 64)
	res, _ := strconv.ParseFloat(string(m[3]), 64)
	if plain < 1e5 { // 300,000 iterations of 6 calls' work: far above 0.1 ms
		t.Errorf("the uninstrumented run's CPU time is %.0f ns: not measured", plain)
	}
	var calls, errSum, rows float64
	sc := bufio.NewScanner(bytes.NewReader(gen))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 7 || f[0] == "CALLS" {
			continue
		}
		c, err1 := strconv.ParseFloat(f[0], 64)
		e, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		calls += c
		errSum += e
		rows++
		if e < c*math.Abs(res)-1 {
			t.Errorf("%s: ERR %.0f below its %.0f calls times the residual %.2f", f[6], e, c, res)
		}
	}
	if want := 6 * 300000.0; calls != want+1 { // main once
		t.Errorf("%.0f calls in log-gen, want %.0f", calls, want+1)
	}
	if got := (total - plain) / calls; math.Abs(got-res) > 0.01 {
		t.Errorf("residual %.2f per call, (total - plain) / calls = %.2f", res, got)
	}
	if errSum < math.Abs(total-plain)-rows { // each row's ERR is rounded
		t.Errorf("the error bars add up to %.0f, the residual is %.0f", errSum, math.Abs(total-plain))
	}
	t.Logf("calibrated total %.0f ns, uninstrumented %.0f ns: %+.2f ns per call of %.0f; bars %.0f", total, plain, res, calls, errSum)
}
