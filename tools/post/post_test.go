package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
)

// synthetic writes a trace where one JIT address range holds two methods at
// different times, plus kernel ticks, and returns its path.
func synthetic(t *testing.T, dir string, lostRecords uint64) (path string, ticks int) {
	t.Helper()
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{500, 1}, "java"))
	must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, 100, []uint64{500, 501}, "main"))
	tm := uint64(1000)
	tick := func(ip uint64, kernel bool) {
		flags := uint64(0)
		if kernel {
			flags = trace.TprofKernel
		}
		tm += 10
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{500, 501, ip, flags}, ""))
		ticks++
	}
	must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, tm, []uint64{500, 501, 0x7000, 0x100}, "Foo.first()V"))
	for i := 0; i < 30; i++ {
		tick(0x7010, false)
	}
	tm += 10
	must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, tm, []uint64{500, 501, 0x7000, 0x100}, "Bar.second()V"))
	for i := 0; i < 50; i++ {
		tick(0x7020, false)
	}
	for i := 0; i < 20; i++ {
		tick(0xffffffff81000110, true)
	}
	path = filepath.Join(dir, "syn.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkKallsyms, 0, []byte("ffffffff81000100 T do_syscall\n")))
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: uint64(ticks + 2), Lost: lostRecords}}))
	return path, ticks
}

func runPost(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"-o", dir}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

var rowRE = regexp.MustCompile(`^(PID|TID|MOD|SYM)\s+(\d+)\s+([\d.]+)\s+(.*)$`)

// sections parses tprof.out into section title -> rows.
func sections(t *testing.T, text string) map[string][][4]string {
	out := map[string][][4]string{}
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, ")) ") {
			cur = strings.TrimPrefix(l, ")) ")
			continue
		}
		if m := rowRE.FindStringSubmatch(l); m != nil && cur != "" {
			out[cur] = append(out[cur], [4]string{m[1], m[2], m[3], strings.TrimSpace(m[4])})
		}
	}
	return out
}

func TestSyntheticJITReuseAndTotals(t *testing.T) {
	dir := t.TempDir()
	path, ticks := synthetic(t, dir, 0)
	pb := filepath.Join(dir, "p.pb.gz")
	folded := filepath.Join(dir, "f.folded")
	_, errs, code := runPost(t, dir, "-r", path, "-show", "-tprof", "--pprof", pb, "--folded", folded)
	if code != 0 {
		t.Fatalf("post: exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	secs := sections(t, string(b))
	syms := map[string]int{}
	for _, r := range secs["Module_Symbol"] {
		if r[0] == "SYM" {
			n, _ := strconv.Atoi(r[1])
			syms[r[3]] = n
		}
	}
	if syms["Foo.first()V"] != 30 || syms["Bar.second()V"] != 50 || syms["do_syscall"] != 20 {
		t.Fatalf("JIT reuse or kernel ticks misattributed: %v\n%s", syms, b)
	}
	// Every section's top-level rows add up to the number of tprof records.
	for _, name := range []string{"Process", "Process_Module", "Process_Thread_Module_Symbol", "Module_Symbol"} {
		rows := secs[name]
		if len(rows) == 0 {
			t.Fatalf("section %s missing", name)
		}
		top := rows[0][0]
		sum := 0
		for _, r := range rows {
			if r[0] == top {
				n, _ := strconv.Atoi(r[1])
				sum += n
			}
		}
		if sum != ticks {
			t.Fatalf("section %s totals %d, trace has %d ticks", name, sum, ticks)
		}
	}
	if !strings.Contains(string(b), "Total Ticks   : 100") {
		t.Fatalf("header:\n%s", b)
	}
	show, _ := os.ReadFile(filepath.Join(dir, "post.show"))
	if n := strings.Count(string(show), "TPROF_TICK"); n != ticks || !strings.Contains(string(show), "MTE_PROCESS") || !strings.Contains(string(show), "-> JIT Bar.second()V") {
		t.Fatalf("post.show has %d ticks:\n%.2000s", n, show)
	}
	fb, _ := os.ReadFile(folded)
	if !strings.Contains(string(fb), "java (pid 500);JIT;Bar.second()V 50\n") { // modern forms name processes in decimal
		t.Fatalf("folded:\n%s", fb)
	}
	// pprof: the file parses and its top symbols are tprof.out's.
	p := readProfile(t, pb)
	var total int64
	for _, s := range p.Sample {
		total += s.Value[0]
	}
	if total != int64(ticks) {
		t.Fatalf("pprof holds %d samples, want %d", total, ticks)
	}
	// pprof names the first mapping as the profile's binary: it must be
	// the module with the most ticks.
	byMap := map[*profile.Mapping]int64{}
	for _, s := range p.Sample {
		byMap[s.Location[0].Mapping] += s.Value[0]
	}
	for m, n := range byMap {
		if n > byMap[p.Mapping[0]] {
			t.Fatalf("first pprof mapping %s has %d ticks, %s has %d", p.Mapping[0].File, byMap[p.Mapping[0]], m.File, n)
		}
	}
	if _, err := exec.LookPath("go"); err == nil {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", pb).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, out)
		}
		top := topSymbols(string(out), 3)
		want := []string{"Bar.second()V", "Foo.first()V", "do_syscall"}
		if strings.Join(top, ",") != strings.Join(want, ",") {
			t.Fatalf("pprof -top lists %v, tprof.out %v\n%s", top, want, out)
		}
	}
}

// topSymbols reads the names of the first n rows of `go tool pprof -top`.
func topSymbols(out string, n int) []string {
	var names []string
	started := false
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "flat%") {
			started = true
			continue
		}
		f := strings.Fields(l)
		if started && len(f) >= 6 {
			names = append(names, strings.Join(f[5:], " "))
			if len(names) == n {
				break
			}
		}
	}
	return names
}

func TestLostRecordsWarnEveryReport(t *testing.T) {
	dir := t.TempDir()
	path, _ := synthetic(t, dir, 7)
	pb := filepath.Join(dir, "p.pb.gz")
	if _, errs, code := runPost(t, dir, "-r", path, "-show", "-tprof", "--pprof", pb); code != 0 {
		t.Fatal(errs)
	}
	for _, f := range []string{"tprof.out", "post.show"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if !strings.Contains(string(b), "records were lost") {
			t.Fatalf("%s does not warn about lost records", f)
		}
	}
	tp, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	if i := strings.Index(string(tp), "records were lost"); i < 0 || i > strings.Index(string(tp), "Total Ticks") {
		t.Fatal("the warning is not at the top of tprof.out")
	}
	fh, _ := os.Open(pb)
	p, err := profile.Parse(fh)
	fh.Close()
	if err != nil || len(p.Comments) == 0 || !strings.Contains(p.Comments[0], "lost") {
		t.Fatalf("pprof comments %v (%v)", p.Comments, err)
	}
}

// -o names a directory that does not exist yet: post makes it (it used to
// fail after the whole report was computed); a path under a file fails at
// once with one line.
func TestOutputDirMade(t *testing.T) {
	dir := t.TempDir()
	path, _ := synthetic(t, dir, 0)
	out := filepath.Join(dir, "new", "reports")
	if _, errs, code := runPost(t, dir, "-r", path, "-tprof", "-o", out); code != 0 {
		t.Fatalf("post -o %s: exit %d: %s", out, code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(out, "tprof.out")); err != nil || !strings.Contains(string(b), "Total Ticks") {
		t.Fatalf("tprof.out in the new directory: %v", err)
	}
	file := filepath.Join(dir, "afile")
	os.WriteFile(file, nil, 0o644)
	_, errs, code := runPost(t, dir, "-r", path, "-tprof", "-o", filepath.Join(file, "x"))
	if code == 0 || !strings.Contains(errs, "output directory") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("-o under a file: exit %d, %q", code, errs)
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	path, _ := synthetic(t, dir, 0)
	good, _ := os.ReadFile(path)
	trunc := filepath.Join(dir, "trunc.nrm2")
	os.WriteFile(trunc, good[:len(good)-100], 0o644)
	foreign := filepath.Join(dir, "foreign.nrm2")
	os.WriteFile(foreign, []byte("#!/bin/sh\necho not a trace\n"), 0o644)
	for name, args := range map[string][]string{
		"missing":   {"-r", filepath.Join(dir, "nope.nrm2")},
		"truncated": {"-strict", "-r", trunc},
		"foreign":   {"-r", foreign},
		"bad flag":  {"-frobnicate"},
		"extra arg": {"-r", path, "oops"},
	} {
		_, errs, code := runPost(t, dir, args...)
		if code == 0 {
			t.Fatalf("%s: exit 0", name)
		}
		if name != "bad flag" && name != "extra arg" && strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Fatalf("%s: want one line, got:\n%s", name, errs)
		}
		if name == "truncated" && !strings.Contains(errs, "byte offset") {
			t.Fatalf("truncated: %s", errs)
		}
		if name == "foreign" && !strings.Contains(errs, "not a perfinsp trace") {
			t.Fatalf("foreign: %s", errs)
		}
	}
}

// TestExampleEndToEnd traces the bundled example with swtrace and checks
// that post puts heavy, medium and light in order near 60/30/10 %.
func TestExampleEndToEnd(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("enable", "tprof")
	sw("setrate", "1000")
	sw("on")
	pid, _ := e.RunBurn(150)
	sw("off")
	sw("get", "ex.nrm2")
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "ex.nrm2"), "-tprof"); code != 0 {
		t.Fatal(errs)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "tprof.out"))
	secs := sections(t, string(b))
	// In Process_Thread_Module_Symbol, sum the example process's symbols.
	label := "_" + strconv.Itoa(pid)
	inProc := false
	syms := map[string]int{}
	procTicks := 0
	for _, r := range secs["Process_Thread_Module_Symbol"] {
		if r[0] == "PID" {
			inProc = strings.HasSuffix(r[3], label)
			if inProc {
				procTicks, _ = strconv.Atoi(r[1])
			}
			continue
		}
		if inProc && r[0] == "SYM" {
			n, _ := strconv.Atoi(r[1])
			syms[r[3]] += n
		}
	}
	if procTicks < 300 {
		t.Fatalf("only %d ticks for the example:\n%.3000s", procTicks, b)
	}
	h, m, l := syms["heavy"], syms["medium"], syms["light"]
	if !(h > m && m > l && l > 0) {
		t.Fatalf("order heavy %d > medium %d > light %d broken", h, m, l)
	}
	for name, want := range map[string]float64{"heavy": 60, "medium": 30, "light": 10} {
		got := 100 * float64(syms[name]) / float64(h+m+l)
		if got < want-8 || got > want+8 {
			t.Fatalf("%s: %.1f %% of the three, want about %.0f %%", name, got, want)
		}
	}
	// Kernel ticks resolve to kernel symbols, not bare addresses.
	kernelNamed, kernelBare := 0, 0
	inKernel := false
	for _, r := range secs["Module_Symbol"] {
		if r[0] == "MOD" {
			inKernel = r[3] == "[kernel]"
			continue
		}
		if inKernel {
			if strings.HasPrefix(r[3], "[kernel]+0x") {
				kernelBare++
			} else {
				kernelNamed++
			}
		}
	}
	if kernelNamed == 0 {
		t.Fatalf("no kernel tick resolved to a symbol (%d bare)", kernelBare)
	}
}

// tprof.out is written over an old one in place (not truncated first):
// whether the old file is longer or shorter, what is left is the new
// report alone.
func TestTprofOutKeepsTheOld(t *testing.T) {
	dir := t.TempDir()
	path, _ := synthetic(t, dir, 0)
	out := filepath.Join(dir, "tprof.out")
	report := func() (string, string) {
		t.Helper()
		_, errs, code := runPost(t, dir, "-r", path, "-tprof")
		if code != 0 {
			t.Fatalf("post: exit %d: %s", code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), errs
	}
	want, _ := report()
	if !strings.Contains(want, "Total Ticks") {
		t.Fatalf("no report:\n%s", want)
	}
	for _, old := range []string{strings.Repeat("old report line\n", len(want)/4), "short\n"} {
		if err := os.WriteFile(out, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		got, errs := report()
		if got != want {
			t.Fatalf("over an old file of %d bytes: %d bytes, want the report's %d:\n%.300s", len(old), len(got), len(want), got[max(0, len(want)-100):])
		}
		if b, err := os.ReadFile(out + ".old"); err != nil || string(b) != old {
			t.Fatalf("the previous tprof.out (%d bytes) is not tprof.out.old: %v, %d bytes", len(old), err, len(b))
		}
		if !strings.Contains(errs, "previous "+out+" is kept as tprof.out.old") {
			t.Fatalf("post did not say it kept the previous report: %q", errs)
		}
	}
}

// readProfile parses the pprof file at path.
func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
