package callflow

import (
	"encoding/binary"
	"strings"
	"testing"
)

func encode(evs []Event, pid, tid int, zeroTail int) []byte {
	le := binary.LittleEndian
	b := make([]byte, RecSize*(1+len(evs)+zeroTail))
	le.PutUint64(b, Magic)
	le.PutUint64(b[8:], uint64(pid)<<32|uint64(tid))
	le.PutUint64(b[16:], Version)
	for i, e := range evs {
		r := b[(i+1)*RecSize:]
		le.PutUint64(r, uint64(e.Kind)<<KindShift|e.Fn)
		le.PutUint64(r[8:], e.SP)
		le.PutUint64(r[16:], e.Early)
		le.PutUint64(r[24:], e.Late)
	}
	return b
}

// A calls B: A's intervals are 10 (before B) and 5 (after), B's 5.
var ab = []Event{
	{KindEnter, 0xa, 1000, 0, 10},
	{KindEnter, 0xb, 900, 20, 30},
	{KindExit, 0xb, 900, 35, 45},
	{KindExit, 0xa, 1000, 50, 60},
}

func TestParseThreadRoundTripAndPartial(t *testing.T) {
	th, err := ParseThread(encode(ab, 7, 8, 0))
	if err != nil {
		t.Fatal(err)
	}
	if th.PID != 7 || th.TID != 8 || len(th.Events) != 4 || th.Partial || th.Events[2] != ab[2] {
		t.Fatalf("parsed %+v", th)
	}
	// A killed process: the file ends in zero records.
	th, err = ParseThread(encode(ab[:3], 7, 8, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !th.Partial || len(th.Events) != 3 {
		t.Fatalf("partial file: partial %v, %d events", th.Partial, len(th.Events))
	}
	for _, bad := range [][]byte{nil, make([]byte, RecSize), encode([]Event{{Kind: 9, Fn: 1}}, 1, 1, 0)} {
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
	m := SequenceMinima([]*Thread{th})
	if m.Min[SeqEnterEnter] != 10 || m.Min[SeqEnterExit] != 5 || m.Min[SeqExitExit] != 5 || m.Count[SeqExitEnter] != 0 {
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
		{KindEnter, 0xa, 1000, 0, 1}, {KindEnter, 0xb, 900, 2, 3}, {KindEnter, 0xc, 800, 4, 5},
		{KindEnter, 0xd, 900, 6, 7}, {KindExit, 0xd, 900, 8, 9}, {KindExit, 0xa, 1000, 10, 11},
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
