package callflow

import (
	"encoding/binary"
	"os"
	"regexp"
	"strings"
	"testing"
)

// encode writes a thread file as libhookit does (hk_put, hk_put_hook):
// each event delta-coded against the previous one, with a sync first when
// a value does not fit, and a short event where the hooks write one;
// zeroTail zero records and no end sync (a killed process), or the end
// sync when zeroTail < 0.
func encode(evs []Event, pid, tid int, zeroTail int) []byte {
	return encodeVersion(evs, pid, tid, zeroTail, Version)
}

// encodeVersion writes the given format version: VersionLong has no
// short events.
func encodeVersion(evs []Event, pid, tid int, zeroTail int, version uint64) []byte {
	le := binary.LittleEndian
	var b []byte
	put := func(tag, d uint64) {
		b = le.AppendUint64(b, tag)
		b = le.AppendUint64(b, d)
	}
	put(Magic, uint64(pid)<<32|uint64(tid))
	put(version, 0)
	var lastEarly, lastLate, lastSP uint64
	var fns [Slots]uint64
	for i, e := range evs {
		tag := uint64(e.Kind)<<KindShift | uint64(e.Type)<<TypeShift | e.Fn
		sp := e.SP
		if e.API {
			tag |= 1 << APIShift
			sp = 0
		}
		if e.Inlined {
			tag |= 1 << InlShift
		}
		if e.Kind == KindMark {
			tag = uint64(e.Kind)<<KindShift | e.SP<<8 | e.Fn
			sp = 0
		}
		if e.DS != 0 || e.IN != 0 {
			put(uint64(KindDSIN)<<KindShift, uint64(e.DS)|uint64(e.IN)<<32)
		}
		if e.Wall != 0 {
			put(uint64(KindWall)<<KindShift, e.Wall)
		}
		if e.SysN != 0 || e.Sys != 0 {
			put(uint64(KindSys)<<KindShift|uint64(e.SysN), e.Sys)
		}
		if e.FltN != 0 || e.Flt != 0 {
			put(uint64(KindFlt)<<KindShift|uint64(e.FltN), e.Flt)
		}
		iv, hook, dsp := e.Early-lastLate, lastLate-lastEarly, sp-lastSP
		spd := int64(dsp) >> 3
		if sp == 0 {
			dsp, spd = 0, 0
		}
		fits := i > 0 && iv>>32 == 0 && dsp&7 == 0 && spd >= -32768 && spd <= 32767
		inOut := e.Kind == KindEnter || e.Kind == KindExit
		switch {
		case version >= Version && inOut && fns[Slot(e.Fn)] == e.Fn && fits && hook == 0:
			exit, api, mid := uint64(0), uint64(0), uint64(uint16(spd))
			if e.Kind == KindExit {
				exit = 1
			}
			if e.API {
				api, mid = 1, uint64(e.Type)
			}
			inl := uint64(0)
			if e.Inlined {
				inl = 1
			}
			b = le.AppendUint64(b, Short<<ShortShift|exit<<ShortExitShift|api<<ShortAPIShift|inl<<ShortInlShift|uint64(Slot(e.Fn))<<SlotShift|
				mid<<ShortSPDShift|iv)
		case !fits || hook>>16 != 0:
			put(uint64(KindSync)<<KindShift, lastLate)
			put(e.Early, sp)
			put(tag, 0)
		default:
			put(tag, iv|hook<<HookShift|uint64(uint16(spd))<<SPDShift)
		}
		if inOut {
			fns[Slot(e.Fn)] = e.Fn
		}
		lastEarly, lastLate = e.Early, e.Late
		if sp != 0 {
			lastSP = sp
		}
	}
	if zeroTail < 0 {
		put(uint64(KindSync)<<KindShift, lastLate)
		put(EndMark, EndMark)
	}
	return append(b, make([]byte, RecSize*max(zeroTail, 0))...)
}

// A calls B: A's intervals are 10 (before B) and 5 (after), B's 5.
var ab = []Event{
	{Kind: KindEnter, Fn: 0xa, SP: 1000, Early: 0, Late: 10},
	{Kind: KindEnter, Fn: 0xb, SP: 900, Early: 20, Late: 30},
	{Kind: KindExit, Fn: 0xb, SP: 900, Early: 35, Late: 45},
	{Kind: KindExit, Fn: 0xa, SP: 1000, Early: 50, Late: 60},
}

func TestParseThreadRoundTripAndPartial(t *testing.T) {
	th, err := ParseThread(encode(ab, 7, 8, -1))
	if err != nil {
		t.Fatal(err)
	}
	if th.PID != 7 || th.TID != 8 || len(th.Events) != 4 || th.Partial || th.Events[2] != ab[2] || th.Events[3] != ab[3] {
		t.Fatalf("parsed %+v", th)
	}
	// Delta coding: values that do not fit 32 / 16 bits, stack steps
	// that are not 8-byte multiples or too far, API events without a
	// stack pointer and markers with a reset count round-trip exactly.
	odd := []Event{
		{Kind: KindEnter, Fn: 0x401000, SP: 0x7ffc0000, Early: 5, Late: 9},
		{Kind: KindEnter, Fn: 0x401100, SP: 0x7ffbffc0, Early: 1 << 33, Late: 1<<33 + 70000},
		{Kind: KindMark, Fn: MarkReset, SP: 3, Early: 1<<33 + 70001, Late: 1<<33 + 70001},
		{Kind: KindEnter, Fn: 0x1234, Early: 1<<33 + 70010, Late: 1<<33 + 70020, Type: 5, API: true},
		{Kind: KindExcExit, Fn: 0x1234, Early: 1<<33 + 70030, Late: 1<<33 + 70040, Type: 5, API: true},
		{Kind: KindEnter, Fn: 0x401200, SP: 0x7ffbff84, Early: 1<<33 + 70050, Late: 1<<33 + 70060},
		{Kind: KindExit, Fn: 0x401200, SP: 0x7ffbff84, Early: 1<<33 + 70070, Late: 1<<33 + 70080},
		{Kind: KindExit, Fn: 0x401100, SP: 0x7f000000, Early: 1<<33 + 70090, Late: 1<<33 + 70100},
	}
	th, err = ParseThread(encode(odd, 1, 1, -1))
	if err != nil || th.Partial || len(th.Events) != len(odd) {
		t.Fatalf("odd values: %v partial %v %d events", err, th != nil && th.Partial, len(th.Events))
	}
	for i := range odd {
		if th.Events[i] != odd[i] {
			t.Errorf("event %d: %+v, want %+v", i, th.Events[i], odd[i])
		}
	}
	// A killed process: the file ends in zero records.
	th, err = ParseThread(encode(ab[:3], 7, 8, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !th.Partial || len(th.Events) != 3 {
		t.Fatalf("partial file: partial %v, %d events", th.Partial, len(th.Events))
	}
	for _, bad := range [][]byte{nil, make([]byte, 2*RecSize), encode([]Event{{Kind: KindFlt + 1, Fn: 1}}, 1, 1, 0)} {
		if _, err := ParseThread(bad); err == nil {
			t.Errorf("no error for a bad file of %d bytes", len(bad))
		}
	}
}

func node(tr *Tree, path ...uint64) *Node {
	n := tr.Root
	for _, f := range path {
		n = n.index[f]
		if n == nil {
			return nil
		}
	}
	return n
}

func TestBuildChargesIntervalsAndCalibrates(t *testing.T) {
	tr := Build(&Thread{Events: ab}, Calibration{})
	a, b := node(tr, 0xa), node(tr, 0xa, 0xb)
	if a.Rough != 15 || b.Rough != 5 || a.Calls != 1 || a.Callees != 1 || b.Calls != 1 {
		t.Fatalf("raw: A %+v B %+v", a, b)
	}
	tr = Build(&Thread{Events: ab}, Calibration{Inner: 1, Outer: 2})
	a, b = node(tr, 0xa), node(tr, 0xa, 0xb)
	// exact = rough - t_I - callees * t_O
	if a.Base != 12 || b.Base != 4 || a.Delta != 3 || b.Delta != 1 || a.Cum != 16 || tr.Root.Cum != 16 {
		t.Fatalf("calibrated: A base %d delta %d cum %d, B base %d delta %d", a.Base, a.Delta, a.Cum, b.Base, b.Delta)
	}
}

func TestSequenceMinimaTwoPass(t *testing.T) {
	th := &Thread{Events: ab}
	k := SeqKeyKindOnly
	m := SequenceMinima([]*Thread{th}, k)
	ee, ex, xx := k.Of(0, TransEnter, 0, TransEnter, 0), k.Of(0, TransEnter, 0, TransExit, 0), k.Of(0, TransExit, 0, TransExit, 0)
	if len(m.Min) != 3 || m.Min[ee] != 10 || m.Min[ex] != 5 || m.Min[xx] != 5 || m.Count[ee] != 1 {
		t.Fatalf("minima %+v", m)
	}
	tr := Build(th, Calibration{Minima: m})
	if a, b := node(tr, 0xa), node(tr, 0xa, 0xb); a.Base != 0 || b.Base != 0 || a.Delta != 15 {
		t.Fatalf("minima-calibrated: A %d (delta %d), B %d", a.Base, a.Delta, b.Base)
	}
}

// longjmp: A -> B -> C, then A calls D from A's frame (stack pointer
// above B's): B and C are closed by the repair.
func TestStackRepairByStackPointer(t *testing.T) {
	evs := []Event{
		{Kind: KindEnter, Fn: 0xa, SP: 1000, Early: 0, Late: 1}, {Kind: KindEnter, Fn: 0xb, SP: 900, Early: 2, Late: 3}, {Kind: KindEnter, Fn: 0xc, SP: 800, Early: 4, Late: 5},
		{Kind: KindEnter, Fn: 0xd, SP: 900, Early: 6, Late: 7}, {Kind: KindExit, Fn: 0xd, SP: 900, Early: 8, Late: 9}, {Kind: KindExit, Fn: 0xa, SP: 1000, Early: 10, Late: 11},
	}
	tr := Build(&Thread{Events: evs}, Calibration{})
	if tr.Repaired != 2 || node(tr, 0xa, 0xd) == nil || node(tr, 0xa, 0xb, 0xc, 0xd) != nil || tr.OpenAtEnd != 0 {
		t.Fatalf("repaired %d, A;D %v, open %d", tr.Repaired, node(tr, 0xa, 0xd) != nil, tr.OpenAtEnd)
	}
}

// An entry marked inlined at the stack pointer of the frame on top nests in
// it (a callee the compiler inlined, its hooks called from the caller's
// frame); unmarked, it closes the frame (a sibling after a longjmp). The
// mark survives the file, in full records and in short ones.
func TestInlinedEntryNests(t *testing.T) {
	for _, inl := range []bool{true, false} {
		evs := []Event{{Kind: KindEnter, Fn: 0xa, SP: 1000}, {Kind: KindEnter, Fn: 0xb, SP: 900}}
		for i := 0; i < 3; i++ { // a loop: full records, then short ones
			evs = append(evs, Event{Kind: KindEnter, Fn: 0xc, SP: 900, Inlined: inl}, Event{Kind: KindExit, Fn: 0xc, SP: 900})
		}
		evs = append(evs, Event{Kind: KindExit, Fn: 0xb, SP: 900}, Event{Kind: KindExit, Fn: 0xa, SP: 1000})
		for i := range evs {
			evs[i].Early, evs[i].Late = uint64(10*i), uint64(10*i+1)
		}
		th, err := ParseThread(encode(evs, 1, 2, 0))
		if err != nil {
			t.Fatal(err)
		}
		marked := 0
		for _, e := range th.Events {
			if e.Inlined {
				marked++
			}
		}
		tr := Build(th, Calibration{})
		if inl {
			if marked != 3 || node(tr, 0xa, 0xb, 0xc) == nil || node(tr, 0xa, 0xb, 0xc).Calls != 3 || tr.Repaired != 0 || tr.Unmatched != 0 {
				t.Errorf("marked: %d read back marked (want 3), A;B;C %v, repaired %d, unmatched %d", marked, node(tr, 0xa, 0xb, 0xc), tr.Repaired, tr.Unmatched)
			}
		} else if marked != 0 || node(tr, 0xa, 0xc) == nil || node(tr, 0xa, 0xb, 0xc) != nil || tr.Repaired != 1 {
			t.Errorf("unmarked: %d read back marked, A;C %v, A;B;C %v, repaired %d; want B closed by C's entry", marked, node(tr, 0xa, 0xc) != nil, node(tr, 0xa, 0xb, 0xc) != nil, tr.Repaired)
		}
	}
}

func TestParseInfo(t *testing.T) {
	in, err := ParseInfo([]byte("pid=5\nmetric=rdtsc\nt_inner=21.5\nt_outer=22\nt_inner_median=23\n"))
	if err != nil || in.PID != 5 || in.Metric != "rdtsc" || in.TInner != 21.5 || in.TOuter != 22 || in.TInnerMed != 23 {
		t.Fatalf("%+v %v", in, err)
	}
	if _, err := ParseInfo([]byte("pid=5\n")); err == nil || !strings.Contains(err.Error(), "metric") {
		t.Errorf("no metric: %v", err)
	}
}

// The sequence key M1 -T1-> M2 -T2-> M3 with method types: a jitted
// method J (type 1) calls a native N (type 5) twice; the second call ends
// in an exception exit. PI's 8x3 key tells the two exits apart and the
// types; the patent's 6x2 counts the exception exit as an exit; 1x2 sees
// only the transitions.
func TestSequenceKeysByTypeAndTransition(t *testing.T) {
	evs := []Event{
		{Kind: KindEnter, Fn: 0xa, Early: 0, Late: 1, Type: 1, API: true},
		{Kind: KindEnter, Fn: 0xb, Early: 11, Late: 12, Type: 5, API: true},   // J: 10
		{Kind: KindExit, Fn: 0xb, Early: 15, Late: 16, Type: 5, API: true},    // N: 3
		{Kind: KindEnter, Fn: 0xb, Early: 36, Late: 37, Type: 5, API: true},   // J: 20
		{Kind: KindExcExit, Fn: 0xb, Early: 44, Late: 45, Type: 5, API: true}, // N: 7
		{Kind: KindExit, Fn: 0xa, Early: 47, Late: 48, Type: 1, API: true},    // J: 2
	}
	th := &Thread{Events: evs}
	pi := SequenceMinima([]*Thread{th}, SeqKeyPI)
	want := map[string]uint64{
		"other-En-jitted-En-native":  10,
		"jitted-En-native-Ex-jitted": 3,
		"native-Ex-jitted-En-native": 20,
		"jitted-En-native-Xx-jitted": 7,
		"native-Xx-jitted-Ex-other":  2,
	}
	got := map[string]uint64{}
	for _, k := range pi.Keys() {
		got[pi.Key.Name(k)] = pi.Min[k]
	}
	if len(got) != len(want) {
		t.Fatalf("8x3 keys %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("8x3 %s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	s6 := SequenceMinima([]*Thread{th}, SeqKeyPatent)
	if x := s6.Key.Of(1, TransEnter, 5, TransExit, 1); len(s6.Min) != 4 || s6.Min[x] != 3 || s6.Count[x] != 2 {
		t.Errorf("6x2: the exception exit is an exit: %d keys, min %d seen %d", len(s6.Min), s6.Min[x], s6.Count[x])
	}
	if k1 := SequenceMinima([]*Thread{th}, SeqKeyKindOnly); len(k1.Min) != 4 {
		t.Errorf("1x2: %d keys, want 4 (En-En, En-Ex, Ex-En, Ex-Ex)", len(k1.Min))
	}
	// Second pass with the 8x3 key: every interval is its key's only
	// one except none: all calibrated to 0; the tree has N under J with 2
	// calls, the exception exit closed it.
	tr := Build(th, Calibration{Minima: pi})
	j, n := node(tr, 0xa), node(tr, 0xa, 0xb)
	if j == nil || n == nil || n.Calls != 2 || j.Base != 0 || n.Base != 0 || j.Delta != 32 || n.Delta != 10 || tr.OpenAtEnd != 0 || tr.Unmatched != 0 {
		t.Fatalf("tree: J %+v N %+v open %d unmatched %d", j, n, tr.OpenAtEnd, tr.Unmatched)
	}
	if _, err := ParseSeqKey("7x3"); err == nil {
		t.Error("7x3 accepted")
	}
	if k, err := ParseSeqKey("6x2"); err != nil || k != SeqKeyPatent || k.Size() != 864 || SeqKeyPI.Size() != 4608 {
		t.Errorf("6x2: %v %v", k, err)
	}
}

// API frames (stack pointer 0) are not closed by the stack-pointer
// repair of an instrumented C function entered under them; the API
// calibration applies to API calls, the hooks' to the others.
func TestAPIFramesAndCalibrationPaths(t *testing.T) {
	evs := []Event{
		{Kind: KindEnter, Fn: 0xa, Early: 0, Late: 1, API: true},
		{Kind: KindEnter, Fn: 0xc, SP: 500, Early: 11, Late: 12},
		{Kind: KindExit, Fn: 0xc, SP: 500, Early: 22, Late: 23},
		{Kind: KindEnter, Fn: 0xc, SP: 500, Early: 33, Late: 34},
		{Kind: KindExit, Fn: 0xc, SP: 500, Early: 44, Late: 45},
		{Kind: KindExit, Fn: 0xa, Early: 55, Late: 56, API: true},
	}
	tr := Build(&Thread{Events: evs}, Calibration{Inner: 1, Outer: 2, InnerAPI: 3, OuterAPI: 4})
	a, c := node(tr, 0xa), node(tr, 0xa, 0xc)
	if a == nil || c == nil || tr.Repaired != 0 || c.Calls != 2 {
		t.Fatalf("tree: A %v C %v repaired %d", a, c, tr.Repaired)
	}
	// A: 30 - 3 (its API inner) - 2*2 (two hooked callees); C: 20 - 2*1.
	if a.Base != 23 || c.Base != 18 {
		t.Fatalf("A base %d (want 23), C base %d (want 18)", a.Base, c.Base)
	}
}

func TestParseNames(t *testing.T) {
	m := ParseNames([]byte("7f00 java.lang.String.length()I\nbad\nzz name\n7f00 Foo.bar (V)\n10 x\n"))
	if len(m) != 2 || m[0x7f00] != "Foo.bar (V)" || m[0x10] != "x" {
		t.Fatalf("%v", m)
	}
	n := ProcessNamer(&Process{Info: Info{PID: 1}, Names: m})
	if n.Name(0x7f00) != "Foo.bar (V)" || n.Name(0x11) != "0x11" {
		t.Fatalf("namer: %q %q", n.Name(0x7f00), n.Name(0x11))
	}
}

// A killed process's buffer (the tail file) is joined to its thread file
// when the thread file ends where the buffer starts, and ignored when the
// buffer was written already.
func TestAppendTail(t *testing.T) {
	le := binary.LittleEndian
	full := encode(ab, 7, 8, 0)
	cut := 2*RecSize + 3*RecSize // the header and A's sync+enter
	tail := le.AppendUint64(nil, TailMagic)
	tail = le.AppendUint64(tail, uint64(cut))
	tail = append(tail, full[cut:]...)
	tail = append(tail, make([]byte, 4*RecSize)...)
	th, err := ParseThread(AppendTail(full[:cut], tail))
	if err != nil || len(th.Events) != 4 || !th.Partial || th.Events[2] != ab[2] {
		t.Fatalf("joined: %v %+v", err, th)
	}
	// Written already: the thread file is longer than the tail's start.
	if got := AppendTail(full, tail); len(got) != len(full) {
		t.Fatalf("a tail written already was joined: %d bytes, want %d", len(got), len(full))
	}
	if got := AppendTail(full[:cut], []byte("not a tail, not a tail")); len(got) != cut {
		t.Fatalf("a bad tail was joined")
	}
}

// DS / IN (kmod backend): the dispatches and interrupts before an event
// are charged to the function on top in the interval it ends, and log-rt
// prints them only when the info file says the module gave them.
func TestDispatchesAndInterrupts(t *testing.T) {
	evs := append([]Event(nil), ab...)
	evs[2].DS, evs[2].IN = 2, 5 // inside B
	evs[3].IN = 1               // A after B
	th, err := ParseThread(encode(evs, 7, 8, -1))
	if err != nil || th.Events[2] != evs[2] || th.Events[3] != evs[3] {
		t.Fatalf("round trip: %v %+v", err, th)
	}
	p := &Process{Info: Info{PID: 7, Metric: "tsc", Backend: "kmod", DSIN: "kmod"}, Threads: []*Thread{th}}
	a := AnalyzeWith(p, Calibration{})
	tr := a.Trees[0]
	if A, B := node(tr, 0xa), node(tr, 0xa, 0xb); A.DS != 0 || A.IN != 1 || B.DS != 2 || B.IN != 5 {
		t.Fatalf("A ds %d in %d, B ds %d in %d", A.DS, A.IN, B.DS, B.IN)
	}
	var buf strings.Builder
	if err := a.WriteLogRT(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s+2\s+1\s+0\s+5\s+0\s+2\s+5\s+0xb$`).MatchString(buf.String()) {
		t.Errorf("log-rt has no DS 2 IN 5 for B:\n%s", buf.String())
	}
	p.Info.DSIN = "none"
	buf.Reset()
	AnalyzeWith(p, Calibration{}).WriteLogRT(&buf)
	if !regexp.MustCompile(`(?m)^\s+2\s+1\s+0\s+5\s+0\s+-\s+-\s+0xb$`).MatchString(buf.String()) {
		t.Errorf("log-rt without the module shows DS / IN:\n%s", buf.String())
	}
}

// SYS / NSYS (the module's system-call figures): the system calls before
// an event and their metric are charged to the function on top in the
// interval it ends, summed per function in log-gen, and printed only when
// the info file says they were measured (sys=in or sys=out).
func TestSystemCalls(t *testing.T) {
	evs := append([]Event(nil), ab...)
	evs[2].SysN, evs[2].Sys = 2, 1234 // inside B
	evs[3].SysN, evs[3].Sys = 1, 600  // A after B
	th, err := ParseThread(encode(evs, 7, 8, -1))
	if err != nil || th.Events[2] != evs[2] || th.Events[3] != evs[3] {
		t.Fatalf("round trip: %v %+v", err, th)
	}
	p := &Process{Info: Info{PID: 7, Metric: "tsc-user", Backend: "kmod", DSIN: "kmod", Sys: "out", SysGlue: 700}, Threads: []*Thread{th}}
	a := AnalyzeWith(p, Calibration{})
	tr := a.Trees[0]
	if A, B := node(tr, 0xa), node(tr, 0xa, 0xb); A.SysN != 1 || A.Sys != 600 || B.SysN != 2 || B.Sys != 1234 {
		t.Fatalf("A sys %d in %d calls, B %d in %d", A.Sys, A.SysN, B.Sys, B.SysN)
	}
	var buf strings.Builder
	if err := a.WriteLogRT(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s+2\s+1\s+0\s+5\s+0\s+0\s+0\s+1234\s+2\s+0xb$`).MatchString(buf.String()) ||
		!strings.Contains(buf.String(), "not in BASE") {
		t.Errorf("log-rt has no SYS 1234 NSYS 2 for B:\n%s", buf.String())
	}
	buf.Reset()
	if err := a.WriteLogGen(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^.*\s600\s+1\s+0xa$`).MatchString(buf.String()) {
		t.Errorf("log-gen has no SYS 600 NSYS 1 for A:\n%s", buf.String())
	}
	p.Info.Sys = "none"
	buf.Reset()
	AnalyzeWith(p, Calibration{}).WriteLogRT(&buf)
	if !regexp.MustCompile(`(?m)^\s+2\s+1\s+0\s+5\s+0\s+0\s+0\s+0xb$`).MatchString(buf.String()) || strings.Contains(buf.String(), "SYS") {
		t.Errorf("log-rt without system-call figures shows SYS:\n%s", buf.String())
	}
	info, err := ParseInfo([]byte("metric=tsc\nsys=in\nsys_glue=712\nfaults=in\nfault_glue=1530\n"))
	if err != nil || info.Sys != "in" || info.SysGlue != 712 || !info.HasSys() || info.Faults != "in" || info.FaultGlue != 1530 {
		t.Errorf("info: %+v %v", info, err)
	}
	if info.ResumeNote() != "" {
		t.Errorf("info without resume figures: SYS note %q", info.ResumeNote())
	}
	// The rseq update after a switch goes with the system calls: the
	// header says so where the module measured it.
	info, err = ParseInfo([]byte("metric=tsc-user\nsys=out\nsys_glue=343\nresumes=out\nresume_glue=150\n"))
	if err != nil || info.Resumes != "out" || info.ResumeGlue != 150 || !strings.Contains(info.ResumeNote(), "rseq update") {
		t.Errorf("info with resume figures: %+v %v", info, err)
	}
	p.Info = info
	buf.Reset()
	AnalyzeWith(p, Calibration{}).WriteLogRT(&buf)
	if !strings.Contains(buf.String(), "after a switch, 150 per update") {
		t.Errorf("log-rt's SYS header does not say SYS holds the rseq updates:\n%s", buf.String())
	}
}

// FLT / NFLT (the module's user page-fault figures): charged like SYS to
// the function on top in the interval the event ends, beside SYS in
// log-rt and log-gen, printed only where the info file says faults were
// measured (faults=in or out).
func TestPageFaults(t *testing.T) {
	evs := append([]Event(nil), ab...)
	evs[2].FltN, evs[2].Flt = 8, 76000 // inside B
	evs[2].SysN, evs[2].Sys = 1, 900
	evs[3].FltN, evs[3].Flt = 1, 9500 // A after B
	th, err := ParseThread(encode(evs, 7, 8, -1))
	if err != nil || th.Events[2] != evs[2] || th.Events[3] != evs[3] {
		t.Fatalf("round trip: %v %+v", err, th)
	}
	p := &Process{Info: Info{PID: 7, Metric: "tsc", Backend: "kmod", DSIN: "kmod", Sys: "in", SysGlue: 343, Faults: "in", FaultGlue: 440},
		Threads: []*Thread{th}}
	a := AnalyzeWith(p, Calibration{})
	tr := a.Trees[0]
	if A, B := node(tr, 0xa), node(tr, 0xa, 0xb); A.FltN != 1 || A.Flt != 9500 || B.FltN != 8 || B.Flt != 76000 || B.SysN != 1 {
		t.Fatalf("A faults %d in %d, B %d in %d (sys %d)", A.Flt, A.FltN, B.Flt, B.FltN, B.SysN)
	}
	var buf strings.Builder
	if err := a.WriteLogRT(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s+2\s+1\s+0\s+5\s+0\s+0\s+0\s+900\s+1\s+76000\s+8\s+0xb$`).MatchString(buf.String()) ||
		!strings.Contains(buf.String(), "FLT / NFLT") {
		t.Errorf("log-rt has no FLT 76000 NFLT 8 after SYS for B:\n%s", buf.String())
	}
	buf.Reset()
	if err := a.WriteLogGen(&buf); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^.*\s0\s+0\s+9500\s+1\s+0xa$`).MatchString(buf.String()) {
		t.Errorf("log-gen has no FLT 9500 NFLT 1 for A:\n%s", buf.String())
	}
	rows := map[string]FlatRow{}
	for _, r := range a.Flat() {
		rows[r.Name] = r
	}
	if rows["0xb"].FltN != 8 || rows["0xb"].Flt != 76000 {
		t.Errorf("flat row of B: %+v", rows["0xb"])
	}
	p.Info.Faults = "none"
	buf.Reset()
	AnalyzeWith(p, Calibration{}).WriteLogRT(&buf)
	if strings.Contains(buf.String(), "FLT") {
		t.Errorf("log-rt without fault figures shows FLT:\n%s", buf.String())
	}
}

// Training: a trainer's minima written and read back; merged with a run
// that saw a key only once (with more than the true overhead), the
// trainer's lower minimum calibrates it; another metric is refused.
func TestTrainingFileRoundTripAndMerge(t *testing.T) {
	k := SeqKeyKindOnly
	trainer := SequenceMinima([]*Thread{{Events: ab}}, k) // En-En 10, En-Ex 5, Ex-Ex 5
	trainer.Min[k.Of(0, TransExit, 0, TransEnter, 0)] = 3 // a key this run never sees
	trainer.Count[k.Of(0, TransExit, 0, TransEnter, 0)] = 1
	var buf strings.Builder
	if err := WriteMinima(&buf, trainer, "tsc"); err != nil {
		t.Fatal(err)
	}
	got, metric, err := ReadMinima(strings.NewReader(buf.String()))
	if err != nil || metric != "tsc" || got.Key != k || len(got.Min) != 4 || got.Min[k.Of(0, TransEnter, 0, TransEnter, 0)] != 10 {
		t.Fatalf("read back: %v %q %+v\n%s", err, metric, got, buf.String())
	}
	// This run: A calls B once, with B's body 9 (the trainer saw 5).
	run := []Event{
		{Kind: KindEnter, Fn: 0xa, SP: 1000, Early: 0, Late: 10},
		{Kind: KindEnter, Fn: 0xb, SP: 900, Early: 20, Late: 30},
		{Kind: KindExit, Fn: 0xb, SP: 900, Early: 39, Late: 45},
		{Kind: KindExit, Fn: 0xa, SP: 1000, Early: 50, Late: 60},
	}
	p := &Process{Info: Info{Metric: "tsc"}, Threads: []*Thread{{Events: run}}}
	cal, err := TrainedCalibration(p, got, metric)
	if err != nil {
		t.Fatal(err)
	}
	tr := Build(p.Threads[0], cal)
	if b := node(tr, 0xa, 0xb); b.Base != 4 || b.Delta != 5 {
		t.Fatalf("B with the trained minimum: base %d delta %d, want 4 and 5", b.Base, b.Delta)
	}
	if own := Build(p.Threads[0], MinimaCalibration(p, k)); node(own, 0xa, 0xb).Base != 0 {
		t.Fatalf("B with its own run's minimum: base %d, want 0", node(own, 0xa, 0xb).Base)
	}
	if cal.Minima.Min[k.Of(0, TransExit, 0, TransEnter, 0)] != 3 || !cal.Minima.Trained {
		t.Errorf("the trainer-only key was not kept: %+v", cal.Minima)
	}
	if _, err := TrainedCalibration(&Process{Info: Info{Metric: "task-clock"}}, got, metric); err == nil {
		t.Error("minima of tsc applied to a task-clock run")
	}
	for _, bad := range []string{"", "# perfinsp hookit sequence minima\nkey 8x3\n", "# perfinsp hookit sequence minima\nkey 8x3\nmetric tsc\n99999 1 1 x\n", "hello\n"} {
		if _, _, err := ReadMinima(strings.NewReader(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// The environmental overhead from an ITrace arc report of the
// uninstrumented example (testdata/chain.arc: work -> chain1 -> ... ->
// chain4 -> leaf, twice; another thread's lines between): an entry comes
// after its call instruction, an exit before its return instruction. The
// glue: an entry to the next call 1 (the call), leaf's body 4 - 1 (its ret
// is after the exit), a return to the next return 1 (a ret), a return to
// the next call 4 (chain1's ret, work's loop: 2, work's call).
func TestEnvFromArc(t *testing.T) {
	f, err := os.Open("testdata/chain.arc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	funcs := map[string]bool{"work": true, "chain1": true, "chain2": true, "chain3": true, "chain4": true, "leaf": true}
	k := SeqKeyKindOnly
	env, err := EnvFromArc(f, funcs, k)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{
		k.Of(0, TransEnter, 0, TransEnter, 0): 1, // chainN's call
		k.Of(0, TransEnter, 0, TransExit, 0):  3, // leaf: 4 instructions, its ret after the exit
		k.Of(0, TransExit, 0, TransExit, 0):   1, // a ret
		k.Of(0, TransExit, 0, TransEnter, 0):  4, // chain1's ret, work's 2 (add, jne), work's call
	}
	for s, v := range want {
		if env.Min[s] != v {
			t.Errorf("%s: env %d, want %d (all %v)", k.Name(s), env.Min[s], v, env.Min)
		}
	}
	// Applied: an interval loses min - env, and a key the ITrace did not
	// cover assumes EnvDefault.
	m := NewMinima(k)
	m.Add(k.Of(0, TransEnter, 0, TransEnter, 0), 50)
	m.Add(k.Of(0, TransEnter, 0, TransExit, 0), 2) // below its env: nothing taken off
	m.Env = env
	if m.Off(k.Of(0, TransEnter, 0, TransEnter, 0)) != 49 || m.Off(k.Of(0, TransEnter, 0, TransExit, 0)) != 0 {
		t.Errorf("off: %d %d", m.Off(k.Of(0, TransEnter, 0, TransEnter, 0)), m.Off(k.Of(0, TransEnter, 0, TransExit, 0)))
	}
	env2 := NewMinima(k)
	m.Env = env2
	env2.Add(k.Of(0, TransExit, 0, TransExit, 0), 1)
	if m.Off(k.Of(0, TransEnter, 0, TransEnter, 0)) != 50-EnvDefault {
		t.Errorf("uncovered key: off %d, want %d", m.Off(k.Of(0, TransEnter, 0, TransEnter, 0)), 50-EnvDefault)
	}
	if _, err := EnvFromArc(strings.NewReader("hello\n"), funcs, k); err == nil {
		t.Error("no error for a file that is not an arc report")
	}
}

// The exact reference from the ITrace of the instrumented binary with its
// hooks not recording (testdata/chain-instrumented.arc: work -> chain1 ->
// ... -> chain4 -> leaf, another thread in fib between): the program's
// instructions between hook calls are charged to the function on top, the
// hook library's (__cyg_profile_func_*, hk_event, read_zero) are not.
// Each chain function runs 11 of its own per call in the full run, leaf 6
// (16,338 / 2,723): the excerpt must give the same.
func TestReferenceFromArc(t *testing.T) {
	f, err := os.Open("testdata/chain-instrumented.arc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref, err := ReferenceFromArc(f, SeqKeyKindOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"chain2", "chain3", "chain4"} {
		if ref.Self[fn] != 11 || ref.Calls[fn] != 1 {
			t.Errorf("%s: %d instructions, %d calls; want 11 and 1", fn, ref.Self[fn], ref.Calls[fn])
		}
	}
	if ref.Self["leaf"] != 6 || ref.Calls["leaf"] != 1 {
		t.Errorf("leaf: %d instructions, %d calls; want 6 and 1", ref.Self["leaf"], ref.Calls["leaf"])
	}
	for _, hook := range []string{"__cyg_profile_func_enter", "__cyg_profile_func_exit", "hk_event", "read_zero"} {
		if _, ok := ref.Self[hook]; ok {
			t.Errorf("the hook library's %s was charged", hook)
		}
	}
	k := SeqKeyKindOnly
	if ref.Env.Min[k.Of(0, TransEnter, 0, TransEnter, 0)] != 6 || len(ref.Env.Min) != 4 {
		t.Errorf("env %v", ref.Env.Min)
	}
	if _, err := ReferenceFromArc(strings.NewReader("arc of x\nheader\n"), k); err == nil {
		t.Error("no error for an arc without hook calls")
	}
}

// Flat sums each function's interrupts over its paths (hookit check names
// them next to a function out of tolerance).
func TestFlatSumsInterrupts(t *testing.T) {
	root := &Node{}
	a := &Node{Name: "a", Parent: root, Calls: 1, IN: 2}
	b1 := &Node{Name: "b", Parent: a, Calls: 3, IN: 1}
	b2 := &Node{Name: "b", Parent: root, Calls: 1}
	a.Children = []*Node{b1}
	root.Children = []*Node{a, b2}
	rows := map[string]FlatRow{}
	for _, r := range (&Analysis{Trees: []*Tree{{Root: root}}}).Flat() {
		rows[r.Name] = r
	}
	if rows["a"].IN != 2 || rows["b"].IN != 1 || rows["b"].Calls != 4 {
		t.Fatalf("a %+v, b %+v", rows["a"], rows["b"])
	}
}

// hookCalls is what the entry and exit hooks record with one metric read
// per hook (each event's late read its early one): a caller entering and
// leaving leaves n times, the functions' slots colliding (0x401000 and
// 0x405010 share one), with an interval now and then too long for a
// short event.
func hookCalls(n int) []Event {
	if Slot(0x401000) != Slot(0x405010) || Slot(0x401000) == Slot(0x401040) {
		panic("hookCalls: the slots do not collide as the test needs")
	}
	var evs []Event
	now := uint64(100)
	add := func(k uint8, fn, sp, iv uint64) {
		now += iv
		evs = append(evs, Event{Kind: k, Fn: fn, SP: sp, Early: now, Late: now})
	}
	add(KindEnter, 0x401040, 0x7ffc1000, 0)
	for i := 0; i < n; i++ {
		fn := []uint64{0x401000, 0x405010, 0x401000, 0x401080}[i%4]
		iv := uint64(7 + i%5)
		if i%9 == 8 {
			iv = 1 << 33 // does not fit: a sync
		}
		add(KindEnter, fn, 0x7ffc0fc0, iv)
		add(KindExit, fn, 0x7ffc0fc0, 3)
	}
	// The in-process API's events (no stack pointer, a method type)
	// share the table.
	for i := 0; i < n/4; i++ {
		now += 4
		evs = append(evs, Event{Kind: KindEnter, Fn: 0x1000 + uint64(i%3), Type: uint8(i % 8), API: true, Early: now, Late: now})
		now += 6
		evs = append(evs, Event{Kind: KindExit, Fn: 0x1000 + uint64(i%3), Type: uint8(i % 8), API: true, Early: now, Late: now})
	}
	add(KindExit, 0x401040, 0x7ffc1000, 2)
	return evs
}

// Short events (one word) decode to the events the two-word records give,
// through slot collisions and syncs; a file of the two-word format reads
// the same; the short form is smaller.
func TestShortEvents(t *testing.T) {
	evs := hookCalls(40)
	short, long := encode(evs, 1, 2, -1), encodeVersion(evs, 1, 2, -1, VersionLong)
	if len(short) >= len(long)*3/4 {
		t.Fatalf("short events: %d bytes against %d with two-word records", len(short), len(long))
	}
	for name, b := range map[string][]byte{"short": short, "long": long} {
		th, err := ParseThread(b)
		if err != nil || th.Partial || len(th.Events) != len(evs) {
			t.Fatalf("%s: %v, %+v", name, err, th)
		}
		for i := range evs {
			if th.Events[i] != evs[i] {
				t.Fatalf("%s: event %d %+v, want %+v", name, i, th.Events[i], evs[i])
			}
		}
	}
	// Streamed in reads that cut records anywhere, the same.
	dir := t.TempDir()
	path := dir + "/hookit-1-2.bin"
	if err := os.WriteFile(path, short, 0o600); err != nil {
		t.Fatal(err)
	}
	th, err := ReadThread(path)
	if err != nil || len(th.Events) != len(evs) || th.Events[len(evs)-1] != evs[len(evs)-1] {
		t.Fatalf("streamed: %v %+v", err, th)
	}
	// A killed process's buffer cut after a short event joins on.
	le := binary.LittleEndian
	full := encode(evs, 1, 2, 0)
	cut := 0 // after the third short event
	for at, shorts := HeaderRecs*RecSize, 0; at < len(full); at += recWords(le.Uint64(full[at:])) * WordSize {
		if le.Uint64(full[at:])>>ShortShift == Short {
			shorts++
			if shorts == 3 {
				cut = at + WordSize
			}
		}
	}
	if cut == 0 {
		t.Fatal("no short event to cut after")
	}
	tail := le.AppendUint64(nil, TailMagic)
	tail = le.AppendUint64(tail, uint64(cut))
	tail = append(tail, full[cut:]...)
	tail = append(tail, make([]byte, 3*WordSize)...)
	th, err = ParseThread(AppendTail(full[:cut], tail))
	if err != nil || len(th.Events) != len(evs) || !th.Partial || th.Events[len(evs)-1] != evs[len(evs)-1] {
		t.Fatalf("joined: %v %+v", err, th)
	}
	// A short event whose slot nothing filled, or with unknown bits, is
	// an error, not a guess.
	for _, w := range []uint64{Short<<ShortShift | 5<<SlotShift | 3, Short<<ShortShift | 1<<58 | uint64(Slot(0x401040))<<SlotShift,
		Short<<ShortShift | 1<<ShortAPIShift | 1<<40 | uint64(Slot(0x401040))<<SlotShift,
		Short<<ShortShift | 1<<ShortAPIShift | 1<<ShortInlShift | uint64(Slot(0x401040))<<SlotShift} {
		b := append(append([]byte(nil), encode(evs[:1], 1, 2, 0)...), le.AppendUint64(nil, w)...)
		if _, err := ParseThread(b); err == nil {
			t.Errorf("no error for the short event %#x", w)
		}
	}
}
