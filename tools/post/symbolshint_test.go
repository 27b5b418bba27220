package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// TestSymbolsHintOnStrippedModule: a program stripped at install, its
// debug file split off (objcopy --only-keep-debug, --add-gnu-debuglink)
// and not where post looks: its ticks land on unnamed rows, and post says
// on stderr which share of the ticks is unnamed in which module and where
// it looked for the debug file. With the debug file put beside the
// program, the same trace names heavy, medium and light (found by the
// debug link, the table cache noticing the file) and the note is gone.
func TestSymbolsHintOnStrippedModule(t *testing.T) {
	for _, tool := range []string{"gcc", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is not installed (apt-get install gcc binutils)", tool)
		}
	}
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	bin := filepath.Join(dir, "cpuburn")
	sh := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	sh("gcc", "-O2", "-g", "-fPIE", "-pie", "-pthread", "-o", bin, filepath.Join(root, "examples", "cpuburn.c"))
	bodies, text := burnBodies(t, bin)
	debug := filepath.Join(dir, "cpuburn.debug")
	away := filepath.Join(t.TempDir(), "cpuburn.debug")
	sh("objcopy", "--only-keep-debug", bin, debug)
	sh("strip", "-s", bin)
	sh("objcopy", "--add-gnu-debuglink="+debug, bin)
	if err := os.Rename(debug, away); err != nil {
		t.Fatal(err)
	}

	const base, page, pid = 0x555555554000, 0x1000, 4242
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 10, []uint64{pid, 1}, "cpuburn"))
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 20,
		[]uint64{pid, base + text.Vaddr&^(page-1), text.Vaddr + text.Memsz - text.Vaddr&^(page-1), text.Off &^ (page - 1), 5}, bin))
	tm, ticks := uint64(100), 0
	for i := 0; i < 1000; i++ {
		name := [...]string{"heavy", "heavy", "heavy", "heavy", "heavy", "heavy", "medium", "medium", "medium", "light"}[i%10]
		s := bodies[name]
		tm += 1000
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, pid, base + s.Value + uint64(i*7)%s.Size, 0}, ""))
		ticks++
	}
	path := filepath.Join(dir, "burn.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: uint64(ticks + 2)}}))

	cache := t.TempDir()
	for _, found := range []bool{false, true} {
		if found {
			if err := os.Rename(away, debug); err != nil {
				t.Fatal(err)
			}
		}
		_, errs, code := runPost(t, dir, "-r", path, "-tprof", "--cache-dir", cache)
		if code != 0 {
			t.Fatalf("post exit %d: %s", code, errs)
		}
		b, err := os.ReadFile(filepath.Join(dir, "tprof.out"))
		must(err)
		named := 0
		for _, r := range sections(t, string(b))["Module_Symbol"] {
			if r[0] == "SYM" && bodies[r[3]].Size > 0 {
				named++
			}
		}
		note := "note: 100 % of the ticks are in functions of " + bin + " without a name"
		if !found {
			if named != 0 || !strings.Contains(errs, note) || !strings.Contains(errs, "looked for ") || !strings.Contains(errs, "by its .gnu_debuglink") {
				t.Fatalf("debug file absent: %d rows named, stderr:\n%s\ntprof.out:\n%s", named, errs, b)
			}
			continue
		}
		if named != 3 || strings.Contains(errs, "without a name") {
			t.Fatalf("debug file beside the program: %d of heavy, medium, light named, stderr:\n%s\ntprof.out:\n%s", named, errs, b)
		}
	}
}
