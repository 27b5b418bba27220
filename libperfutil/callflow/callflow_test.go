package callflow

import (
	"encoding/binary"
	"strings"
	"testing"
)

// encode writes a thread file as libhookit does (hk_put): each event
// delta-coded against the previous one, with a sync first when a value does
// not fit; zeroTail zero records and no end sync (a killed process), or the
// end sync when zeroTail < 0.
func encode(evs []Event, pid, tid int, zeroTail int) []byte {
	le := binary.LittleEndian
	var b []byte
	put := func(tag, d uint64) {
		b = le.AppendUint64(b, tag)
		b = le.AppendUint64(b, d)
	}
	put(Magic, uint64(pid)<<32|uint64(tid))
	put(Version, 0)
	var lastEarly, lastLate, lastSP uint64
	for i, e := range evs {
		tag := uint64(e.Kind)<<KindShift | uint64(e.Type)<<TypeShift | e.Fn
		sp := e.SP
		if e.API {
			tag |= 1 << APIShift
			sp = 0
		}
		if e.Kind == KindMark {
			tag = uint64(e.Kind)<<KindShift | e.SP<<8 | e.Fn
			sp = 0
		}
		iv, hook, dsp := e.Early-lastLate, lastLate-lastEarly, sp-lastSP
		spd := int64(dsp) >> 3
		if sp == 0 {
			dsp, spd = 0, 0
		}
		if i == 0 || iv>>32 != 0 || hook>>16 != 0 || dsp&7 != 0 || spd < -32768 || spd > 32767 {
			put(uint64(KindSync)<<KindShift, lastLate)
			put(e.Early, sp)
			put(tag, 0)
		} else {
			put(tag, iv|hook<<HookShift|uint64(uint16(spd))<<SPDShift)
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
	for _, bad := range [][]byte{nil, make([]byte, 2*RecSize), encode([]Event{{Kind: 9, Fn: 1}}, 1, 1, 0)} {
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
// types; seed 000's 6x2 counts the exception exit as an exit; 1x2 sees
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
	s6 := SequenceMinima([]*Thread{th}, SeqKeySeed000)
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
	if k, err := ParseSeqKey("6x2"); err != nil || k != SeqKeySeed000 || k.Size() != 864 || SeqKeyPI.Size() != 4608 {
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
