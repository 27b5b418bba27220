package main

import (
	"bufio"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
)

// The lines stack collapsers read in perf script's output: a sample's
// header (comm, pid/tid, CPU, time, period, event) and its frames
// (address, symbol+offset, module in parentheses), an empty line after.
var (
	scriptHeader = regexp.MustCompile(`^(\S.*?) (\d+)/(\d+) \[(\d+)\] (\d+)\.(\d{6}): (\d+) (\S+):$`)
	scriptFrame  = regexp.MustCompile(`^\t\s*([0-9a-f]+) (.+)\+0x[0-9a-f]+ \((\S*)\)$`)
)

// TestScriptIsPerfScript: post --script writes every sample of a trace
// with call stacks in perf script's form, each with its frames
// (interrupted function first), and the stacks it holds are the ones
// post --folded counts: the same samples of the example, the same number
// through each of its functions.
func TestScriptIsPerfScript(t *testing.T) {
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	sw("enable", "--only", "tprof", "callstack")
	sw("on")
	pid, _ := e.RunBurn(100)
	sw("off")
	nrm := filepath.Join(dir, "swtrace.nrm2")
	sw("get", nrm)
	script, folded := filepath.Join(dir, "perf.script"), filepath.Join(dir, "f.folded")
	if out, errs, code := runPost(t, dir, "-r", nrm, "--pid", strconv.Itoa(pid), "--script", script, "--folded", folded); code != 0 || !strings.Contains(out, "perf.script") {
		t.Fatalf("post: %d %s %s", code, out, errs)
	}

	f, err := os.Open(script)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, pids := 0, map[string]bool{}
	through := map[string]int{} // samples whose stack holds the function
	var frames []string
	inSample := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case !inSample:
			m := scriptHeader.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("line %d: not a sample's header: %q", n, l)
			}
			if m[8] != "cpu-clock" || m[7] != "1000000" {
				t.Fatalf("line %d: period %s, event %s (want 1000000 cpu-clock: 1000 Hz)", n, m[7], m[8])
			}
			pids[m[2]] = true
			inSample, frames = true, frames[:0]
		case l == "":
			if len(frames) == 0 {
				t.Fatalf("line %d: a sample without frames", n)
			}
			samples++
			seen := map[string]bool{}
			for _, fr := range frames {
				if !seen[fr] {
					seen[fr] = true
					through[fr]++
				}
			}
			inSample = false
		default:
			m := scriptFrame.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("line %d: not a frame: %q", n, l)
			}
			frames = append(frames, m[2])
		}
	}
	if inSample {
		t.Fatal("the last sample has no empty line after it")
	}

	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	total, foldedThrough := 0, map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		c, _ := strconv.Atoi(l[i+1:])
		total += c
		seen := map[string]bool{}
		for _, fr := range strings.Split(l[:i], ";")[1:] {
			if fr = strings.TrimSuffix(fr, "_[k]"); !seen[fr] {
				seen[fr] = true
				foldedThrough[fr] += c
			}
		}
	}
	if samples != total || samples < 200 {
		t.Fatalf("%d samples in the script, %d ticks in the folded stacks", samples, total)
	}
	for _, fn := range []string{"main", "work", "heavy", "medium", "light"} {
		if through[fn] != foldedThrough[fn] || through[fn] == 0 {
			t.Errorf("%s: on %d samples' stacks in the script, %d in the folded stacks", fn, through[fn], foldedThrough[fn])
		}
	}
	if !pids[strconv.Itoa(pid)] {
		t.Fatalf("no sample of the example (pid %d): %v", pid, pids)
	}
	t.Logf("%d samples; through heavy %d, medium %d, light %d", samples, through["heavy"], through["medium"], through["light"])
}

// A TIME_HIGH record (written before whichever record crossed a 2^32 ns
// boundary) between a tick and its stack leaves the sample its stack: the
// tick is not written alone and the stack dropped.
func TestScriptStackAfterTimeHigh(t *testing.T) {
	r := a2n.New(nil)
	path := filepath.Join(t.TempDir(), "perf.script")
	w, err := newScriptWriter(path, r, 1000)
	if err != nil {
		t.Fatal(err)
	}
	pcs := []uint64{0x1000, 0x2000, 0x3000}
	var str []byte
	for _, pc := range pcs {
		str = binary.LittleEndian.AppendUint64(str, pc)
	}
	const tm = 1 << 32
	res := &a2n.Result{Symbol: "leaf"}
	w.record(&trace.Record{CPU: 0, Time: tm, Major: trace.MajorTprof, Minor: trace.TprofTick, Fixed: []uint64{7, 8, pcs[0], 0}}, res)
	w.record(&trace.Record{CPU: 0, Time: tm, Major: trace.MajorSys, Minor: trace.SysTimeHigh, Fixed: []uint64{1}}, nil)
	w.record(&trace.Record{CPU: 0, Time: tm, Major: trace.MajorUnwind, Minor: trace.UnwindTick, Fixed: []uint64{7, 8, 0}, Str: string(str)}, nil)
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	samples := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if len(samples) != 1 || strings.Count(samples[0], "\n") != len(pcs) {
		t.Fatalf("want one sample with %d frames:\n%s", len(pcs), b)
	}
}
