package itrace

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"

	"perfinsp/format/trace"
)

// filesPlacer places mapNamer's addresses: 0x4000-0x4fff in /lib/libg.so,
// the rest in /bin/prog, each at its own address, in a segment from
// 0x1000 (file offset 0x800), one byte an instruction. A block spreads
// when its count is a run of every byte to its last; else (a thread's
// last block, whose last is not known) it does not. The line of an
// address is its low byte plus one, in g.c or prog.c.
type filesPlacer struct{}

func (filesPlacer) Place(pid uint32, addr uint64) (string, uint64, bool) {
	if addr&^0xfff == 0x4000 {
		return "/lib/libg.so", addr, true
	}
	return "/bin/prog", addr, true
}

func (filesPlacer) Spread(mod string, va uint64, last int64, runs, insns uint64, at func(va, n uint64)) bool {
	if last < 0 || runs*uint64(last+1) != insns {
		return false
	}
	for a := va; a <= va+uint64(last); a++ {
		at(a, runs)
	}
	return true
}

func (filesPlacer) Segment(mod string, va uint64) (start, limit, offset uint64, buildID string, ok bool) {
	if mod == "/lib/libg.so" {
		return 0x4000, 0x5000, 0, "beef", true
	}
	return 0x1000, 0x6000, 0x800, "abcd", true
}

func (filesPlacer) Line(mod string, va uint64) (string, int, bool) {
	if mod == "/lib/libg.so" {
		return "g.c", int(va&0xff) + 1, true
	}
	return "prog.c", int(va&0xff) + 1, true
}

// twoSitesStream: main calls f from two call sites.
func twoSitesStream() []*trace.Record {
	U := trace.MajorITraceU
	return []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x2000, 3, 5),                   // main: 3, call f from 0x1005
		rec(U, trace.ITraceReturn, 0x100a, 2, 1),                 // f: 2
		rec(U, trace.ITraceCall, 0x2000, 1, 0),                   // main: 1, call f from 0x100a
		rec(U, trace.ITraceReturn, 0x100f, 2, 1),                 // f: 2
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit), // main: 2
	}
}

func replayStacks(t *testing.T, recs []*trace.Record, placed bool) (*Report, string, *profile.Profile) {
	t.Helper()
	rep := NewReport(mapNamer{}, nil)
	rep.EnableStacks()
	if placed {
		rep.PlaceStacks(filesPlacer{})
	}
	for _, r := range recs {
		rep.Apply(r)
	}
	rep.Finish()
	var folded, pb bytes.Buffer
	if err := rep.WriteFolded(&folded); err != nil {
		t.Fatal(err)
	}
	if err := rep.WritePprof(&pb); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&pb)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return rep, folded.String(), p
}

// TestPprofAddresses: with a Placer, every leaf instruction is a sample at
// its address (a block that does not spread: at its first instruction),
// each caller frame at its call instruction (a signal handler's caller,
// entered by no call: at its function, with no address), each location
// in its module's mapping with the build id and its source line; flat
// per function is still its exclusive instructions, and the folded
// stacks are those without addresses. Calls from two call sites are two
// stacks in the profile, one in the folded lines.
func TestPprofAddresses(t *testing.T) {
	type at struct {
		fn   string
		addr uint64
	}
	for _, c := range []struct {
		name   string
		recs   []*trace.Record
		leaves map[at]int64
		sites  map[string]at // by leaf function: its caller's frame
		folded string
	}{
		{"example", exampleStream(), map[at]int64{
			{"main", 0x1000}: 3, {"f", 0x2000}: 1, {"f", 0x2001}: 1, {"main", 0x100a}: 1, {"main", 0x3000}: 1,
			{"g", 0x4000}: 1, {"g", 0x4001}: 1, {"g", 0x4002}: 1, {"g", 0x4003}: 1, {"main", 0x100f}: 1, {"main", 0x1010}: 1,
			{"h", 0x5000}: 1, {"h", 0x5001}: 1, {"h", 0x5002}: 1, {"main", 0x1011}: 2},
			map[string]at{"f": {"main", 0x1005}, "g": {"main", 0x100a}, "h": {"main", 0}},
			"pid 7;main 9\npid 7;main;f 2\npid 7;main;g 4\npid 7;main;h 3\n"},
		{"two sites", twoSitesStream(), map[at]int64{
			{"main", 0x1000}: 3, {"main", 0x100a}: 1, {"main", 0x100f}: 2, {"f", 0x2000}: 2, {"f", 0x2001}: 2},
			nil, "pid 7;main 6\npid 7;main;f 4\n"},
	} {
		rep, folded, p := replayStacks(t, c.recs, true)
		_, plain, pp := replayStacks(t, c.recs, false)
		if folded != c.folded || plain != c.folded {
			t.Errorf("%s: folded with addresses:\n%s\nwithout:\n%s\nwant:\n%s", c.name, folded, plain, c.folded)
		}
		for _, l := range pp.Location {
			if l.Address != 0 || l.Mapping != nil {
				t.Errorf("%s: without a Placer, a location at %#x", c.name, l.Address)
			}
		}
		if len(p.Mapping) == 0 || p.Mapping[0].File != "/bin/prog" {
			t.Errorf("%s: the first mapping is not /bin/prog's, the module with the most instructions: %v", c.name, p.Mapping)
		}
		got := map[at]int64{}
		flat := map[string]int64{}
		sites := map[[2]uint64]bool{}
		for _, s := range p.Sample {
			leaf := s.Location[0]
			fn := leaf.Line[0].Function.Name
			got[at{fn, leaf.Address}] += s.Value[0]
			flat[fn] += s.Value[0]
			if leaf.Address != 0 {
				m := leaf.Mapping
				wantID, wantFile := "abcd", "prog.c"
				if fn == "g" {
					wantID, wantFile = "beef", "g.c"
				}
				if m == nil || m.BuildID != wantID || leaf.Address < m.Start || leaf.Address >= m.Limit || leaf.Line[0].Line != int64(leaf.Address&0xff)+1 ||
					leaf.Line[0].Function.Filename != wantFile {
					t.Errorf("%s: leaf %s at %#x: mapping %+v, line %s:%d", c.name, fn, leaf.Address, m, leaf.Line[0].Function.Filename, leaf.Line[0].Line)
				}
			}
			if len(s.Location) > 1 {
				caller := s.Location[1]
				sites[[2]uint64{caller.Address, uint64(len(s.Location))}] = true
				if w, ok := c.sites[fn]; ok && (caller.Line[0].Function.Name != w.fn || caller.Address != w.addr) {
					t.Errorf("%s: %s called from %s at %#x, want %s at %#x", c.name, fn, caller.Line[0].Function.Name, caller.Address, w.fn, w.addr)
				}
				if w, ok := c.sites[fn]; ok && w.addr == 0 && caller.Mapping != nil {
					t.Errorf("%s: %s's caller entered by no call has a mapping", c.name, fn)
				}
			}
		}
		if len(got) != len(c.leaves) {
			t.Errorf("%s: leaves %v\nwant %v", c.name, got, c.leaves)
		}
		for k, n := range c.leaves {
			if got[k] != n {
				t.Errorf("%s: %s at %#x: %d instructions, want %d", c.name, k.fn, k.addr, got[k], n)
			}
		}
		for k, fs := range rep.Funcs {
			if flat[fs.Name] != int64(fs.Exclusive) {
				t.Errorf("%s: %s flat %d, exclusive %d", c.name, k, flat[fs.Name], fs.Exclusive)
			}
		}
		if c.name == "two sites" && (!sites[[2]uint64{0x1005, 2}] || !sites[[2]uint64{0x100a, 2}]) {
			t.Errorf("two sites: f's callers at %v, want 0x1005 and 0x100a", sites)
		}
	}
}
