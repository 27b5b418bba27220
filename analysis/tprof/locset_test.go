package tprof

import (
	"math/rand/v2"
	"testing"
)

// offTable finds every offset put, with its value, through its growths,
// offset 0 and the largest included; an offset never put is not found.
func TestOffTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tab := newOffTable(3)
	want := map[uint64]int32{}
	for i := range 20000 {
		var off uint64
		switch i {
		case 0:
			off = 0
		case 1:
			off = 1<<64 - 2 // (keys are offset + 1: the largest that fits)
		default:
			off = rng.Uint64N(1 << 20)
		}
		p, ok := tab.find(off)
		if _, known := want[off]; ok != known {
			t.Fatalf("offset %#x: found %v, put before %v", off, ok, known)
		}
		if !ok {
			p = tab.put(p, off, int32(i))
			want[off] = int32(i)
		}
		if tab.vals[p] != want[off] {
			t.Fatalf("offset %#x: value %d, want %d", off, tab.vals[p], want[off])
		}
	}
	for off, v := range want {
		if p, ok := tab.find(off); !ok || tab.vals[p] != v {
			t.Fatalf("offset %#x after the growths: %v %d, want %d", off, ok, tab.vals[p], v)
		}
	}
	if 2*tab.used > len(tab.keys) || tab.used != len(want) {
		t.Fatalf("%d used of %d slots for %d offsets", tab.used, len(tab.keys), len(want))
	}
}
