package a2n

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// needTool fails under CI=true (the dependency is installable: see
// scripts/deps/post.txt) and skips with the reason otherwise.
func needTool(t *testing.T, what, why string) {
	t.Helper()
	testenv.Missing(t, "%s is missing: %s", what, why)
}

// loadedAt returns the MTE records of path's executable PT_LOAD segments
// mapped at base in pid, page-aligned as the loader maps them: synthetic
// addresses that need no running process.
func loadedAt(t *testing.T, pid uint32, path string, base uint64) []trace.Record {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []trace.Record
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		start := base + p.Vaddr&^0xfff
		end := (base + p.Vaddr + p.Memsz + 0xfff) &^ 0xfff
		recs = append(recs, trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Time: 2,
			Fixed: []uint64{uint64(pid), start, end - start, p.Off &^ 0xfff, 5}, Str: path})
	}
	if len(recs) == 0 {
		t.Fatalf("%s has no executable segment", path)
	}
	return recs
}

func applyAll(r *Resolver, recs []trace.Record) {
	for i := range recs {
		r.Apply(&recs[i])
	}
}

func stripped(t *testing.T, prog string) string {
	t.Helper()
	out := prog + "-stripped"
	if b, err := exec.Command("strip", "-s", "-o", out, prog).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	return out
}

// withDebugRoot points build-id lookups at dir for the test.
func withDebugRoot(t *testing.T, dir string) {
	old := DebugRoot
	DebugRoot = dir
	t.Cleanup(func() { DebugRoot = old })
}

// codeFuncs returns the sized FUNC symbols of path's .symtab whose names
// have one of the prefixes, by address (aliases once).
func codeFuncs(t *testing.T, path string, prefixes ...string) map[uint64]elf.Symbol {
	t.Helper()
	_, syms := testenv.ELF(t, path)
	out := map[uint64]elf.Symbol{}
	for _, s := range syms {
		if s.Size == 0 {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(s.Name, p) || s.Name == strings.TrimSuffix(p, "*") {
				out[s.Value] = s
			}
		}
	}
	if len(out) < 4 {
		t.Fatalf("%s: only %d test functions found", path, len(out))
	}
	return out
}

// A stripped copy of a program: every address of a function lands on one
// row naming the function's start, no two functions share a row, and the
// ticks per function (here: synthetic ticks at every byte of every
// function, weighted per function) equal those of the unstripped copy
// exactly.
func TestStrippedFunctionsGroupedByEhFrame(t *testing.T) {
	withDebugRoot(t, t.TempDir())
	_, prog := builtSrc(t, "testdata/funcs.c")
	strippedProg := stripped(t, prog)
	const base = 0x555500000000
	r := New(nil)
	applyAll(r, loadedAt(t, 100, prog, base))
	applyAll(r, loadedAt(t, 200, strippedProg, base))
	if m := r.Cache.Module(strippedProg); !m.Stripped || !strings.Contains(m.Source, ".eh_frame") {
		t.Fatalf("stripped copy: stripped %v, names from %q", m.Stripped, m.Source)
	}
	funcs := codeFuncs(t, prog, "fn_", "__libc_fn_alias", "main*")
	rowOf := map[uint64]string{}
	ticksPlain, ticksStripped := map[string]uint64{}, map[string]uint64{}
	for start, s := range funcs {
		weight := uint64(len(s.Name)) // different per function
		for a := start; a < start+s.Size; a++ {
			plain := r.Resolve(100, base+a, false)
			st := r.Resolve(200, base+a, false)
			if plain.Offset != a-start || st.Offset != a-start {
				t.Fatalf("%s+%#x: offsets %#x (symbols) and %#x (.eh_frame)", s.Name, a-start, plain.Offset, st.Offset)
			}
			if row, ok := rowOf[start]; ok && row != st.Symbol {
				t.Fatalf("%s is split over rows %q and %q in the stripped copy", s.Name, row, st.Symbol)
			}
			rowOf[start] = st.Symbol
			ticksPlain[plain.Symbol] += weight
			ticksStripped[st.Symbol] += weight
		}
		want := fmt.Sprintf("prog-stripped+0x%x (function at 0x%x)", start, start) // text: file offset = vaddr here
		if rowOf[start] != want {
			t.Fatalf("%s: row %q, want %q", s.Name, rowOf[start], want)
		}
	}
	if len(ticksStripped) != len(funcs) || len(ticksPlain) != len(funcs) {
		t.Fatalf("%d functions gave %d rows stripped, %d unstripped", len(funcs), len(ticksStripped), len(ticksPlain))
	}
	for start, s := range funcs {
		name := r.Resolve(100, base+start, false).Symbol
		if ticksPlain[name] != ticksStripped[rowOf[start]] {
			t.Fatalf("%s: %d ticks unstripped, %d on its stripped row", name, ticksPlain[name], ticksStripped[rowOf[start]])
		}
		_ = s
	}
}

// Aliases at one address: the unprefixed, default-version, global name.
func TestAliasPreference(t *testing.T) {
	_, prog := builtSrc(t, "testdata/funcs.c")
	pid, addrs, recs := running(t, prog)
	r := New(nil)
	applyAll(r, recs)
	if res := r.Resolve(pid, addrs[4]+1, false); res.Symbol != "fn_alias" {
		t.Fatalf("__libc_fn_alias / fn_alias / __GI_fn_alias resolved to %q, want fn_alias", res.Symbol)
	}
	// libc of this machine, through .dynsym as distributions ship it and
	// through its debug file where installed: pread and pwrite.
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		needTool(t, libc, "the x86-64 glibc this test reads")
	}
	dyn, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{}
	for _, s := range dyn {
		if s.Name == "pread" || s.Name == "pwrite" {
			want[s.Value] = s.Name
		}
	}
	if len(want) != 2 {
		t.Fatalf("libc exports %v", want)
	}
	for _, root := range []string{t.TempDir(), DebugRoot} {
		withDebugRoot(t, root)
		r := New(nil)
		applyAll(r, loadedAt(t, 300, libc, 0x7f0000000000))
		for addr, name := range want {
			if res := r.Resolve(300, 0x7f0000000000+addr+3, false); res.Symbol != name || res.Offset != 3 {
				t.Fatalf("libc %s (names from %s): %+v", name, r.Cache.Module(libc).Source, res)
			}
		}
	}
}

// PLT stubs are name@plt, at the addresses objdump gives them, in a test
// program, in libpython, whose zero-size _init must not own them, and in
// libc, whose PLT mixes stubs of its own IFUNCs (IRELATIVE relocations,
// after the others in .rela.plt: stub i is not relocation i) with the
// others: objdump's *ABS*+0xADDR@plt is named after the IFUNC symbol at
// ADDR (memcpy@plt).
func TestPLTStubs(t *testing.T) {
	if _, err := exec.LookPath("objdump"); err != nil {
		needTool(t, "objdump", "binutils gives the reference PLT stub addresses")
	}
	_, prog := builtSrc(t, "testdata/funcs.c")
	for _, path := range []string{prog, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(path); err != nil {
			needTool(t, path, "libpython3.11 (a library with a zero-size _init before its PLT)")
		}
		stubs := objdumpPLT(t, path)
		if len(stubs) == 0 {
			t.Fatalf("objdump shows no PLT stubs in %s", path)
		}
		ifuncs := ifuncNames(t, path)
		irelative := 0
		const base = 0x7f1000000000
		r := New(nil)
		applyAll(r, loadedAt(t, 400, path, base))
		for addr, name := range stubs {
			a, ok := strings.CutPrefix(strings.TrimSuffix(name, "@plt"), "*ABS*+0x")
			if !ok {
				continue
			}
			v, err := strconv.ParseUint(a, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if len(ifuncs[v]) == 0 {
				continue
			}
			res := r.Resolve(400, base+addr+6, false)
			if !slices.Contains(ifuncs[v], strings.TrimSuffix(res.Symbol, "@plt")) || !strings.HasSuffix(res.Symbol, "@plt") || res.Offset != 6 {
				t.Fatalf("%s: PLT stub %s at %#x (IFUNC %v) resolved to %+v", path, name, addr, ifuncs[v], res)
			}
			delete(stubs, addr)
			irelative++
		}
		if strings.HasSuffix(path, "libc.so.6") && irelative < 10 {
			t.Fatalf("%s: only %d IFUNC stubs in its PLT", path, irelative)
		}
		for addr, name := range stubs {
			if res := r.Resolve(400, base+addr+6, false); res.Symbol != name || res.Offset != 6 {
				t.Fatalf("%s: PLT stub %s at %#x resolved to %+v", path, name, addr, res)
			}
		}
		if !strings.HasPrefix(path, "/usr") {
			for _, name := range []string{"printf@plt", "lib_work@plt"} { // .plt and .plt.got
				if stubs[findStub(stubs, name)] != name {
					t.Fatalf("no %s in %v", name, stubs)
				}
			}
		}
	}
}

// ifuncNames are the names of .dynsym's IFUNC symbols of path by value.
func ifuncNames(t *testing.T, path string) map[uint64][]string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64][]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC {
			n, _ := splitVersion(s.Name)
			out[s.Value] = append(out[s.Value], n)
		}
	}
	return out
}

func findStub(stubs map[uint64]string, name string) uint64 {
	for a, n := range stubs {
		if n == name {
			return a
		}
	}
	return 0
}

// objdumpPLT returns the "<name@plt>" labels objdump prints in .plt,
// .plt.sec and .plt.got.
func objdumpPLT(t *testing.T, path string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	for _, sec := range []string{".plt", ".plt.sec", ".plt.got"} {
		b, err := exec.Command("objdump", "-d", "-j", sec, path).Output()
		if err != nil {
			continue // no such section
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// 0000000000001030 <lib_work@plt>:
			f := strings.Fields(sc.Text())
			if len(f) != 2 || !strings.HasSuffix(f[1], "@plt>:") {
				continue
			}
			addr, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			out[addr] = strings.TrimSuffix(strings.TrimPrefix(f[1], "<"), ">:")
		}
	}
	return out
}

// A FUNC symbol of size 0 owns no address; an assembler label (NOTYPE)
// names its code when nothing else does, as ld.so's _start.
func TestZeroSizeAndLabels(t *testing.T) {
	_, prog := builtSrc(t, "testdata/funcs.c")
	pid, addrs, recs := running(t, prog)
	r := New(nil)
	applyAll(r, recs)
	if res := r.Resolve(pid, addrs[5]+1, false); !strings.HasPrefix(res.Symbol, "prog+0x") {
		t.Fatalf("inside zero-size fn_zero_size: %+v, want prog+0x...", res)
	}
	if res := r.Resolve(pid, addrs[6]+2, false); res.Symbol != "asm_label" || res.Offset != 2 {
		t.Fatalf("label asm_label+2: %+v", res)
	}
	// ld.so: _start is a NOTYPE label (its symbols come from libc6-dbg's
	// build-id debug file on Debian).
	const ldso = "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	f, err := elf.Open(ldso)
	if err != nil {
		t.Fatal(err)
	}
	entry := f.Entry
	f.Close()
	r2 := New(nil)
	applyAll(r2, loadedAt(t, 500, ldso, 0x7f2000000000))
	if m := r2.Cache.Module(ldso); m.Stripped && !strings.HasPrefix(m.Source, "debug file") {
		needTool(t, "ld.so's debug file", "apt-get install libc6-dbg")
	}
	if res := r2.Resolve(500, 0x7f2000000000+entry+1, false); res.Symbol != "_start" || res.Offset != 1 {
		t.Fatalf("ld.so entry point+1: %+v, want _start+1", res)
	}
}

// [vdso]: another process's vDSO address is named from post's own image
// when the trace's kernel release is this kernel's; one unnamed row (and
// one warning) when it is not.
func TestVDSO(t *testing.T) {
	_, prog := builtSrc(t, "testdata/funcs.c")
	pid, addrs, recs := running(t, prog)
	if addrs[7] == 0 {
		t.Fatal("the test program found no __vdso_clock_gettime (dlopen linux-vdso.so.1)")
	}
	r := New(nil)
	r.KernelRelease = kernelRelease()
	applyAll(r, recs)
	if res := r.Resolve(pid, addrs[7]+1, false); res.Module != "[vdso]" || res.Symbol != "clock_gettime" || res.Offset != 1 {
		t.Fatalf("vDSO clock_gettime+1: %+v", res)
	}
	// a Loc in the vDSO: its module is the image, one symbol start for
	// the symbol's addresses (naming by start gives Finish's name)
	l1, l2 := r.Locate(pid, addrs[7]+1, false), r.Locate(pid, addrs[7]+2, false)
	m := r.LocModule(l1)
	if m == nil || m.Err != nil {
		t.Fatalf("LocModule of a vDSO Loc: %v", m)
	}
	s1, ok1 := m.SymbolStart(l1.FileOffset())
	s2, ok2 := m.SymbolStart(l2.FileOffset())
	if !ok1 || !ok2 || s1 != s2 {
		t.Fatalf("vDSO symbol starts of clock_gettime+1 and +2: %#x %v, %#x %v", s1, ok1, s2, ok2)
	}
	if m2 := r.LocModule(r.Locate(pid, addrs[0], false)); m2 == nil || m2 == m {
		t.Fatalf("LocModule of the program's Loc: %v (the vDSO's: %v)", m2, m)
	}
	other := New(nil)
	other.KernelRelease = "0.0.0-another-kernel"
	applyAll(other, recs)
	if res := other.Resolve(pid, addrs[7]+1, false); res.Symbol != "[vdso] (no symbols)" {
		t.Fatalf("vDSO of another kernel: %+v", res)
	}
	if p := other.Cache.Problems(); len(p) != 1 || !strings.Contains(p[0], "0.0.0-another-kernel") {
		t.Fatalf("problems: %q", p)
	}
}

// Build-id debug files and MiniDebugInfo (.gnu_debugdata) name the
// functions of a stripped program.
func TestDebugFiles(t *testing.T) {
	for _, tool := range []string{"objcopy", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			needTool(t, tool, "builds the debug files of the test")
		}
	}
	dir, prog := builtSrc(t, "testdata/funcs.c", "-Wl,--build-id")
	run := func(name string, args ...string) {
		t.Helper()
		if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
	}
	funcs := codeFuncs(t, prog, "fn_")
	check := func(r *Resolver, pid uint32, path, source string) {
		t.Helper()
		if m := r.Cache.Module(path); !strings.Contains(m.Source, source) {
			t.Fatalf("%s: names from %q, want %q", path, m.Source, source)
		}
		for start, s := range funcs {
			if res := r.Resolve(pid, 0x555500000000+start+1, false); res.Symbol != s.Name {
				t.Fatalf("%s: %s+1 resolved to %+v", path, s.Name, res)
			}
		}
	}

	// Build-id debug file.
	f, _ := elf.Open(prog)
	id := buildID(f)
	f.Close()
	if len(id) < 3 {
		t.Fatal("no build-id")
	}
	root := t.TempDir()
	withDebugRoot(t, root)
	os.MkdirAll(filepath.Join(root, ".build-id", id[:2]), 0o755)
	run("objcopy", "--only-keep-debug", prog, filepath.Join(root, ".build-id", id[:2], id[2:]+".debug"))
	s1 := stripped(t, prog)
	r := New(nil)
	applyAll(r, loadedAt(t, 10, s1, 0x555500000000))
	check(r, 10, s1, "debug file")

	// MiniDebugInfo as find-debuginfo makes it: the .symtab of the
	// functions .dynsym lacks, xz-compressed into .gnu_debugdata.
	withDebugRoot(t, t.TempDir())
	var names []string
	for _, s := range funcs {
		names = append(names, s.Name)
	}
	keep := filepath.Join(dir, "keep")
	os.WriteFile(keep, []byte(strings.Join(names, "\n")+"\n"), 0o644)
	mini := filepath.Join(dir, "mini")
	run("objcopy", "--only-keep-debug", prog, mini+".full")
	run("objcopy", "-S", "--remove-section", ".comment", "--keep-symbols="+keep, mini+".full", mini)
	run("xz", "-f", mini)
	s2 := filepath.Join(dir, "prog-mini")
	run("strip", "-s", "-o", s2, prog)
	run("objcopy", "--add-section", ".gnu_debugdata="+mini+".xz", s2)
	r2 := New(nil)
	applyAll(r2, loadedAt(t, 11, s2, 0x555500000000))
	check(r2, 11, s2, ".gnu_debugdata")

	// Damaged .gnu_debugdata: one warning, .eh_frame still groups.
	bad := filepath.Join(dir, "bad.xz")
	os.WriteFile(bad, []byte("\xfd7zXZ\x00 this is not xz data"), 0o644)
	s3 := filepath.Join(dir, "prog-bad")
	run("strip", "-s", "-o", s3, prog)
	run("objcopy", "--add-section", ".gnu_debugdata="+bad, s3)
	r3 := New(nil)
	applyAll(r3, loadedAt(t, 12, s3, 0x555500000000))
	for start := range funcs {
		if res := r3.Resolve(12, 0x555500000000+start+1, false); !strings.Contains(res.Symbol, "(function at") {
			t.Fatalf("damaged .gnu_debugdata: %+v", res)
		}
		break
	}
	if p := r3.Cache.Problems(); len(p) != 1 || !strings.Contains(p[0], ".gnu_debugdata") {
		t.Fatalf("problems: %q", p)
	}
}

// A new thread starts with its creator's name; a thread no record names
// carries its process's; exec renames.
func TestThreadNames(t *testing.T) {
	r := New(nil)
	apply := func(minor uint32, f []uint64, s string) {
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: minor, Fixed: f, Str: s})
	}
	apply(trace.MTEProcess, []uint64{40, 1}, "server")
	apply(trace.MTEFork, []uint64{40, 40, 40, 41, trace.ForkThread}, "")
	apply(trace.MTEThreadName, []uint64{40, 41}, "worker")
	apply(trace.MTEFork, []uint64{40, 41, 40, 42, trace.ForkThread}, "")
	for tid, want := range map[uint32]string{40: "server", 41: "worker", 42: "worker", 43: "server"} {
		if got := r.ThreadName(40, tid); got != want {
			t.Fatalf("thread %d: %q, want %q", tid, got, want)
		}
	}
	apply(trace.MTEExec, []uint64{40, 42}, "/usr/bin/other")
	if got := r.ThreadName(40, 42); got != "other" {
		t.Fatalf("after exec: %q", got)
	}
	if got := r.ThreadName(99, 99); got != "" {
		t.Fatalf("unknown process: %q", got)
	}
}

// sortRuns (the merge of .eh_frame's ascending runs) sorts like a sort.
func TestSortRuns(t *testing.T) {
	for n := 0; n < 300; n += 7 {
		for runs := 1; runs < 80; runs += 13 {
			var s []Sym
			for r := 0; r < runs; r++ {
				start := uint64((r * 7919) % 1000)
				for i := 0; i < n/runs; i++ {
					s = append(s, Sym{Addr: start + uint64(i*3), Size: 1})
				}
			}
			got := sortRuns(append([]Sym(nil), s...), symAddr)
			if len(got) != len(s) {
				t.Fatalf("n %d runs %d: %d entries, want %d", n, runs, len(got), len(s))
			}
			for i := 1; i < len(got); i++ {
				if got[i].Addr < got[i-1].Addr {
					t.Fatalf("n %d runs %d: not sorted at %d", n, runs, i)
				}
			}
			var sum, want uint64
			for i := range s {
				sum += got[i].Addr
				want += s[i].Addr
			}
			if sum != want {
				t.Fatalf("n %d runs %d: entries changed", n, runs)
			}
		}
	}
}

// A module that cannot be read says why in words a user knows: memory of
// memfd_create is not a deleted file.
func TestUnreadableModulesSayWhy(t *testing.T) {
	for path, want := range map[string]string{
		"/memfd:sealed-91173221a7ea (deleted)": "anonymous memory (memfd_create)",
		"/nonexistent/libgone.so (deleted)":    "deleted while its process ran",
		"/nonexistent/libgone.so":              "missing (deleted since tracing?)",
	} {
		m := loadModule(path, "")
		if m.Err == nil || !strings.Contains(m.Err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, m.Err, want)
		}
	}
}

// An exec's process name is the kernel's comm of the new program where the
// trace gives it, whichever side of the MTE_EXEC its MTE_PROCESS lies:
// after it (the module, pitraced when it knows the parent), or with the
// fork record, before it (pitraced read the exec before the fork, which was
// in another CPU's ring). Only the path's base name otherwise; a second
// exec is named by its own records.
func TestExecNamedByComm(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []trace.Record
		want []string // the process's name after each exec
	}{
		{"process record after the exec", []trace.Record{
			{Minor: trace.MTEFork, Fixed: []uint64{10, 10, 20, 20, 0}},
			{Minor: trace.MTEThreadName, Fixed: []uint64{20, 20}, Str: "as"},
			{Minor: trace.MTEExec, Fixed: []uint64{20, 20}, Str: "/usr/bin/x86_64-linux-gnu-as"},
			{Minor: trace.MTEProcess, Fixed: []uint64{20, 10}, Str: "as"},
		}, []string{"as"}},
		{"process record with the fork", []trace.Record{
			{Minor: trace.MTEFork, Fixed: []uint64{10, 10, 20, 20, 0}},
			{Minor: trace.MTEProcess, Fixed: []uint64{20, 10}, Str: "as"},
			{Minor: trace.MTEThreadName, Fixed: []uint64{20, 20}, Str: "as"},
			{Minor: trace.MTEExec, Fixed: []uint64{20, 20}, Str: "/usr/bin/x86_64-linux-gnu-as"},
		}, []string{"as"}},
		{"no process record", []trace.Record{
			{Minor: trace.MTEFork, Fixed: []uint64{10, 10, 20, 20, 0}},
			{Minor: trace.MTEExec, Fixed: []uint64{20, 20}, Str: "/usr/bin/x86_64-linux-gnu-as"},
		}, []string{"x86_64-linux-gnu-as"}},
		{"second exec", []trace.Record{
			{Minor: trace.MTEFork, Fixed: []uint64{10, 10, 20, 20, 0}},
			{Minor: trace.MTEProcess, Fixed: []uint64{20, 10}, Str: "sh"},
			{Minor: trace.MTEExec, Fixed: []uint64{20, 20}, Str: "/usr/bin/dash"},
			{Minor: trace.MTEExec, Fixed: []uint64{20, 20}, Str: "/usr/bin/ls"},
		}, []string{"sh", "ls"}},
	} {
		r := New(nil)
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEProcess, Fixed: []uint64{10, 1}, Str: "make"})
		var got []string
		for i := range c.recs {
			c.recs[i].Major = trace.MajorMTE
			r.Apply(&c.recs[i])
			if c.recs[i].Minor == trace.MTEExec {
				got = append(got, r.ProcessName(20))
			}
		}
		// what the exec's records leave once all are applied
		got[len(got)-1] = r.ProcessName(20)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: named %q after each exec, want %q", c.name, got, c.want)
		}
		if tn := r.ThreadName(20, 20); tn != c.want[len(c.want)-1] {
			t.Errorf("%s: thread named %q, want %q", c.name, tn, c.want[len(c.want)-1])
		}
	}
}
