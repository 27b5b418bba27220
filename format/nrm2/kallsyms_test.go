package nrm2

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"testing/iotest"
)

// readAllExact returns what it read, exactly, from a reader that gives a
// little at a time, across several of its pieces.
func TestReadAllExact(t *testing.T) {
	for _, n := range []int{0, 1, kallsymsPiece - 1, kallsymsPiece, 3*kallsymsPiece + 17} {
		src := bytes.Repeat([]byte("ffffffff81000000 T _stext\n"), n/26+1)[:n]
		got := readAllExact(iotest.HalfReader(bytes.NewReader(src)))
		if !bytes.Equal(got, src) || cap(got) != n {
			t.Fatalf("%d bytes: read %d (cap %d), equal %v", n, len(got), cap(got), bytes.Equal(got, src))
		}
	}
}

// ReadKallsyms allocates about twice the table's size (its pieces, then the
// table), not the five or more times os.ReadFile's growing slice takes.
func TestReadKallsymsAllocation(t *testing.T) {
	if _, err := os.Stat("/proc/kallsyms"); err != nil {
		t.Skip(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b := ReadKallsyms()
	runtime.ReadMemStats(&m1)
	if len(b) < 4*kallsymsPiece {
		t.Skipf("/proc/kallsyms is %d bytes: too small to tell", len(b))
	}
	if n := m1.TotalAlloc - m0.TotalAlloc; n > uint64(len(b))*5/2+kallsymsPiece {
		t.Fatalf("reading %d bytes of /proc/kallsyms allocated %d bytes (%.1f times)", len(b), n, float64(n)/float64(len(b)))
	}
}
