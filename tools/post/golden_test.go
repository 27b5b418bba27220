package main

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden-* from this post (only from a post whose reports are known good)")

// goldenTrace writes a fixed, pseudo-random trace: 40 processes with
// threads and JIT-named functions (the same names in several processes, a
// name replaced at one address mid-trace), 8,000 ticks, user and kernel,
// each with a call stack of 1-10 frames (some marked truncated), many
// equal counts (ties in every sort).
func goldenTrace(t *testing.T, dir string) string {
	t.Helper()
	rng := rand.New(rand.NewSource(14))
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tm := uint64(100)
	const nproc, nfn = 40, 10
	for p := 0; p < nproc; p++ {
		pid := uint64(1000 + p)
		must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, tm, []uint64{pid, 1}, fmt.Sprintf("proc%d", p%29)))
		for k := 0; k < p%4; k++ {
			must(m.Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, tm, []uint64{pid, pid + uint64(100*(k+1))}, fmt.Sprintf("worker;%d", k)))
		}
	}
	for p := 0; p < nproc; p++ {
		for f := 0; f < nfn; f++ {
			must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, tm, []uint64{uint64(1000 + p), uint64(1000 + p), 0x10000 + uint64(f)*0x100, 0x100}, fmt.Sprintf("fn_%d %d", f, (p*f)%7)))
		}
	}
	kern := []uint64{0xffffffff81000100, 0xffffffff81000200, 0xffffffff81000300, 0xffffffff81000400}
	pc := func(f int) uint64 { return 0x10000 + uint64(f)*0x100 + 0x10 + uint64(rng.Intn(0xe0)) }
	for i := 0; i < 8000; i++ {
		tm += 10
		if i == 4000 { // one address gets a new name mid-trace
			must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, tm, []uint64{1003, 1003, 0x10000, 0x100}, "replaced"))
		}
		p := rng.Intn(nproc)
		if rng.Intn(3) == 0 {
			p = rng.Intn(3) // a few busy processes
		}
		pid := uint64(1000 + p)
		tid := pid
		if k := rng.Intn(4); k > 0 && k <= p%4 {
			tid = pid + uint64(100*k)
		}
		var pcs []uint64 // interrupted first
		nk := 0
		if rng.Intn(5) == 0 {
			nk = 1 + rng.Intn(2)
			for k := 0; k < nk; k++ {
				pcs = append(pcs, kern[rng.Intn(len(kern))]+uint64(rng.Intn(0x80)))
			}
		}
		depth := 1 + rng.Intn(3)
		if rng.Intn(4) == 0 {
			depth += rng.Intn(8)
		}
		for d := 0; d < depth; d++ {
			pcs = append(pcs, pc(rng.Intn(nfn)/(1+d%3)))
		}
		flags := uint64(0)
		if nk > 0 {
			flags = trace.TprofKernel
		}
		must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, tid, pcs[0], flags}, ""))
		uf := uint64(nk) << trace.UnwindKernShift
		if depth > 9 {
			uf |= trace.UnwindTruncated
		}
		b := make([]byte, 8*len(pcs))
		for k, v := range pcs {
			binary.LittleEndian.PutUint64(b[8*k:], v)
		}
		must(tr.Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, tm, []uint64{pid, tid, uf}, string(b)))
	}
	path := filepath.Join(dir, "golden.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h", StartWallNs: 1700000000000000000})
	must(err)
	must(w.WriteChunk(nrm2.ChunkKallsyms, 0, []byte("ffffffff81000100 T do_syscall_64\nffffffff81000200 T schedule\nffffffff81000300 t irq_exit [mod;x]\nffffffff81000400 T clear_page\nffffffff81000500 T _etext\n")))
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(w.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(w.Close(0, []nrm2.CPUStats{{Records: 16000}}))
	return path
}

// pprofText is a profile in a canonical text form: one line per sample
// (labels, function names leaf first, values), sorted, so that two
// profiles holding the same samples in another order compare equal.
func pprofText(t *testing.T, path string) string {
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
	var lines []string
	for _, s := range p.Sample {
		var fs []string
		for _, l := range s.Location {
			fs = append(fs, l.Mapping.File+"!"+l.Line[0].Function.Name)
		}
		lines = append(lines, fmt.Sprintf("%v %v %s %v", s.Label, s.NumLabel, strings.Join(fs, "<"), s.Value))
	}
	sort.Strings(lines)
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	return fmt.Sprintf("period %d %v\nfirst mapping %s\n%s\n", p.Period, types, p.Mapping[0].File, strings.Join(lines, "\n"))
}

// TestReportsMatchGolden: every report of a fixed trace with call stacks
// (tprof.out with its call tree, folded stacks, the flame graph, the pprof
// samples) is byte for byte what a known-good post wrote (testdata/
// golden-*, written before post's aggregation and writers were made
// faster): speed work must not change a byte.
// The same reports without the table cache, with an empty one (post
// parses and stores the tables) and with the stored tables mapped.
func TestReportsMatchGolden(t *testing.T) {
	dir := t.TempDir()
	path := goldenTrace(t, dir)
	cache := filepath.Join(t.TempDir(), "a2n")
	for _, run := range [][]string{{"--no-cache"}, {"--cache-dir", cache}, {"--cache-dir", cache}} {
		t.Run(strings.Join(run, "="), func(t *testing.T) { checkGolden(t, dir, path, run) })
		if run[0] == "--cache-dir" {
			if ents, _ := os.ReadDir(cache); len(ents) == 0 {
				t.Fatalf("post %v stored no table in %s", run, cache)
			}
		}
	}
}

func checkGolden(t *testing.T, dir, path string, cacheArgs []string) {
	args := append([]string{"-r", path, "-tprof", "--folded", filepath.Join(dir, "f.folded"), "--flame", filepath.Join(dir, "f.svg"), "--pprof", filepath.Join(dir, "p.pb.gz")}, cacheArgs...)
	if _, errs, code := runPost(t, dir, args...); code != 0 {
		t.Fatalf("post: exit %d: %s", code, errs)
	}
	got := map[string]string{}
	for _, f := range []string{"tprof.out", "f.folded", "f.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		got[f] = strings.ReplaceAll(string(b), dir, "DIR")
	}
	got["pprof.txt"] = pprofText(t, filepath.Join(dir, "p.pb.gz"))
	// The larger two are kept as their SHA-256 (the folded stacks hold the
	// same stacks as the pprof samples in text).
	for _, f := range []string{"pprof.txt", "f.svg"} {
		got[f+".sha256"] = fmt.Sprintf("%x\n", sha256.Sum256([]byte(got[f])))
		delete(got, f)
	}
	for f, g := range got {
		golden := filepath.Join("testdata", "golden-"+f)
		if *updateGolden {
			if err := os.WriteFile(golden, []byte(g), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (go test -run TestReportsMatchGolden -update-golden writes it)", err)
		}
		if g != string(want) {
			gl, wl := strings.Split(g, "\n"), strings.Split(string(want), "\n")
			for i := 0; i < len(gl) || i < len(wl); i++ {
				var a, b string
				if i < len(gl) {
					a = gl[i]
				}
				if i < len(wl) {
					b = wl[i]
				}
				if a != b {
					t.Fatalf("%s differs from %s at line %d:\n got: %q\nwant: %q", f, golden, i+1, a, b)
				}
			}
		}
	}
}
