package jprof_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"perfinsp/analysis/a2n"
)

// jitdumpLoads reads the JIT_CODE_LOAD records of a jitdump file with
// their code bytes (the layout perf inject reads), checking each record's
// size covers exactly its fields, name and code, and that the file ends
// with JIT_CODE_CLOSE.
func jitdumpLoads(t *testing.T, b []byte) map[string][][]byte {
	t.Helper()
	le := binary.LittleEndian
	if len(b) < 40 || le.Uint32(b) != 0x4A695444 || le.Uint32(b[4:]) != 1 || le.Uint32(b[8:]) != 40 {
		t.Fatalf("not a jitdump header: % x", b[:min(len(b), 40)])
	}
	out := map[string][][]byte{}
	closed := false
	for off := 40; off < len(b); {
		if closed || off+16 > len(b) {
			t.Fatalf("bytes after JIT_CODE_CLOSE or a cut record at %d", off)
		}
		id, size := le.Uint32(b[off:]), int(le.Uint32(b[off+4:]))
		if size < 16 || off+size > len(b) {
			t.Fatalf("record at %d: size %d", off, size)
		}
		rec := b[off : off+size]
		switch id {
		case 0:
			codeSize := int(le.Uint64(rec[40:]))
			name := rec[56:]
			nl := strings.IndexByte(string(name), 0)
			if nl < 0 || 56+nl+1+codeSize != size {
				t.Fatalf("JIT_CODE_LOAD at %d: size %d, name %d bytes, code %d bytes", off, size, nl, codeSize)
			}
			if le.Uint64(rec[24:]) != le.Uint64(rec[32:]) {
				t.Fatalf("JIT_CODE_LOAD at %d: vma and code address differ", off)
			}
			n := string(name[:nl])
			out[n] = append(out[n], name[nl+1:])
		case 3:
			closed = true
		default:
			t.Fatalf("record %d at %d", id, off)
		}
		off += size
	}
	if !closed {
		t.Error("no JIT_CODE_CLOSE at the end")
	}
	return out
}

// With jitdump the agent writes the JVM's code as a jitdump in its
// directory: every compiled method and stub with its code bytes, the file
// closed at the JVM's end. post's parser (a2n) names HotLoop.spin from it;
// perf (record -k mono of the same JVM, perf inject --jit) names most of
// the JVM's samples HotLoop.spin from it, where the same perf.data without
// the inject names none, and disassembles its bytes to the loop's
// multiply and shift.
func TestJitdump(t *testing.T) {
	root := agentOnly(t)
	dir := t.TempDir()
	args := []string{"-agentpath:" + filepath.Join(root, "bin", "libjprof.so") + "=tprof,jitdump,jstacks=off,verbose,dir=" + dir,
		"-cp", filepath.Join(root, "build", "java"), "HotLoop", "3"}
	name, perf := "java", false
	if _, err := exec.LookPath("perf"); err == nil {
		name, perf = "perf", true
		args = append([]string{"record", "-q", "-k", "mono", "-e", "cpu-clock", "-F", "1000", "-o", filepath.Join(dir, "perf.data"), "--", "java"}, args...)
	} else if os.Getenv("CI") == "true" {
		t.Fatal("perf is not installed (linux-perf)")
	}
	c := exec.Command(name, args...)
	// no trace facility: the agent's trace records fail, said once
	c.Env = append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "none.sock"), "PERFINSP_BACKEND=daemon")
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	m := regexp.MustCompile(`pid (\d+)`).FindSubmatch(out)
	if m == nil || !strings.Contains(string(out), "code loads with their bytes in") {
		t.Fatalf("java's output:\n%s", out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("jit-%d.dump", pid)))
	if err != nil {
		t.Fatal(err)
	}
	loads := jitdumpLoads(t, b)
	if len(loads["HotLoop.spin"]) == 0 || len(loads["Interpreter"]) == 0 {
		t.Fatalf("no HotLoop.spin or Interpreter among the jitdump's %d names", len(loads))
	}
	syms := map[string]bool{}
	for _, s := range a2n.ParseJitdump(b) {
		syms[s.Name] = s.Size > 0
	}
	if !syms["HotLoop.spin"] || len(syms) != len(loads) {
		t.Errorf("post's parser: HotLoop.spin %v, %d names (the file has %d)", syms["HotLoop.spin"], len(syms), len(loads))
	}
	t.Logf("%d code loads, %d names, %d bytes", len(a2n.ParseJitdump(b)), len(loads), len(b))
	if !perf {
		t.Skip("skipped: perf is not installed: the jitdump was read by post's parser only")
	}
	report := func(data string) map[string]float64 {
		t.Helper()
		o, err := exec.Command("perf", "report", "-i", data, "--pid", strconv.Itoa(pid), "--stdio", "--sort", "sym", "-F", "overhead,sym").Output()
		if err != nil {
			t.Fatalf("perf report %s: %v", data, err)
		}
		re := regexp.MustCompile(`^\s*([\d.]+)%\s+\[[.k]\]\s+(.*?)\s*$`)
		r := map[string]float64{}
		for _, l := range strings.Split(string(o), "\n") {
			if f := re.FindStringSubmatch(l); f != nil {
				v, _ := strconv.ParseFloat(f[1], 64)
				r[f[2]] += v
			}
		}
		return r
	}
	inject := exec.Command("perf", "inject", "--jit", "-i", filepath.Join(dir, "perf.data"), "-o", filepath.Join(dir, "jit.data"))
	inject.Dir = dir
	if o, err := inject.CombinedOutput(); err != nil {
		t.Fatalf("perf inject --jit: %v\n%s", err, o)
	}
	before, after := report(filepath.Join(dir, "perf.data"))["HotLoop.spin"], report(filepath.Join(dir, "jit.data"))["HotLoop.spin"]
	t.Logf("perf's share of HotLoop.spin: %.1f %% without the inject, %.1f %% after perf inject --jit", before, after)
	if after < 50 || before != 0 {
		t.Errorf("HotLoop.spin: %.1f %% of the JVM's samples after perf inject --jit (want most), %.1f %% before (want none)", after, before)
	}
	if _, err := exec.LookPath("objdump"); err != nil || runtime.GOARCH != "amd64" {
		return // (the instructions below are x86-64's)
	}
	ann, err := exec.Command("perf", "annotate", "-i", filepath.Join(dir, "jit.data"), "--stdio", "-s", "HotLoop.spin").Output()
	if err != nil {
		t.Fatalf("perf annotate: %v", err)
	}
	if !regexp.MustCompile(`(?m)\bimul\b`).Match(ann) || !regexp.MustCompile(`(?m)\bshr\s+\$0x1d`).Match(ann) {
		t.Errorf("perf annotate of HotLoop.spin from the jitdump's bytes has no imul and shr $0x1d (x * 6364136223846793005L, x >>> 29):\n%.3000s", ann)
	}
}
