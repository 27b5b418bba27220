package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// TestSharesWithinProcess: two processes, 60 and 40 of 100 ticks, named by
// JIT loads, each tick with its call stack. %%% stays the share of all
// ticks; the Process_Module_Symbol_Within_Process section's %PROC and the
// call tree's %PROC are shares of the row's process (hot: 45 of app's 60
// ticks = 75 %), what perf report of that process shows.
func TestSharesWithinProcess(t *testing.T) {
	dir := t.TempDir()
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{600, 1}, "app"))
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{700, 1}, "other"))
	tm := uint64(1000)
	for _, j := range []struct {
		pid, addr uint64
		name      string
	}{{600, 0x7000, "main"}, {600, 0x7100, "work"}, {600, 0x7200, "hot"}, {700, 0x9000, "spin"}} {
		must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, tm, []uint64{j.pid, j.pid, j.addr, 0x100}, j.name))
	}
	tick := func(pid uint64, pcs ...uint64) { // pcs: interrupted first, root last
		tm += 10
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, pid, pcs[0], 0}, ""))
		b := make([]byte, 8*len(pcs))
		for i, pc := range pcs {
			binary.LittleEndian.PutUint64(b[8*i:], pc)
		}
		must(tr.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{pid, pid, 0}, string(b)))
	}
	for i := 0; i < 45; i++ {
		tick(600, 0x7210, 0x7110, 0x7010)
	}
	for i := 0; i < 15; i++ {
		tick(600, 0x7120, 0x7010)
	}
	for i := 0; i < 40; i++ {
		tick(700, 0x9010)
	}
	path := filepath.Join(dir, "w.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: 206}}))
	svg := filepath.Join(dir, "f.svg")
	if _, errs, code := runPost(t, dir, "-r", path, "-tprof", "--flame", svg); code != 0 {
		t.Fatalf("post: exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	out := string(b)
	sec := func(title string) string {
		i := strings.Index(out, ")) "+title+"\n")
		if i < 0 {
			t.Fatalf("no section %s:\n%s", title, out)
		}
		s := out[i+len(title)+4:]
		if j := strings.Index(s, "\n)) "); j >= 0 {
			s = s[:j]
		}
		return s
	}
	within := sec("Process_Module_Symbol_Within_Process")
	for _, want := range []string{
		`PID +60 +60\.00 +100\.00  app_600`,
		`MOD +60 +60\.00 +100\.00   JIT`,
		`SYM +45 +45\.00 +75\.00    hot`,
		`SYM +15 +15\.00 +25\.00    work`,
		`PID +40 +40\.00 +100\.00  other_700`,
		`SYM +40 +40\.00 +100\.00    spin`,
		`LAB +TKS +%%% +%PROC  NAMES`,
	} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(within) {
			t.Errorf("Process_Module_Symbol_Within_Process lacks %q:\n%s", want, within)
		}
	}
	// PI's sections keep their form: %%% of all ticks, no new column.
	if !regexp.MustCompile(`(?m)^SYM +45 +45\.00 +hot$`).MatchString(sec("Module_Symbol")) {
		t.Errorf("Module_Symbol changed:\n%s", sec("Module_Symbol"))
	}
	tree := sec("Call_Tree")
	for _, want := range []string{
		`0 +60 +0 +60\.00 +100\.00  app \(pid 600\)`,
		`1 +60 +0 +60\.00 +100\.00   main`,
		`3 +45 +45 +45\.00 +75\.00     hot`,
		`2 +60 +15 +60\.00 +100\.00    work`,
		`0 +40 +0 +40\.00 +100\.00  other \(pid 700\)`,
	} {
		if !regexp.MustCompile(`(?m)^ +` + want + `$`).MatchString(tree) {
			t.Errorf("Call_Tree lacks %q:\n%s", want, tree)
		}
	}
	// The flame graph's tooltips give both shares below the process.
	if b, _ := os.ReadFile(svg); !strings.Contains(string(b), "<title>hot (45 ticks, 45.00% of all, 75.00% of the process)</title>") {
		t.Errorf("flame graph tooltip of hot lacks the share within the process:\n%.3000s", b)
	}
}
