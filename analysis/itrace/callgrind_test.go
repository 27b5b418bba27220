package itrace

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
)

// fileNamer is mapNamer whose addresses are in an ELF file 0x400000 below
// where they were traced.
type fileNamer struct{ mapNamer }

func (fileNamer) FileAddr(pid uint32, addr uint64) (uint64, bool) { return addr + 0x400000, true }

// TestCallgrindInstructionPositions: with the blocks, the callgrind file
// names the traced command, has instruction positions (each block's
// instructions at its first instruction, in the file's addresses; each
// call at its call instruction, to the callee's first instruction),
// compresses names, and reads back (this package's parser and
// callgrind_annotate) with the counts of the line-positioned file.
func TestCallgrindInstructionPositions(t *testing.T) {
	rep := NewReport(fileNamer{}, nil)
	bl := NewBlocks(fileNamer{})
	for _, r := range exampleStream() {
		rep.Apply(r)
		bl.Apply(r)
	}
	rep.Finish()
	var buf bytes.Buffer
	if err := rep.WriteCallgrindWith(&buf, CallgrindOptions{Cmd: "prog -n 3", PID: 7, Trace: "swtrace.nrm2", Blocks: bl}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"\ncmd: prog -n 3\n", "\npid: 7\n", "\ndesc: Trace: swtrace.nrm2\n", "\npositions: instr line\n",
		// main's first block (file addresses), its block after f returned
		"fn=(1) main\n", "0x401000 10 3\n", "0x40100a 10 1\n",
		// the call of f at 0x1005, to f's first instruction
		"cfn=(2) f\ncalls=1 0x402000 20\n0x401005 10 2\n",
		// the call of g through the PLT stub, at the call into the stub
		"cfn=(3) g\ncalls=1 0x404000 0\n0x40100a 0 4\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "ob=(1) /bin/prog\n"); n != 1 || !strings.Contains(out, "ob=(1)\n") {
		t.Fatalf("the object's name is not compressed (%d full names):\n%s", n, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && regexp.MustCompile(`^[0-9]`).MatchString(l) && !strings.HasPrefix(f[0], "0x4") {
			t.Fatalf("cost line %q is not at a file address:\n%s", l, out)
		}
	}
	got, err := ParseCallgrind(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	if err := rep.WriteCallgrind(&lines, "prog"); err != nil {
		t.Fatal(err)
	}
	want, err := ParseCallgrind(&lines)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d functions by instruction, %d by line", len(got), len(want))
	}
	for name, w := range want {
		if g := got[name]; g == nil || g.Self != w.Self || g.Calls != w.Calls {
			t.Errorf("%s: by instruction %+v, by line %+v", name, g, w)
		}
	}

	// callgrind_annotate reads it: the total and main's instructions.
	path, err := exec.LookPath("callgrind_annotate")
	if err != nil {
		testenv.Missing(t, "callgrind_annotate is not installed (valgrind; scripts/deps/itrace.txt)")
	}
	file := filepath.Join(t.TempDir(), "callgrind.out")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ann, err := exec.Command(path, file).CombinedOutput()
	if err != nil {
		t.Fatalf("callgrind_annotate: %v\n%s", err, ann)
	}
	total := regexp.MustCompile(`(?m)^([0-9,]+).*PROGRAM TOTALS`).FindSubmatch(ann)
	mainIr := regexp.MustCompile(`(?m)^\s*([0-9,]+) \([0-9.]+%\)\s+prog\.c:main \[/bin/prog\]`).FindSubmatch(ann)
	if total == nil || mainIr == nil || !strings.Contains(string(ann), "Profiled target:  prog -n 3 (PID 7)") {
		t.Fatalf("callgrind_annotate output:\n%s", ann)
	}
	if n, _ := strconv.Atoi(strings.ReplaceAll(string(total[1]), ",", "")); uint64(n) != rep.Instructions {
		t.Fatalf("callgrind_annotate total %s, want %d", total[1], rep.Instructions)
	}
	if n, _ := strconv.Atoi(strings.ReplaceAll(string(mainIr[1]), ",", "")); uint64(n) != got["main"].Self {
		t.Fatalf("callgrind_annotate main %s, want %d:\n%s", mainIr[1], got["main"].Self, ann)
	}
}

// headerPlacer is filesPlacer whose program addresses 0x...0f and
// 0x...10 have their lines in a header, inl.h (a function inlined from
// it).
type headerPlacer struct{ filesPlacer }

func (p headerPlacer) Line(mod string, va uint64) (string, int, bool) {
	if mod == "/bin/prog" && va&0xff >= 0x0f && va&0xff <= 0x10 {
		return "inl.h", int(va&0xff) + 100, true
	}
	return p.filesPlacer.Line(mod, va)
}

// TestCallgrindInlinedFileLines: instructions whose source lines are in
// another file than their function's (a header's inlined function) are
// given to that file's lines (fi=), as callgrind gives them, not to the
// function's file at the header's line numbers: callgrind_annotate
// reports them as inl.h:main, the rest of main as prog.c:main.
func TestCallgrindInlinedFileLines(t *testing.T) {
	path, err := exec.LookPath("callgrind_annotate")
	if err != nil {
		testenv.Missing(t, "callgrind_annotate is not installed (valgrind; scripts/deps/itrace.txt)")
	}
	rep := NewReport(fileNamer{}, nil)
	bl := NewBlocks(fileNamer{})
	bl.Spreader = headerPlacer{}
	for _, r := range exampleStream() {
		rep.Apply(r)
		bl.Apply(r)
	}
	rep.Finish()
	var buf bytes.Buffer
	if err := rep.WriteCallgrindWith(&buf, CallgrindOptions{Cmd: "prog", Blocks: bl}); err != nil {
		t.Fatal(err)
	}
	// main's instructions at addresses whose line is in inl.h, by the
	// cost lines' addresses
	var inHeader, inMain uint64
	fn := ""
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "fn=") || strings.HasPrefix(l, "cob=") { // (a call's cost line is no instruction's)
			fn = l
		}
		f := strings.Fields(l)
		if !strings.HasPrefix(fn, "fn=(1) main") || len(f) != 3 || !strings.HasPrefix(f[0], "0x") {
			continue
		}
		addr, _ := strconv.ParseUint(f[0][2:], 16, 64)
		n, _ := strconv.ParseUint(f[2], 10, 64)
		inMain += n
		if file, _, _ := (headerPlacer{}).Line("/bin/prog", addr); file == "inl.h" {
			inHeader += n
		}
	}
	if inHeader == 0 || inHeader == inMain {
		t.Fatalf("main: %d of %d instructions at inl.h's lines (want some, not all):\n%s", inHeader, inMain, buf.String())
	}
	file := filepath.Join(t.TempDir(), "callgrind.out")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ann, err := exec.Command(path, file).CombinedOutput()
	if err != nil {
		t.Fatalf("callgrind_annotate: %v\n%s", err, ann)
	}
	irOf := func(fileFn string) uint64 {
		m := regexp.MustCompile(`(?m)^\s*([0-9,]+) \([0-9.]+%\)\s+` + regexp.QuoteMeta(fileFn) + `( \[/bin/prog\])?$`).FindSubmatch(ann)
		if m == nil {
			return 0
		}
		n, _ := strconv.ParseUint(strings.ReplaceAll(string(m[1]), ",", ""), 10, 64)
		return n
	}
	if h, p := irOf("inl.h:main"), irOf("prog.c:main"); h != inHeader || h+p != rep.Funcs[Key(Func{Name: "main", Module: "/bin/prog"})].Exclusive {
		t.Fatalf("callgrind_annotate: inl.h:main %d (want %d), prog.c:main %d:\n%s\n%s", h, inHeader, p, ann, buf.String())
	}
}
