package itrace

import (
	"bytes"
	"testing"

	"perfinsp/format/trace"
)

// mapNamer names 0x1000-0x1fff main, 0x2000 f, 0x3000 a PLT stub,
// 0x4000 g (another module), 0x5000 h (a signal handler).
type mapNamer struct{}

func (mapNamer) Func(pid uint32, addr uint64) (Func, uint64, string, int) {
	switch addr &^ 0xfff {
	case 0x1000:
		return Func{Name: "main", Module: "/bin/prog"}, addr - 0x1000, "prog.c", 10
	case 0x2000:
		return Func{Name: "f", Module: "/bin/prog"}, addr - 0x2000, "prog.c", 20
	case 0x3000:
		return Func{Name: "prog:PLT", Module: "/bin/prog", PLT: true}, 0, "", 0
	case 0x4000:
		return Func{Name: "g", Module: "/lib/libg.so"}, addr - 0x4000, "", 0
	}
	return Func{Name: "h", Module: "/bin/prog"}, addr - 0x5000, "prog.c", 50
}

func rec(major uint16, minor uint32, f ...uint64) *trace.Record {
	return &trace.Record{Major: major, Minor: minor, Fixed: f, CPU: 1}
}

// exampleStream is a thread's records: blocks, a call and its return, a
// call through a PLT stub, a signal handler and its rt_sigreturn.
func exampleStream() []*trace.Record {
	U, K := trace.MajorITraceU, trace.MajorITraceK
	return []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x2000, 3, 5),                                  // main: 3, call f from 0x1005
		rec(U, trace.ITraceReturn, 0x100a, 2, 1),                                // f: 2
		rec(U, trace.ITraceCall, 0x3000, 1, 0),                                  // main: 1, call the PLT stub from 0x100a
		rec(U, trace.ITraceJump, 0x4000, 1, 0),                                  // the stub: 1 (to main), the call is to g
		rec(U, trace.ITraceReturn, 0x100f, 4, 3),                                // g: 4
		rec(K, trace.ITraceSignal, 0x5000, 2, 1, 10, trace.ITraceSignalHandler), // main: 2, handler h
		rec(K, trace.ITraceSyscall, 0x1011, 3, 2, 15, 100),                      // h: 3, rt_sigreturn
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit),                // main: 2
	}
}

// TestReplay: blocks, a call and its return, a call through a PLT stub,
// a signal handler and its rt_sigreturn, each counted as callgrind does.
func TestReplay(t *testing.T) {
	var arcs []Branch
	rep := NewReport(mapNamer{}, func(b *Branch) { arcs = append(arcs, *b) })
	for _, r := range exampleStream() {
		rep.Apply(r)
	}
	rep.Finish()
	want := map[string][3]uint64{ // calls, exclusive, inclusive
		"main": {0, 9, 0}, "f": {1, 2, 2}, "g": {1, 4, 4}, "h": {0, 3, 3},
	}
	for _, fs := range rep.Funcs {
		w, ok := want[fs.Name]
		if !ok {
			if fs.Exclusive != 0 || fs.Calls != 0 {
				t.Errorf("%s: %d instructions, %d calls; want none", fs.Name, fs.Exclusive, fs.Calls)
			}
			continue
		}
		if fs.Calls != w[0] || fs.Exclusive != w[1] || (w[2] != 0 && fs.Inclusive != w[2]) {
			t.Errorf("%s: calls %d exclusive %d inclusive %d, want %v", fs.Name, fs.Calls, fs.Exclusive, fs.Inclusive, w)
		}
		delete(want, fs.Name)
	}
	if len(want) > 0 || rep.Instructions != 18 || rep.Signals != 1 || rep.Syscalls != 1 {
		t.Fatalf("missing %v; %d instructions (want 18), %d signals, %d syscalls", want, rep.Instructions, rep.Signals, rep.Syscalls)
	}
	if len(arcs) != 7 || arcs[0].From != 0x1005 || arcs[0].Type != trace.ITraceCall || arcs[0].Depth != 1 || arcs[5].Signal != 10 || arcs[6].Syscall != 15 {
		t.Fatalf("arc lines: %+v", arcs)
	}
	// The callgrind file reads back with the same counts.
	var buf bytes.Buffer
	if err := rep.WriteCallgrind(&buf, "prog"); err != nil {
		t.Fatal(err)
	}
	cg, err := ParseCallgrind(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if cg["main"].Self != 9 || cg["f"].Calls != 1 || cg["g"].Calls != 1 || cg["g"].Self != 4 || cg["h"].Self != 3 || cg["h"].Calls != 0 {
		t.Fatalf("callgrind round trip: main %+v f %+v g %+v h %+v", cg["main"], cg["f"], cg["g"], cg["h"])
	}
}

// TestReplayInterruptsAreNotBranches: the stream of TestReplay with
// interrupts and page faults (module records, major 0x21 minors 3 and 4)
// splitting blocks in main, in f before its return, inside the PLT stub and
// in the handler: every function's calls, exclusive and inclusive counts
// and the instruction total are those of the stream without them, the
// taken-branch count too, and each appears once in the arc lines.
func TestReplayInterruptsAreNotBranches(t *testing.T) {
	U, K := trace.MajorITraceU, trace.MajorITraceK
	plain := exampleStream()
	split := []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(K, trace.ITraceInterrupt, 0x1000, 0, 0, 236, 5000),    // before main's first instruction
		rec(K, trace.ITraceFault, 0x1002, 2, 1, 0x7000, 6, 9000),  // main: 2 of its 3
		rec(U, trace.ITraceCall, 0x2000, 1, 3),                    // main: the third, the call at 0x1005
		rec(K, trace.ITraceInterrupt, 0x2001, 1, 0, 0x100+4, 700), // f: 1 of 2 (a device IRQ)
		rec(U, trace.ITraceReturn, 0x100a, 1, 0),                  // f: the return
		rec(U, trace.ITraceCall, 0x3000, 1, 0),                    // main: 1, into the stub
		rec(K, trace.ITraceInterrupt, 0x3000, 0, 0, 253, 800),     // in the stub, nothing run yet
		rec(U, trace.ITraceJump, 0x4000, 1, 0),                    // the stub's jump to g
		rec(K, trace.ITraceFault, 0x4003, 3, 2, 0x8000, 7, 1000),  // g: 3 of 4
		rec(U, trace.ITraceReturn, 0x100f, 1, 0),                  // g: its return
		rec(K, trace.ITraceSignal, 0x5000, 2, 1, 10, trace.ITraceSignalHandler),
		rec(K, trace.ITraceInterrupt, 0x5002, 2, 1, 236, 4000), // h: 2 of 3
		rec(K, trace.ITraceSyscall, 0x1011, 1, 0, 15, 100),     // h: rt_sigreturn
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit),
	}
	replay := func(recs []*trace.Record) (*Report, []Branch) {
		var arcs []Branch
		rep := NewReport(mapNamer{}, func(b *Branch) { arcs = append(arcs, *b) })
		for _, r := range recs {
			rep.Apply(r)
		}
		rep.Finish()
		return rep, arcs
	}
	want, _ := replay(plain)
	got, arcs := replay(split)
	if got.Instructions != want.Instructions || got.Branches != want.Branches || got.Syscalls != want.Syscalls || got.Signals != want.Signals {
		t.Fatalf("with interrupts: %d instructions %d branches %d syscalls %d signals; without: %d %d %d %d",
			got.Instructions, got.Branches, got.Syscalls, got.Signals, want.Instructions, want.Branches, want.Syscalls, want.Signals)
	}
	if got.Interrupts != 4 || got.Faults != 2 || got.KernelNs != 5000+9000+700+800+1000+4000+100 {
		t.Fatalf("%d interrupts %d faults %d ns, want 4, 2, 20600", got.Interrupts, got.Faults, got.KernelNs)
	}
	for k, w := range want.Funcs {
		g := got.Funcs[k]
		if g == nil || g.Calls != w.Calls || g.Exclusive != w.Exclusive || g.Inclusive != w.Inclusive {
			t.Errorf("%s: with interrupts %+v, without %+v", w.Name, g, w)
		}
	}
	var irqs, faults int
	for _, b := range arcs {
		switch {
		case b.Fault:
			faults++
			if !b.Kernel || b.Irq != -1 || (b.Addr != 0x7000 && b.Addr != 0x8000) {
				t.Errorf("fault line %+v", b)
			}
		case b.Irq >= 0:
			irqs++
			if !b.Kernel || b.Type != trace.ITraceIntrpt || b.DurationNs == 0 {
				t.Errorf("interrupt line %+v", b)
			}
		}
	}
	if irqs != 4 || faults != 2 {
		t.Fatalf("arc lines: %d interrupts, %d faults; want 4, 2", irqs, faults)
	}
}

// TestReplaySiglongjmp: a handler left by siglongjmp (a jump from its
// callee g back into the function below the signal frame, as glibc's
// __longjmp ends) pops the handler's frames, so the return that follows
// leaves f as callgrind does; with the handler interrupting the function
// at depth 0 (sigsetjmp in it) the jump empties the stack.
func TestReplaySiglongjmp(t *testing.T) {
	U, K := trace.MajorITraceU, trace.MajorITraceK
	var arcs []Branch
	rep := NewReport(mapNamer{}, func(b *Branch) { arcs = append(arcs, *b) })
	for _, r := range []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x2000, 3, 5),                                  // main: 3, call f
		rec(K, trace.ITraceSignal, 0x5000, 2, 1, 10, trace.ITraceSignalHandler), // f: 2, handler h
		rec(U, trace.ITraceCall, 0x4000, 3, 2),                                  // h: 3, call g (siglongjmp)
		rec(U, trace.ITraceJump, 0x2010, 4, 3),                                  // g: 4, jump into f
		rec(U, trace.ITraceReturn, 0x100a, 2, 1),                                // f: 2, back in main
		rec(K, trace.ITraceSignal, 0x5000, 1, 0, 10, trace.ITraceSignalHandler), // main: 1, handler h
		rec(U, trace.ITraceCall, 0x4000, 1, 0),                                  // h: 1, call g
		rec(U, trace.ITraceJump, 0x1020, 2, 1),                                  // g: 2, jump into main
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit),                // main: 2
	} {
		rep.Apply(r)
	}
	depths := []int{1, 2, 3, 1, 0, 1, 2, 0}
	if len(arcs) != len(depths) {
		t.Fatalf("%d arc lines, want %d", len(arcs), len(depths))
	}
	for i, d := range depths {
		if arcs[i].Depth != d {
			t.Errorf("arc %d (%#x -> %#x): depth %d, want %d", i, arcs[i].From, arcs[i].To, arcs[i].Depth, d)
		}
	}
	rep.Finish()
	want := map[string][3]uint64{ // calls, exclusive, inclusive
		"main": {0, 6, 0}, "f": {1, 4, 11}, "h": {0, 4, 10}, "g": {2, 6, 6},
	}
	for _, fs := range rep.Funcs {
		if w, ok := want[fs.Name]; ok && (fs.Calls != w[0] || fs.Exclusive != w[1] || (w[2] != 0 && fs.Inclusive != w[2])) {
			t.Errorf("%s: calls %d exclusive %d inclusive %d, want %v", fs.Name, fs.Calls, fs.Exclusive, fs.Inclusive, w)
		}
	}
}

// TestReplayLongjmp: a jump into the middle of a function running below
// the top frame (longjmp into h, which called f, which called g; then
// longjmp from f into main, the base) leaves the frames above it, as
// callgrind's stack-pointer unwinding does: what runs after the jump is
// not in f's or g's inclusive count.
func TestReplayLongjmp(t *testing.T) {
	U := trace.MajorITraceU
	rep := NewReport(mapNamer{}, nil)
	rep.EnableStacks()
	for _, r := range []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x5000, 3, 2),                   // main: 3, call h from 0x1002
		rec(U, trace.ITraceCall, 0x2000, 2, 1),                   // h: 2, call f
		rec(U, trace.ITraceCall, 0x4000, 2, 1),                   // f: 2, call g
		rec(U, trace.ITraceJump, 0x5010, 4, 3),                   // g: 4, longjmp into h
		rec(U, trace.ITraceReturn, 0x1007, 2, 1),                 // h: 2, back in main
		rec(U, trace.ITraceCall, 0x2000, 1, 0),                   // main: 1, call f
		rec(U, trace.ITraceJump, 0x1020, 3, 2),                   // f: 3, longjmp into main
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit), // main: 2
	} {
		rep.Apply(r)
	}
	rep.Finish()
	want := map[string][3]uint64{ // calls, exclusive, inclusive
		"main": {0, 6, 19}, "h": {1, 4, 10}, "f": {2, 5, 9}, "g": {1, 4, 4},
	}
	for _, fs := range rep.Funcs {
		w, ok := want[fs.Name]
		if !ok {
			t.Errorf("unexpected function %s", fs.Name)
			continue
		}
		if fs.Calls != w[0] || fs.Exclusive != w[1] || fs.Inclusive != w[2] {
			t.Errorf("%s: calls %d exclusive %d inclusive %d, want %v", fs.Name, fs.Calls, fs.Exclusive, fs.Inclusive, w)
		}
	}
}

// TestReplaySiblingCalls: a jump to a function's first instruction is a
// call (as callgrind counts it), its frame above the jumping function's,
// and the return that follows ends both; a jump into a function's middle
// is no call, and its instructions still count to its inclusive total.
func TestReplaySiblingCalls(t *testing.T) {
	U := trace.MajorITraceU
	var arcs []Branch
	rep := NewReport(mapNamer{}, func(b *Branch) { arcs = append(arcs, *b) })
	rep.EnableStacks()
	for _, r := range []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x2000, 3, 5),                   // main: 3, call f from 0x1005
		rec(U, trace.ITraceJump, 0x5010, 2, 1),                   // f: 2, a jump into h's middle
		rec(U, trace.ITraceJump, 0x2008, 2, 1),                   // h: 2, a jump back into f
		rec(U, trace.ITraceJump, 0x4000, 1, 0),                   // f: 1, sibling call of g
		rec(U, trace.ITraceReturn, 0x100a, 4, 3),                 // g: 4, returns to main for f
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit), // main: 2
	} {
		rep.Apply(r)
	}
	rep.Finish()
	depths := []int{1, 1, 1, 2, 0}
	for i, d := range depths {
		if i >= len(arcs) || arcs[i].Depth != d {
			t.Fatalf("arc lines %+v: want depths %v", arcs, depths)
		}
	}
	want := map[string][3]uint64{ // calls, exclusive, inclusive
		"main": {0, 5, 14}, "f": {1, 3, 9}, "g": {1, 4, 4}, "h": {0, 2, 2},
	}
	for _, fs := range rep.Funcs {
		w, ok := want[fs.Name]
		if !ok {
			t.Errorf("unexpected function %s", fs.Name)
			continue
		}
		if fs.Calls != w[0] || fs.Exclusive != w[1] || fs.Inclusive != w[2] {
			t.Errorf("%s: calls %d exclusive %d inclusive %d, want %v", fs.Name, fs.Calls, fs.Exclusive, fs.Inclusive, w)
		}
	}
	f := rep.Funcs[Key(Func{Name: "f", Module: "/bin/prog"})]
	if a := f.Callees[Key(Func{Name: "g", Module: "/lib/libg.so"})]; a == nil || a.Calls != 1 || a.Inclusive != 4 {
		t.Errorf("arc f -> g: %+v, want 1 call, 4 instructions", a)
	}
	m := rep.Funcs[Key(Func{Name: "main", Module: "/bin/prog"})]
	if a := m.Callees[Key(Func{Name: "f", Module: "/bin/prog"})]; a == nil || a.Calls != 1 || a.Inclusive != 9 {
		t.Errorf("arc main -> f: %+v, want 1 call, 9 instructions (g's and h's with f's)", a)
	}
	var buf bytes.Buffer
	if err := rep.WriteFolded(&buf); err != nil {
		t.Fatal(err)
	}
	if want := "pid 7;main 5\npid 7;main;f 3\npid 7;main;f;g 4\npid 7;main;f;h 2\n"; buf.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestReplaySiblingCallAtBase: a trace that starts inside f, which jumps
// to g's entry: g's return leaves both (the stack was empty below f), and
// f, the thread's base, includes g's instructions.
func TestReplaySiblingCallAtBase(t *testing.T) {
	U := trace.MajorITraceU
	rep := NewReport(mapNamer{}, nil)
	for _, r := range []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x2000, 0),
		rec(U, trace.ITraceJump, 0x4000, 2, 1),   // f: 2, sibling call of g
		rec(U, trace.ITraceReturn, 0x1100, 3, 2), // g: 3, returns to main
		rec(U, trace.ITraceEnd, 7, 8, 2, 1, trace.ITraceEndExit),
	} {
		rep.Apply(r)
	}
	rep.Finish()
	want := map[string][3]uint64{"main": {0, 2, 2}, "f": {0, 2, 5}, "g": {1, 3, 3}}
	for _, fs := range rep.Funcs {
		if w := want[fs.Name]; fs.Calls != w[0] || fs.Exclusive != w[1] || fs.Inclusive != w[2] {
			t.Errorf("%s: calls %d exclusive %d inclusive %d, want %v", fs.Name, fs.Calls, fs.Exclusive, fs.Inclusive, w)
		}
	}
}

// goNamer names 0x1000 main, 0x2000 f, 0x3000 runtime.morestack.abi0,
// 0x4000 gogo (the runtime's gogo<>, whose JMP resumes a goroutine).
type goNamer struct{}

func (goNamer) Func(pid uint32, addr uint64) (Func, uint64, string, int) {
	name := map[uint64]string{0x1000: "main.main", 0x2000: "main.f", 0x3000: "runtime.morestack.abi0", 0x4000: "gogo"}[addr&^0xfff]
	return Func{Name: name, Module: "/bin/goprog"}, addr & 0xfff, "", 0
}

// TestReplayGoStackGrowth: a function whose prologue grows the goroutine's
// stack ("CALL runtime.morestack; JMP start") is resumed after the call by
// gogo's jump and jumps back to its start: no call, and the runtime's
// frames above it are left.
func TestReplayGoStackGrowth(t *testing.T) {
	U := trace.MajorITraceU
	var arcs []Branch
	rep := NewReport(goNamer{}, func(b *Branch) { arcs = append(arcs, *b) })
	for _, r := range []*trace.Record{
		rec(U, trace.ITraceStart, 7, 8, 0x1000, 0),
		rec(U, trace.ITraceCall, 0x2000, 2, 1),   // main.main: call f
		rec(U, trace.ITraceCall, 0x3000, 3, 2),   // f: its prologue calls morestack
		rec(U, trace.ITraceCall, 0x4000, 5, 4),   // morestack (newstack...): gogo
		rec(U, trace.ITraceJump, 0x2049, 4, 3),   // gogo: to f, after its call of morestack
		rec(U, trace.ITraceJump, 0x2000, 1, 0),   // f: JMP to its start
		rec(U, trace.ITraceReturn, 0x1006, 6, 5), // f, its whole body, returns to main
		rec(U, trace.ITraceEnd, 7, 8, 1, 0, trace.ITraceEndExit),
	} {
		rep.Apply(r)
	}
	rep.Finish()
	if d := []int{1, 2, 3, 3, 1, 0}; len(arcs) != len(d) || arcs[4].Depth != 1 || arcs[5].Depth != 0 {
		t.Fatalf("arc lines %+v: want depths %v", arcs, d)
	}
	f := rep.Funcs[Key(Func{Name: "main.f", Module: "/bin/goprog"})]
	if f == nil || f.Calls != 1 || f.Exclusive != 10 || f.Inclusive != 10+5+4 {
		t.Fatalf("main.f: %+v, want 1 call, 10 instructions, 19 inclusive", f)
	}
}
