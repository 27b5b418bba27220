package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"perfinsp/analysis/tprof"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// The progress lines' pace: on a terminal nothing in the first 2 s, then
// a line every 2 s and a last one at the end; with --progress also a line
// at each tenth read, and the last one even after a short read; nothing
// once the whole trace is read (the report's making is not reading).
func TestProgressPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms   int
		read int64
	}
	for _, c := range []struct {
		name   string
		always bool
		steps  []step
		want   []string
	}{
		{"terminal", false,
			[]step{{100, 150}, {1900, 400}, {2100, 450}, {3000, 600}, {4200, 700}, {4300, 990}, {6500, 1000}},
			[]string{"450 B of 1000 B (45 %)", "700 B of 1000 B (70 %)", "1000 B of 1000 B (100 %)"}},
		{"terminal, a short read", false,
			[]step{{100, 500}, {1500, 1000}},
			nil},
		{"--progress", true,
			[]step{{100, 150}, {200, 180}, {300, 420}, {400, 430}, {2500, 440}, {2600, 1000}},
			[]string{"150 B of 1000 B (15 %)", "420 B of 1000 B (42 %)", "440 B of 1000 B (44 %)", "1000 B of 1000 B (100 %)"}},
		{"--progress, a short read", true,
			nil,
			[]string{"1000 B of 1000 B (100 %)"}},
	} {
		var out bytes.Buffer
		p := &progress{w: &out, total: 1000, always: c.always, start: t0}
		for _, s := range c.steps {
			p.step(at(s.ms), s.read)
		}
		p.end()
		var want string
		for _, l := range c.want {
			want += "post: read " + l + "\n"
		}
		if out.String() != want {
			t.Errorf("%s: lines\n%s\nwant\n%s", c.name, out.String(), want)
		}
	}
}

// bigTrace writes a trace of two CPUs' ticks, large enough to be read on
// every CPU at once.
func bigTrace(t *testing.T, dir string) string {
	t.Helper()
	var m trace.Writer
	tr := make([]trace.Writer, 2)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{500, 1}, "prog"))
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{600, 1}, "other"))
	for i := range 200_000 {
		cpu := i % 2
		pid := uint64(500 + 100*cpu)
		must(tr[cpu].Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 1000+uint64(i), []uint64{pid, pid + 1, 0xffffffff81000100 + uint64(i%64)*16, trace.TprofKernel}, ""))
	}
	path := filepath.Join(dir, "big.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 2, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkKallsyms, 0, []byte("ffffffff81000100 T do_syscall\nffffffff81000300 T do_other\n")))
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	for cpu := range tr {
		must(w.WriteChunk(nrm2.ChunkTrace, uint32(cpu), tr[cpu].Buf))
	}
	must(w.Close(0, []nrm2.CPUStats{{Records: 100_000}, {Records: 100_000}}))
	return path
}

// post --progress prints its reading's progress on stderr, never on
// stdout, and writes the same reports as without it: on every CPU at
// once and by the one reader (--pid).
func TestProgressOnStderrOnly(t *testing.T) {
	dir := t.TempDir()
	path := bigTrace(t, dir)
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	total := humanBytes(tprof.TraceBytes(f))
	f.Close()
	lineRE := regexp.MustCompile(`^post: read [0-9.]+ (B|KB|MB) of ` + regexp.QuoteMeta(total) + ` \((\d+) %\)$`)
	for _, sel := range [][]string{nil, {"--pid", "500"}} {
		run := func(name string, extra ...string) (stdout, stderr, report string) {
			out := filepath.Join(dir, name)
			args := append(append([]string{"-r", path, "-tprof", "--folded", filepath.Join(out, "f.folded")}, sel...), extra...)
			stdout, stderr, code := runPost(t, out, args...)
			if code != 0 {
				t.Fatalf("post %v: rc %d\n%s", args, code, stderr)
			}
			stdout = strings.ReplaceAll(stdout, out, "OUT")
			for _, file := range []string{"tprof.out", "f.folded"} {
				b, err := os.ReadFile(filepath.Join(out, file))
				if err != nil {
					t.Fatal(err)
				}
				report += string(b)
			}
			return stdout, stderr, report
		}
		plainOut, plainErr, plainRep := run("plain")
		progOut, progErr, progRep := run("progress", "--progress")
		if plainOut != progOut || plainRep != progRep {
			t.Errorf("%v: stdout or reports differ with --progress:\n%s\n%s", sel, plainOut, progOut)
		}
		if strings.Contains(plainErr, "post: read") || strings.Contains(progOut, "read") {
			t.Errorf("%v: progress where it should not be: stderr without --progress %q, stdout with it %q", sel, plainErr, progOut)
		}
		var lines []string
		for _, l := range strings.Split(progErr, "\n") {
			if strings.HasPrefix(l, "post: read") {
				if !lineRE.MatchString(l) {
					t.Errorf("%v: progress line %q, want post: read N of %s (P %%)", sel, l, total)
				}
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 || lines[len(lines)-1] != "post: read "+total+" of "+total+" (100 %)" {
			t.Errorf("%v: progress lines %q, want them to end with the whole trace read (%s)", sel, lines, total)
		}
	}
}
