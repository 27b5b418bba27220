package a2n

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/trace"
)

// built compiles the test program (PIE) and its shared library.
func built(t *testing.T, extra ...string) (dir, prog string) {
	t.Helper()
	return builtSrc(t, "testdata/prog.c", extra...)
}

// builtSrc compiles src as a PIE program "prog" linked with libwork.so.
func builtSrc(t *testing.T, src string, extra ...string) (dir, prog string) {
	t.Helper()
	dir = t.TempDir()
	lib := filepath.Join(dir, "libwork.so")
	if out, err := exec.Command("gcc", "-O1", "-g", "-shared", "-fPIC", "-o", lib, "testdata/lib.c").CombinedOutput(); err != nil {
		t.Fatalf("build lib: %v\n%s", err, out)
	}
	prog = filepath.Join(dir, "prog")
	args := append([]string{"-O1", "-g", "-fPIE", "-pie", "-o", prog, src, "-L" + dir, "-lwork", "-Wl,-rpath," + dir}, extra...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("build prog: %v\n%s", err, out)
	}
	return dir, prog
}

// running starts prog and returns its pid, the printed function addresses
// and a trace writer holding MTE records for its real executable mappings.
func running(t *testing.T, prog string) (pid uint32, addrs []uint64, recs []trace.Record) {
	t.Helper()
	cmd := exec.Command(prog)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(line) {
		v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
		if err != nil && f != "(nil)" {
			t.Fatalf("address %q", f)
		}
		addrs = append(addrs, v)
	}
	pid = uint32(cmd.Process.Pid)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, trace.Record{Major: trace.MajorMTE, Minor: trace.MTEProcess, Time: 1, Fixed: []uint64{uint64(pid), 1}, Str: "prog"})
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1][2] != 'x' {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		s, _ := strconv.ParseUint(lo, 16, 64)
		e, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		recs = append(recs, trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Time: 2, Fixed: []uint64{uint64(pid), s, e - s, off, 5}, Str: f[5]})
	}
	return pid, addrs, recs
}

func TestResolveExecutableAndSharedLibrary(t *testing.T) {
	_, prog := built(t)
	pid, addrs, recs := running(t, prog)
	r := New(nil)
	r.Lines = true
	for i := range recs {
		r.Apply(&recs[i])
	}
	for i, want := range []string{"prog_hot", "prog_cold", "lib_work"} {
		res := r.Resolve(pid, addrs[i]+2, false)
		if res.Symbol != want || res.Offset != 2 {
			t.Fatalf("%s at %#x resolved to %+v", want, addrs[i]+2, res)
		}
		if i < 2 && (res.Module != prog || !strings.HasSuffix(res.File, "prog.c") || res.Line == 0) {
			t.Fatalf("%s: module %q, source %s:%d", want, res.Module, res.File, res.Line)
		}
		if i == 2 && !strings.HasSuffix(res.Module, "libwork.so") {
			t.Fatalf("lib_work module %q", res.Module)
		}
	}
	if res := r.Resolve(pid, 0x10, false); res.Symbol != "<unknown>" {
		t.Fatalf("an unmapped address resolved to %+v", res)
	}
	if r.ProcessName(pid) != "prog" {
		t.Fatalf("process name %q", r.ProcessName(pid))
	}
}

func TestStrippedBinary(t *testing.T) {
	dir, prog := built(t, "-rdynamic") // exports prog_hot/prog_cold in .dynsym
	stripped := filepath.Join(dir, "prog-stripped")
	if out, err := exec.Command("strip", "-s", "-o", stripped, prog).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	pid, addrs, recs := running(t, stripped)
	r := New(nil)
	for i := range recs {
		r.Apply(&recs[i])
	}
	if res := r.Resolve(pid, addrs[0], false); res.Symbol != "prog_hot" {
		t.Fatalf("stripped binary: prog_hot via .dynsym resolved to %+v", res)
	}
	if m := r.Cache.Module(stripped); !m.Stripped {
		t.Fatal("module not marked stripped")
	}
	// Without .dynsym entries (not exported): module+offset, never dropped.
	dir2, prog2 := built(t)
	stripped2 := filepath.Join(dir2, "prog-stripped2")
	if out, err := exec.Command("strip", "-s", "-o", stripped2, prog2).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	pid2, addrs2, recs2 := running(t, stripped2)
	r2 := New(nil)
	for i := range recs2 {
		r2.Apply(&recs2[i])
	}
	res := r2.Resolve(pid2, addrs2[1], false)
	if !strings.HasPrefix(res.Symbol, "prog-stripped2+0x") || res.Module != stripped2 {
		t.Fatalf("unexported function in a stripped binary resolved to %+v", res)
	}
}

func TestDeletedModuleIsReported(t *testing.T) {
	dir, prog := built(t)
	pid, addrs, recs := running(t, prog)
	if err := os.Remove(prog); err != nil {
		t.Fatal(err)
	}
	r := New(nil)
	for i := range recs {
		r.Apply(&recs[i])
	}
	res := r.Resolve(pid, addrs[0], false)
	if !strings.HasPrefix(res.Symbol, "prog+0x") {
		t.Fatalf("deleted binary: %+v", res)
	}
	if res := r.Resolve(pid, addrs[2], false); res.Symbol != "lib_work" {
		t.Fatalf("the library still resolves: %+v", res)
	}
	p := r.Cache.Problems()
	if len(p) != 1 || !strings.Contains(p[0], "missing") {
		t.Fatalf("problems %v", p)
	}
	_ = dir
}

func TestKernelSymbols(t *testing.T) {
	ks := []byte("ffffffff81000000 T _stext\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffff81000300 d some_data\nffffffffc0001000 t mod_fn\t[mymod]\n")
	r := New(ks)
	for addr, want := range map[uint64][2]string{
		0xffffffff81000150: {"do_work", "[kernel]"},
		0xffffffff81000250: {"helper", "[kernel]"},
		0xffffffffc0001010: {"mod_fn", "[mymod]"},
	} {
		res := r.Resolve(1, addr, true)
		if res.Symbol != want[0] || res.Module != want[1] {
			t.Fatalf("%#x: %+v, want %v", addr, res, want)
		}
	}
	// The last line needs no newline.
	if res := New([]byte("ffffffff81000000 T first\nffffffff81000100 T last_one")).Resolve(1, 0xffffffff81000101, true); res.Symbol != "last_one" {
		t.Fatalf("last line without a newline: %+v", res)
	}
	// The real kallsyms of this machine resolves a known kernel function.
	real, err := os.ReadFile("/proc/kallsyms")
	if err != nil || !strings.Contains(string(real), " schedule\n") {
		t.Skip("skipped: /proc/kallsyms unreadable or without addresses here")
	}
	var addr uint64
	for _, l := range strings.Split(string(real), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[2] == "schedule" {
			addr, _ = strconv.ParseUint(f[0], 16, 64)
		}
	}
	if addr == 0 {
		t.Skip("skipped: kallsyms addresses are hidden (kptr_restrict)")
	}
	if res := New(real).Resolve(1, addr+1, true); res.Symbol != "schedule" {
		t.Fatalf("schedule+1 resolved to %+v", res)
	}
}

func TestJITAddressReuse(t *testing.T) {
	r := New(nil)
	apply := func(minor uint32, tm uint64, f []uint64, s string) {
		rec := trace.Record{Major: trace.MajorJITLoad, Minor: minor, Time: tm, Fixed: f, Str: s}
		r.Apply(&rec)
	}
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEProcess, Fixed: []uint64{77, 1}, Str: "java"})
	apply(trace.JITLoad, 10, []uint64{77, 78, 0x7000, 0x100}, "Foo.first()V")
	if res := r.Resolve(77, 0x7010, false); res.Symbol != "Foo.first()V" || res.Module != "JIT" {
		t.Fatalf("before reuse: %+v", res)
	}
	apply(trace.JITUnload, 20, []uint64{77, 0x7000, 0x100}, "")
	if res := r.Resolve(77, 0x7010, false); res.Symbol == "Foo.first()V" {
		t.Fatalf("unloaded code still resolves: %+v", res)
	}
	apply(trace.JITLoad, 30, []uint64{77, 78, 0x7000, 0x80}, "Bar.second()V")
	if res := r.Resolve(77, 0x7010, false); res.Symbol != "Bar.second()V" {
		t.Fatalf("after reuse: %+v", res)
	}
}

func TestPerfMapAndJitdump(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "perf-55.map"), []byte("7f0000001000 40 Interpreted LHot;::spin\n7f0000002000 0x20 LHot;::other\nbad line\n"), 0o644)
	r := New(nil)
	r.PerfMapDir = dir
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{55, 0x7f0000000000, 0x10000, 0, 7}, Str: "//anon"})
	if res := r.Resolve(55, 0x7f0000001010, false); res.Symbol != "Interpreted LHot;::spin" || res.Module != "JIT" {
		t.Fatalf("perf map: %+v", res)
	}
	if res := r.Resolve(55, 0x7f0000003000, false); res.Symbol != "//anon (no symbols)" {
		t.Fatalf("unnamed JIT memory: %+v", res)
	}
	// A minimal jitdump with one code-load record.
	var b []byte
	le := func(v uint64, n int) {
		for i := 0; i < n; i++ {
			b = append(b, byte(v>>(8*i)))
		}
	}
	le(0x4A695444, 4)
	le(1, 4)
	le(40, 4)
	le(62, 4)
	le(66, 4)
	le(0, 4)
	le(0, 8)
	le(0, 8)
	name := "jitted_fn\x00"
	le(0, 4)
	le(uint64(56+len(name)), 4)
	le(5, 8)
	le(66, 4)
	le(66, 4)
	le(0x9000, 8)
	le(0x9000, 8)
	le(0x30, 8)
	le(1, 8)
	b = append(b, name...)
	syms := ParseJitdump(b)
	if len(syms) != 1 || syms[0].Name != "jitted_fn" || syms[0].Addr != 0x9000 || syms[0].Size != 0x30 {
		t.Fatalf("jitdump: %+v", syms)
	}
	if ParseJitdump(b[:50]) != nil {
		t.Fatal("truncated jitdump parsed")
	}
}

func TestDemangle(t *testing.T) {
	if got := demangled("_ZN3foo3barEv"); got != "foo::bar" {
		t.Fatalf("C++: %q", got)
	}
	if got := demangled("_RNvCs1234_5hello4main"); !strings.Contains(got, "hello::main") {
		t.Fatalf("Rust v0: %q", got)
	}
	if got := demangled("plain_c"); got != "plain_c" {
		t.Fatalf("C: %q", got)
	}
}

// Past a few processes asking for perf maps, the directory is listed once
// and only the files it holds are opened: a process with a map is still
// named (whichever it is in the order), one without costs no open — a map
// written after the listing is not seen (post runs after the trace).
func TestPerfMapDirListedOnce(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "perf-1030.map"), []byte("7f0000001000 40 LHot;::spin\n"), 0o644)
	r := New(nil)
	r.PerfMapDir = dir
	anon := func(pid uint32) {
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{uint64(pid), 0x7f0000000000, 0x10000, 0, 7}, Str: "//anon"})
	}
	for pid := uint32(1000); pid < 1000+perfMapOpens+20; pid++ {
		anon(pid)
		r.Resolve(pid, 0x7f0000001010, false)
	}
	if res := r.Resolve(1030, 0x7f0000001010, false); res.Symbol != "LHot;::spin" {
		t.Fatalf("the map of the 31st process asked: %+v", res)
	}
	if r.perfMaps.names == nil || !r.perfMaps.names["perf-1030.map"] || len(r.perfMaps.names) != 1 {
		t.Fatalf("listing %v, want perf-1030.map alone", r.perfMaps.names)
	}
	os.WriteFile(filepath.Join(dir, "perf-2000.map"), []byte("7f0000001000 40 LLate;::x\n"), 0o644)
	anon(2000)
	if res := r.Resolve(2000, 0x7f0000001010, false); res.Symbol == "LLate;::x" {
		t.Fatalf("a map written after the listing was opened: the directory was not listed once")
	}
}
