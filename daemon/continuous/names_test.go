package continuous

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
)

// TestKsymsAsA2N: the compact kernel table names addresses as A2N does
// from the same kallsyms text (unsorted lines, a module's symbols, data
// symbols and zero addresses left out).
func TestKsymsAsA2N(t *testing.T) {
	ks := "ffffffff81000200 t helper\n" +
		"ffffffff81000000 T _stext\n" +
		"ffffffff81000080 D some_data\n" +
		"0000000000000000 T hidden\n" +
		"ffffffff81000100 T do_work\n" +
		"ffffffffc0001000 t mod_fn\t[mymod]\n" +
		"ffffffffc0001800 t other_fn\t[othermod]\n"
	k := loadKsyms(strings.NewReader(ks), 0)
	r := a2n.New([]byte(ks))
	for _, addr := range []uint64{0xffffffff81000000, 0xffffffff81000090, 0xffffffff81000150, 0xffffffff81000250,
		0xffffffffc0001010, 0xffffffffc0002000, 0x1000} {
		mod, sym := k.name(addr)
		want := r.Resolve(0, addr, true)
		if mod != want.Module || sym != want.Symbol {
			t.Errorf("%#x: %s %s, A2N says %s %s", addr, mod, sym, want.Module, want.Symbol)
		}
	}
	if len(k.ents) != 5 {
		t.Errorf("%d text symbols kept, want 5", len(k.ents))
	}
}

// funcOffsets is up to n function symbols of the ELF file at path, by
// their offset in the file.
func funcOffsets(t *testing.T, path string, n int) map[uint64]string {
	t.Helper()
	f, syms := testenv.ELF(t, path)
	out := map[uint64]string{}
	for _, s := range syms {
		if s.Size < 16 {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				out[s.Value-p.Vaddr+p.Off+8] = s.Name
			}
		}
		if len(out) >= n {
			break
		}
	}
	return out
}

// TestNamerKeepsNames: the namer names a module's offsets (cpuburn, -O2)
// as A2N's resolver does; the names are kept, so a later interval with
// the same locations reads no module; an unreadable module's offsets are
// named module+offset.
func TestNamerKeepsNames(t *testing.T) {
	exe := buildBurn(t, t.TempDir())
	fi, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	offs := funcOffsets(t, exe, 20)
	if len(offs) < 5 {
		t.Fatalf("only %d functions found in %s", len(offs), exe)
	}
	const pid, base = 5000000, 0x400000
	r := a2n.New(nil)
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{pid, base, uint64(fi.Size()), 0, 5}, Str: exe})
	var locs []location
	var want []string
	for off := range offs {
		l := r.Locate(pid, base+off, false)
		if l.Module() != exe || l.FileOffset() != off {
			t.Fatalf("offset %#x located in %q at %#x", off, l.Module(), l.FileOffset())
		}
		locs = append(locs, location{key: locKey{kind: locModule, module: exe, addr: off}})
		want = append(want, r.Resolve(pid, base+off, false).Symbol)
	}
	missing := filepath.Join(t.TempDir(), "gone.so")
	locs = append(locs, location{key: locKey{kind: locModule, module: missing, addr: 0x1234}})
	want = append(want, "gone.so+0x1234")

	n := newNamer(t.TempDir(), 0)
	for round := 0; round < 2; round++ {
		got := n.nameAll(r, locs)
		for i := range locs {
			if got[i].symbol != want[i] || got[i].module != locs[i].key.module {
				t.Errorf("round %d, offset %#x: %s in %s, want %s (A2N) in %s", round, locs[i].key.addr, got[i].symbol, got[i].module, want[i], locs[i].key.module)
			}
		}
		wantRead, wantNamed := 2, len(locs)
		if round == 1 {
			wantRead, wantNamed = 0, 0
		}
		if n.modulesRead != wantRead || n.named != wantNamed {
			t.Errorf("round %d: %d locations named anew from %d modules, want %d from %d", round, n.named, n.modulesRead, wantNamed, wantRead)
		}
	}
}

// testAggregator is an aggregator without sources or limits of its own,
// and a function that applies an MTE record to it.
func testAggregator() (*aggregator, func(minor uint32, str string, f ...uint64)) {
	a := &aggregator{res: a2n.New(nil), limits: Limits{}.withDefaults(), infos: newProcInfos(),
		known: map[uint32]bool{}, tried: map[uint32]bool{}, gens: map[uint32]uint32{}}
	a.cur = newInterval(0)
	return a, func(minor uint32, str string, f ...uint64) {
		e := event{kind: evMTE, minor: minor, str: str}
		e.nf = uint8(copy(e.fields[:], f))
		a.handle(&e, nil)
	}
}

// TestStacksByExecGeneration: a sample's stack seen again is counted, not
// located again; the same addresses after the process execs are another
// program's, named from its mappings.
func TestStacksByExecGeneration(t *testing.T) {
	const pid = 5000001
	a, mte := testAggregator()
	sample := func() {
		e := event{kind: evSample, pid: pid, tid: pid}
		a.handle(&e, []uint64{0x1100, 0x1200})
	}
	mte(trace.MTESegment, "/first/prog", pid, 0x1000, 0x1000, 0, 5)
	sample()
	sample()
	mte(trace.MTEExec, "/second/prog", pid, pid)
	mte(trace.MTESegment, "/second/prog", pid, 0x1000, 0x1000, 0x3000, 5)
	sample()
	iv := a.rotate(1)
	if len(iv.order) != 2 || iv.order[0].count != 2 || iv.order[1].count != 1 || iv.samples != 3 {
		t.Fatalf("%d stacks, want 2 (the first program's counted twice, the second's once)", len(iv.order))
	}
	for i, wantMod := range []string{"/first/prog", "/second/prog"} {
		for _, li := range iv.order[i].locs {
			if l := iv.locs[li]; l.key.module != wantMod {
				t.Errorf("stack %d: a frame in %q, want %q", i, l.key.module, wantMod)
			}
		}
	}
	if got := iv.locs[iv.order[1].locs[0]].key.addr; got != 0x3100 {
		t.Errorf("the second program's leaf at file offset %#x, want 0x3100", got)
	}
}

// TestThreadsForgottenAtExit: a process that makes and ends 10000 named
// threads holds no name of them after their exits, while each thread's
// samples, counted before its exit, carry to the profile the name it had
// at its exit (it named itself after its first sample).
func TestThreadsForgottenAtExit(t *testing.T) {
	const pid = 5000002
	a, mte := testAggregator()
	mte(trace.MTEProcess, "pool", pid, 1)
	mte(trace.MTESegment, "/pool/prog", pid, 0x1000, 0x1000, 0, 5)
	const threads = 10000
	for i := uint32(1); i <= threads; i++ {
		tid := pid + i
		mte(trace.MTEFork, "", pid, pid, pid, uint64(tid), trace.ForkThread)
		mte(trace.MTEThreadName, "pool", pid, uint64(tid))
		e := event{kind: evSample, pid: pid, tid: tid}
		a.handle(&e, []uint64{0x1100})
		// It names itself after its first sample, and exits.
		mte(trace.MTEThreadName, fmt.Sprintf("worker-%d", i), pid, uint64(tid))
		mte(trace.MTEExit, "", pid, uint64(tid))
	}
	if n := len(a.res.Process(pid).Threads); n != 0 {
		t.Errorf("%d thread names kept after all %d threads exited, want 0", n, threads)
	}
	iv := a.rotate(1)
	if len(iv.order) != threads {
		t.Fatalf("%d stacks counted, want %d (one a thread)", len(iv.order), threads)
	}
	for i, sc := range iv.order {
		if got, want := iv.names[threadKey(sc.pid, sc.tid)], fmt.Sprintf("worker-%d", i+1); got != want {
			t.Fatalf("thread %d's samples named %q, want its name at its exit %q", sc.tid, got, want)
		}
	}
}

// TestNamerUnmapsModules: once a module's offsets are named, its file is
// no longer mapped (the agent's resident memory holds no page of the
// modules it is done with, without a collection to find them).
func TestNamerUnmapsModules(t *testing.T) {
	dir := t.TempDir()
	exe := buildBurn(t, dir)
	offs := funcOffsets(t, exe, 5)
	var locs []location
	for off := range offs {
		locs = append(locs, location{key: locKey{kind: locModule, module: exe, addr: off}})
	}
	if len(locs) == 0 {
		t.Fatalf("no function found in %s", exe)
	}
	n := newNamer("", 0) // no table cache: the module is parsed from its file, mapped
	out := make([]frameName, len(locs))
	idx := make([]int, len(locs))
	for i := range idx {
		idx[i] = i
	}
	n.base = residentBytes() // as nameAll sets it: no collection forced for a small module
	n.nameModule(exe, locs, idx, out)
	for i := range out {
		if out[i].symbol == "" || strings.HasPrefix(out[i].symbol, filepath.Base(exe)+"+") {
			t.Errorf("offset %#x not named (%q)", locs[i].key.addr, out[i].symbol)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(maps), exe) {
		t.Errorf("%s still mapped after its offsets were named", exe)
	}
}

// TestNamerModuleReplaced: names kept from an earlier interval are made
// anew when the module's file is replaced at the same path (a program
// rebuilt: a new inode), and kept while it is the same file.
func TestNamerModuleReplaced(t *testing.T) {
	dir := t.TempDir()
	exe := buildBurn(t, dir)
	offs := funcOffsets(t, exe, 20)
	path := filepath.Join(dir, "prog")
	install := func(src string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	var locs []location
	for off := range offs {
		locs = append(locs, location{key: locKey{kind: locModule, module: path, addr: off}})
	}
	// What a namer that never saw the file names the offsets.
	fresh := func() []frameName { return newNamer("", 0).nameAll(a2n.New(nil), locs) }

	install(exe)
	first := fresh()
	n := newNamer(t.TempDir(), 0)
	r := a2n.New(nil)
	n.nameAll(r, locs)
	got := n.nameAll(r, locs)
	if n.modulesRead != 0 {
		t.Errorf("the same file read again (%d modules read), want its names kept", n.modulesRead)
	}
	for i := range got {
		if got[i] != first[i] {
			t.Fatalf("offset %#x: %v, want %v", locs[i].key.addr, got[i], first[i])
		}
	}
	// Another program at the path: a library of the system, whose
	// functions lie elsewhere.
	install("/usr/lib/x86_64-linux-gnu/liblzma.so.5")
	second := fresh()
	differ := 0
	for i := range second {
		if second[i] != first[i] {
			differ++
		}
	}
	if differ == 0 {
		t.Fatalf("liblzma names the offsets of %s as it does: no test", exe)
	}
	got = n.nameAll(r, locs)
	if n.modulesRead != 1 {
		t.Errorf("%d modules read after the file was replaced, want 1", n.modulesRead)
	}
	for i := range got {
		if got[i] != second[i] {
			t.Errorf("offset %#x after the file was replaced: %v, want %v (not %v)", locs[i].key.addr, got[i], second[i], first[i])
		}
	}
}

// TestBuilderReused: one builder makes every interval's request; the
// second request's tables are its own (indexes from the first would name
// the wrong strings in it).
func TestBuilderReused(t *testing.T) {
	b := builder{res: a2n.New(nil), host: "h", periodNS: 1}
	request := func(fn string) pprofile.Profiles {
		iv := newInterval(0)
		iv.locs = []location{{key: locKey{kind: locModule, module: "/bin/" + fn, addr: 0x10}}}
		iv.order = []*stackCount{{pid: 7, tid: 7, locs: []int32{0}, count: 3}}
		iv.names[threadKey(7, 7)] = "t-" + fn
		p, n := b.build(iv, []frameName{{module: "/bin/" + fn, symbol: fn}}, 1)
		if n != 3 {
			t.Fatalf("%d samples in the request, want 3", n)
		}
		return p
	}
	request("first_function")
	p := request("second")
	dict := p.Dictionary()
	strs := dict.StringTable()
	prof := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	s := prof.Samples().At(0)
	st := dict.StackTable().At(int(s.StackIndex()))
	loc := dict.LocationTable().At(int(st.LocationIndices().At(0)))
	fn := dict.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex()))
	if got := strs.At(int(fn.NameStrindex())); got != "second" {
		t.Errorf("the second request's function is %q, want second", got)
	}
	for i := 0; i < strs.Len(); i++ {
		if strings.Contains(strs.At(i), "first") {
			t.Errorf("the second request's strings hold %q of the first", strs.At(i))
		}
	}
	var thread string
	for _, ai := range s.AttributeIndices().All() {
		kv := dict.AttributeTable().At(int(ai))
		if strs.At(int(kv.KeyStrindex())) == attrThreadName {
			thread = kv.Value().Str()
		}
	}
	if thread != "t-second" {
		t.Errorf("thread.name %q, want t-second", thread)
	}
}

// TestNamerFreshModuleNotStored: a module file changed less than
// freshModule ago (cpuburn, built here) is named from the file without
// storing its table in the symbol cache; named again (offsets new in a
// later interval) it is stored; an old file is stored at its first
// naming. The names are the same either way.
func TestNamerFreshModuleNotStored(t *testing.T) {
	exe := buildBurn(t, t.TempDir())
	var locs []location
	for off := range funcOffsets(t, exe, 20) {
		locs = append(locs, location{key: locKey{kind: locModule, module: exe, addr: off}})
	}
	if len(locs) < 4 {
		t.Fatalf("only %d functions found in %s", len(locs), exe)
	}
	entries := func(dir string) int {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return len(ents)
	}
	freshDir, oldDir := t.TempDir(), t.TempDir()
	fresh := newNamer(freshDir, 0)
	old := newNamer(oldDir, 0)
	old.fresh = 0 // every file older than the bound
	half := len(locs) / 2
	for round, part := range [][]location{locs[:half], locs[half:]} {
		got := fresh.nameAll(a2n.New(nil), part)
		want := old.nameAll(a2n.New(nil), part)
		if fresh.modulesRead != 1 || old.modulesRead != 1 {
			t.Fatalf("round %d, modules read: %d fresh, %d old; want 1 each", round, fresh.modulesRead, old.modulesRead)
		}
		for i := range part {
			if got[i] != want[i] || strings.HasPrefix(got[i].symbol, "cpuburn+") {
				t.Errorf("round %d, offset %#x: %v fresh, %v old", round, part[i].key.addr, got[i], want[i])
			}
		}
		// Both caches hold the kernel's table (if it could be read);
		// the old file's has the module's table from the first round
		// on, the fresh one's from the second.
		nf, no := entries(freshDir), entries(oldDir)
		if round == 0 && no != nf+1 || round == 1 && no != nf {
			t.Errorf("round %d, symbol cache entries: %d with the file fresh, %d with it old", round, nf, no)
		}
	}
}
