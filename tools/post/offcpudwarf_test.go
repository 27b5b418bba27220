package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// waitChains are testdata/waitchain.c's waits: the user frames from main
// to the wait, in order (a frame matches when it holds the name: libc
// spells some calls with prefixes), and the least time one wait takes.
var waitChains = []struct {
	name   string
	frames []string
	least  float64 // ns
}{
	{"sleep", []string{"main", "sleep_outer", "sleep_mid", "sleep_leaf", "nanosleep"}, 20e6},
	{"read", []string{"main", "read_outer", "read_mid", "read_leaf", "read"}, 10e6},
	{"fread", []string{"main", "fread_outer", "fread_leaf", "fread"}, 10e6}, // then libc's own frames to its read
	{"poll", []string{"main", "poll_outer", "poll_leaf", "poll"}, 10e6},
}

// userFrames are a folded off-CPU line's user frames (after the process,
// thread and state; the kernel's, marked _[k], dropped).
func userFrames(stack string) []string {
	var out []string
	for _, f := range strings.Split(stack, ";")[3:] {
		if !strings.HasSuffix(f, "_[k]") {
			out = append(out, f)
		}
	}
	return out
}

// hasChain tells whether frames hold want as consecutive frames (each
// frame holding its name), where want[0] must be matched exactly.
func hasChain(frames, want []string) bool {
	for i := range frames {
		if frames[i] != want[0] || i+len(want) > len(frames) {
			continue
		}
		ok := true
		for j, w := range want[1:] {
			ok = ok && strings.Contains(frames[i+1+j], w)
		}
		if ok {
			return true
		}
	}
	return false
}

// The stacks of waits of an -O2 program built without frame pointers, in
// its own functions and in libc's (nanosleep, read, fread, poll): with
// --unwind dwarf post's off-CPU profile has each wait under its whole
// chain from main, unwound by call-frame information; with frame pointers
// (the control) the chains are cut at the libc call.
func TestOffCPUStacksDWARF(t *testing.T) {
	e := tracetest.Setup(t, "./tools/post")
	dir, sw := e.Dir, e.Sw
	prog := filepath.Join(e.Bin, "waitchain")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", prog,
		filepath.Join(tracetest.Root(), "tools", "post", "testdata", "waitchain.c")).CombinedOutput(); err != nil {
		t.Fatalf("build testdata/waitchain.c: %v\n%s", err, out)
	}
	sw("init", "-t", "16M")
	// record traces one run of the program and returns its off-CPU
	// profile (false: the trace lost the program's thread: with --unwind
	// dwarf each wait of the system copies its stack, and a busy machine
	// overflows the rings; the stacks that are in the trace are whole).
	n := 0
	record := func(unwind string) ([][2]string, bool) {
		t.Helper()
		n++
		sw("enable", "--only", "--unwind", unwind, "dispatch", "callstack")
		sw("on")
		out, err := exec.Command(prog, "10").Output()
		if err != nil {
			t.Fatalf("waitchain: %v", err)
		}
		off := sw("off")
		t.Logf("--unwind %s, run %d: %s", unwind, n, strings.TrimSpace(off))
		f := strings.Fields(string(out))
		if len(f) != 3 || f[0] != "tid" || f[1] != "main" {
			t.Fatalf("waitchain printed %q", out)
		}
		name := fmt.Sprintf("%s%d", unwind, n)
		trace := filepath.Join(dir, name+".nrm2")
		sw("get", trace)
		folded := filepath.Join(dir, name+".folded")
		_, errs, code := runPost(t, dir, "-r", trace, "-sched", "--offcpu", folded, "--tid", f[2])
		if code != 0 && strings.Contains(errs, "no such thread") && !strings.Contains(off, " 0 lost") {
			t.Logf("run %d lost the thread's records: %s", n, errs)
			return nil, false
		}
		if code != 0 {
			t.Fatalf("post: %s", errs)
		}
		return foldedCells(t, folded), true
	}
	// under: ns sleeping under each chain, and the ns of the stacks
	// reaching into the program's own wait functions, whole or not
	under := func(cells [][2]string) (chains map[string]float64, inProg, whole float64, depth map[string]int) {
		chains, depth = map[string]float64{}, map[string]int{}
		for _, c := range cells {
			if !strings.Contains(c[0], ";[sleeping]") {
				continue
			}
			v, _ := strconv.ParseFloat(c[1], 64)
			fr := userFrames(c[0])
			own := false
			for _, f := range fr {
				own = own || strings.HasSuffix(f, "_leaf")
			}
			if own {
				inProg += v
			}
			for _, w := range waitChains {
				if hasChain(fr, w.frames) {
					chains[w.name] += v
					depth[w.name] = max(depth[w.name], len(fr))
					if own {
						whole += v
					}
				}
			}
		}
		return
	}

	var fp map[string]float64
	testenv.Retry(t, 3, "the frame-pointer run's trace", func(a *testenv.Attempt) {
		cells, ok := record("fp")
		if !ok {
			a.Errorf("the trace lost the program's thread")
			return
		}
		fp, _, _, _ = under(cells)
	})
	// the control: frame pointers do not find these callers
	if len(fp) != 0 {
		t.Errorf("control: frame-pointer stacks of the build without them reach main through the wait functions (%v): the comparison proves nothing", fp)
	}
	testenv.Retry(t, 3, "wait stacks unwound by call-frame information", func(a *testenv.Attempt) {
		cells, ok := record("dwarf")
		if !ok {
			a.Errorf("the trace lost the program's thread")
			return
		}
		dw, inProg, whole, depth := under(cells)
		t.Logf("ns sleeping under the chains from main: frame pointers %v, dwarf %v; dwarf user frames (deepest) %v", fp, dw, depth)
		for _, w := range waitChains {
			if dw[w.name] < w.least {
				a.Errorf("--unwind dwarf: %.1f ms sleeping under %s, want at least one wait (%.0f ms) of the 10", dw[w.name]/1e6, strings.Join(w.frames, ";"), w.least/1e6)
			}
		}
		// Nearly every stack in the program's functions is whole: a
		// stack whose table was still loading past the wait's bound is
		// cut (a busy machine), the rest reach main.
		if inProg == 0 || whole < 0.9*inProg {
			a.Errorf("--unwind dwarf: %.1f of %.1f ms sleeping in the program's wait functions is under a whole chain from main", whole/1e6, inProg/1e6)
		}
	})
}
