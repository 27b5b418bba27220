package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// TestSyntheticTicksInCompiledExample compiles the bundled example (a PIE),
// maps its executable segment at a chosen base in a synthetic trace, and
// places 600/300/100 ticks spread over the bodies of heavy, medium and light
// (addresses taken from the binary's own symbol table). post must resolve
// every tick through the segment, file offset and program headers back to
// the right function: the counts come out exactly, in that order.
func TestSyntheticTicksInCompiledExample(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Missing(t, "gcc is not installed (apt-get install gcc)")
	}
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	bin := filepath.Join(dir, "cpuburn")
	if out, err := exec.Command("gcc", "-O2", "-fPIE", "-pie", "-pthread", "-o", bin, filepath.Join(root, "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	bodies, text := burnBodies(t, bin)
	const base, page = 0x555555554000, 0x1000
	segStart := base + text.Vaddr&^(page-1)
	segOff := text.Off &^ (page - 1)
	segSize := text.Vaddr + text.Memsz - text.Vaddr&^(page-1)

	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const pid = 4242
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 10, []uint64{pid, 1}, "cpuburn"))
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 20, []uint64{pid, segStart, segSize, segOff, 5}, bin))
	want := map[string]int{"heavy": 600, "medium": 300, "light": 100}
	tm, ticks := uint64(100), 0
	for i := 0; i < 1000; i++ {
		// Interleave the three functions as a sampler would see them.
		name := "heavy"
		switch {
		case i%10 == 9:
			name = "light"
		case i%10 >= 6:
			name = "medium"
		}
		s := bodies[name]
		ip := base + s.Value + uint64(i*7)%s.Size
		tm += 1000
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, pid, ip, 0}, ""))
		ticks++
	}
	path := filepath.Join(dir, "burn.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: uint64(ticks + 2)}}))

	if _, errs, code := runPost(t, dir, "-r", path, "-tprof"); code != 0 {
		t.Fatalf("post exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tprof.out"))
	must(err)
	rows := sections(t, string(b))["Module_Symbol"]
	got := map[string]int{}
	var order []string
	for _, r := range rows {
		if r[0] == "SYM" {
			n, _ := strconv.Atoi(r[1])
			got[r[3]] += n
			order = append(order, r[3])
		}
	}
	for name, n := range want {
		if got[name] != n {
			t.Fatalf("%s: %d ticks, want %d\n%s", name, got[name], n, b)
		}
	}
	if len(order) != 3 || order[0] != "heavy" || order[1] != "medium" || order[2] != "light" {
		t.Fatalf("Module_Symbol rows %v, want heavy, medium, light and nothing else\n%s", order, b)
	}
}

// burnBodies reads the built example bin: its heavy, medium and light
// symbols and its executable segment.
func burnBodies(t *testing.T, bin string) (map[string]elf.Symbol, *elf.Prog) {
	t.Helper()
	f, syms := testenv.ELF(t, bin)
	defer f.Close()
	bodies := map[string]elf.Symbol{}
	for _, s := range syms {
		if (s.Name == "heavy" || s.Name == "medium" || s.Name == "light") && s.Size > 0 {
			bodies[s.Name] = s
		}
	}
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	if len(bodies) != 3 || text == nil {
		t.Fatalf("example lacks heavy/medium/light symbols (%d) or an executable segment", len(bodies))
	}
	return bodies, text
}
