package main

import (
	"debug/elf"
	"fmt"
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

// TestPprofInlinedFrames: a profile of a program built -O2 -g, whose hot
// code gcc inlined, has each location's inlined frames as pprof expects
// them (the function inlined at the address's line first, then each
// caller at the line of its call), the same functions and lines that
// binutils' addr2line -i gives for the address (a caller's frame at its
// call instruction, or at the start of the function called where post
// put back the caller of a frameless leaf), and some of them inlined (mix inside leafwork).
func TestPprofInlinedFrames(t *testing.T) {
	if _, err := exec.LookPath("addr2line"); err != nil {
		testenv.Missing(t, "addr2line (binutils) is not installed")
	}
	e := tracetest.Setup(t)
	prog := filepath.Join(e.Dir, "inlined")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", prog,
		filepath.Join(tracetest.Root(), "tools", "post", "testdata", "inlined.c")).CombinedOutput(); err != nil {
		t.Fatalf("build testdata/inlined.c: %v\n%s", err, out)
	}
	e.Sw("init", "-t", "8M")
	e.Sw("setrate", "1000")
	e.Sw("enable", "--only", "tprof", "callstack")
	e.Sw("on")
	cmd := exec.Command(prog, "60000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("inlined: %v\n%s", err, out)
	}
	e.Sw("off")
	nrm := filepath.Join(e.Dir, "inlined.nrm2")
	e.Sw("get", nrm)
	prof := filepath.Join(e.Dir, "inlined.pb.gz")
	if _, errs, code := runPost(t, e.Dir, "-r", nrm, "--pid", strconv.Itoa(cmd.Process.Pid), "--pprof", prof); code != 0 {
		t.Fatal(errs)
	}
	p := readProfile(t, prof)

	// the program's locations, each with the address addr2line is asked
	// for: a leaf's own, a caller's call instruction (return address - 1)
	leaf, caller := map[*profile.Location]bool{}, map[*profile.Location]bool{}
	for _, s := range p.Sample {
		for i, l := range s.Location {
			if l.Mapping == nil || l.Mapping.File != prog {
				continue
			}
			if i == 0 {
				leaf[l] = true
			} else {
				caller[l] = true
			}
		}
	}
	_, syms := testenv.ELF(t, prog)
	starts := map[uint64]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			starts[s.Value] = true
		}
	}
	var locs []*profile.Location
	var addrs []string
	for _, l := range p.Location {
		if leaf[l] == caller[l] { // neither, or both (no one address to ask for)
			continue
		}
		va := fileVAddr(t, prog, l.Address-l.Mapping.Start+l.Mapping.Offset)
		if caller[l] && !starts[va] { // (a function's start: a caller put back above a frameless leaf)
			va--
		}
		locs = append(locs, l)
		addrs = append(addrs, fmt.Sprintf("%#x", va))
	}
	if len(locs) == 0 {
		t.Fatal("no location of the program in the profile")
	}
	want := addr2lineInlined(t, prog, addrs)
	inlined := 0
	for i, l := range locs {
		var got []string
		for _, ln := range l.Line {
			got = append(got, fmt.Sprintf("%s %s:%d", ln.Function.Name, filepath.Base(ln.Function.Filename), ln.Line))
		}
		if strings.Join(got, " < ") != strings.Join(want[i], " < ") {
			t.Errorf("location %#x (%s): frames %q, addr2line -i: %q", l.Address, addrs[i], got, want[i])
		}
		if len(l.Line) > 1 && l.Line[0].Function.Name == "mix" && l.Line[1].Function.Name == "leafwork" {
			inlined++
		}
	}
	t.Logf("%d locations of the program checked, %d with mix inlined into leafwork", len(locs), inlined)
	if inlined == 0 {
		t.Errorf("no location with mix inlined into leafwork among %d", len(locs))
	}
}

// fileVAddr is the virtual address of file offset off of the ELF file
// path (through its PT_LOAD segments).
func fileVAddr(t *testing.T, path string, off uint64) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	t.Fatalf("%s: file offset %#x in no PT_LOAD", path, off)
	return 0
}

// addr2lineInlined is addr2line -i's frames for each address, innermost
// first, each "function file:line" (the file's base name).
func addr2lineInlined(t *testing.T, path string, addrs []string) [][]string {
	t.Helper()
	// -a: each address's frames follow the address
	out, err := exec.Command("addr2line", append([]string{"-a", "-i", "-f", "-e", path}, addrs...)...).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	discr := regexp.MustCompile(` \(discriminator \d+\)$`)
	var res [][]string
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line's output: line %d %q is not an address", i+1, lines[i])
		}
		var frames []string
		for i++; i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x"); i += 2 {
			file, line, _ := strings.Cut(discr.ReplaceAllString(lines[i+1], ""), ":")
			frames = append(frames, fmt.Sprintf("%s %s:%s", lines[i], filepath.Base(file), line))
		}
		res = append(res, frames)
	}
	if len(res) != len(addrs) {
		t.Fatalf("addr2line gave frames for %d addresses of %d", len(res), len(addrs))
	}
	return res
}
