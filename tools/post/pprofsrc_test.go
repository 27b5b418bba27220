package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// TestPprofSourceAndDisassembly: a profile of the bundled example (built
// -O2 -g) carries the example's mapping as the process had it (start,
// limit, file offset, build id), each tick's address in it, and source
// lines from DWARF, so that pprof's own -list shows the hot source line
// of heavy() with its ticks and -disasm its instructions; with the call
// stacks in the trace, every frame of the example has its address too.
func TestPprofSourceAndDisassembly(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	buildID := testenv.BuildID(t, e.Burn)

	for _, stacks := range []bool{false, true} {
		name := "flat"
		sw("enable", "--only", "tprof")
		if stacks {
			name = "stacks"
			sw("enable", "--only", "tprof", "callstack")
		}
		sw("on")
		pid, _ := e.RunBurn(100)
		sw("off")
		nrm := filepath.Join(dir, name+".nrm2")
		sw("get", nrm)
		prof := filepath.Join(dir, name+".pb.gz")
		if _, errs, code := runPost(t, dir, "-r", nrm, "--pid", strconv.Itoa(pid), "--pprof", prof); code != 0 {
			t.Fatal(errs)
		}
		p := readProfile(t, prof)
		var burn *profile.Mapping
		for _, m := range p.Mapping {
			if m.File == e.Burn {
				burn = m
			}
		}
		if burn == nil || burn.Start == 0 || burn.Limit <= burn.Start || burn.BuildID != buildID || !burn.HasLineNumbers {
			t.Fatalf("the example's mapping: %+v (build id %s)", burn, buildID)
		}
		heavyTicks, heavyAddrs := int64(0), 0
		for _, s := range p.Sample {
			for _, l := range s.Location {
				if l.Mapping == burn && (l.Address < burn.Start || l.Address >= burn.Limit) {
					t.Fatalf("location %#x outside its mapping %#x-%#x", l.Address, burn.Start, burn.Limit)
				}
			}
			leaf := s.Location[0]
			fn := leaf.Line[0].Function
			if fn.Name != "heavy" {
				continue
			}
			heavyTicks += s.Value[0]
			heavyAddrs++
			if leaf.Mapping != burn || !strings.HasSuffix(fn.Filename, "examples/cpuburn.c") || leaf.Line[0].Line <= fn.StartLine {
				t.Fatalf("a tick in heavy: address %#x in %s, %s line %d (function from line %d)", leaf.Address, leaf.Mapping.File, fn.Filename, leaf.Line[0].Line, fn.StartLine)
			}
		}
		if heavyTicks < 100 {
			t.Fatalf("stacks %v: %d ticks in heavy, want most of the run's", stacks, heavyTicks)
		}

		// pprof itself: the source line of heavy's chain with ticks, and
		// its multiply in the disassembly of the example.
		list := goPprof(t, "-list", "^heavy$", prof)
		if !regexp.MustCompile(`(?m)^\s+\d+(\.\d+)?m?s\s+\d+(\.\d+)?m?s\s+\d+:\s+account\(CHAIN\(6000000UL, 1\)\);`).MatchString(list) {
			t.Fatalf("pprof -list heavy does not show the chain's line with its time:\n%s", list)
		}
		disasm := goPprof(t, "-disasm", `\bheavy\b`, prof)
		// (a tick's address is where the interrupt found the thread: the
		// instructions after the multiply)
		if !regexp.MustCompile(`(?m)^.*\s[0-9a-f]+: IMULQ `).MatchString(disasm) {
			t.Fatalf("pprof -disasm heavy does not show its multiply:\n%s", disasm)
		}
		lo, hi := testenv.FuncRange(t, e.Burn, "heavy")
		hot := 0
		for _, m := range regexp.MustCompile(`(?m)^\s+(\d+(?:\.\d+)?m?s)\s+\S+\s+([0-9a-f]+): `).FindAllStringSubmatch(disasm, -1) {
			if a, _ := strconv.ParseUint(m[2], 16, 64); a >= lo && a < hi {
				hot++
			}
		}
		if hot == 0 {
			t.Fatalf("pprof -disasm heavy shows no time at heavy's instructions (%#x-%#x):\n%s", lo, hi, disasm)
		}
		if !stacks {
			checkAnnotate(t, dir, nrm, pid, heavyTicks)
		}
		if stacks && len(p.Sample[0].Location) < 3 {
			t.Fatalf("the stacks profile's first sample has %d frames", len(p.Sample[0].Location))
		}
		t.Logf("stacks %v: %d ticks at %d addresses of heavy\n%s", stacks, heavyTicks, heavyAddrs, list)
	}
}

// checkAnnotate: post --annotate heavy shows heavy's instructions as
// objdump would, its source lines with their text, and its ticks at the
// instructions, as many as the profile gives heavy.
func checkAnnotate(t *testing.T, dir, nrm string, pid int, heavyTicks int64) {
	t.Helper()
	out := filepath.Join(dir, "annotate")
	if _, errs, code := runPost(t, out, "-r", nrm, "--pid", strconv.Itoa(pid), "--annotate", "heavy"); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(filepath.Join(out, "annotate.out"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "cpuburn.c:45  account(CHAIN(6000000UL, 1));") || !regexp.MustCompile(`(?m)^.* [0-9a-f]+:  imul %rdx,%rdi$`).MatchString(text) {
		t.Fatalf("annotate.out has not heavy's source line and multiply:\n%s", text)
	}
	var sum int64
	for _, m := range regexp.MustCompile(`(?m)^\s*[0-9.]+ :\s+(\d+)\s+[0-9a-f]+:  \S`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		sum += n
	}
	if sum != heavyTicks {
		t.Fatalf("annotate.out: %d ticks at heavy's instructions, the profile %d:\n%s", sum, heavyTicks, text)
	}
}

// goPprof runs `go tool pprof ARGS` and returns its output.
func goPprof(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
	}
	return string(out)
}
