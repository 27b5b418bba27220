package unwind

import (
	"testing"
)

// TestWarmNoAlloc: on a warm cache Unwind allocates nothing.
func TestWarmNoAlloc(t *testing.T) {
	for _, shape := range []string{"direct", "qsort"} {
		s := liveSample(t, true, shape)
		find := s.find
		out := make([]uint64, 0, 64)
		out, _ = Unwind(find, s.regs, s.st, out[:0], 64)
		n := len(out)
		if a := testing.AllocsPerRun(100, func() { out, _ = Unwind(find, s.regs, s.st, out[:0], 64) }); a != 0 || len(out) != n {
			t.Errorf("%s: %v allocations per unwind (%d pcs), want 0", shape, a, len(out))
		}
	}
}

// BenchmarkUnwind unwinds the live samples on a warm cache (the Finder is
// the test's: a binary search of the process's mappings).
func BenchmarkUnwind(b *testing.B) {
	for _, c := range []struct {
		name  string
		pie   bool
		shape string
	}{{"pie-direct", true, "direct"}, {"pie-qsort", true, "qsort"}, {"nopie-direct", false, "direct"}} {
		b.Run(c.name, func(b *testing.B) {
			s := liveSample(b, c.pie, c.shape)
			find := s.find
			out := make([]uint64, 0, 128)
			out, stop := Unwind(find, s.regs, s.st, out, 128)
			if stop != StopEnd {
				b.Fatalf("unwind: %v", stop)
			}
			frames := len(out)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out, _ = Unwind(find, s.regs, s.st, out[:0], 128)
			}
			b.StopTimer()
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(frames), "frames/sample")
			b.ReportMetric(ns/float64(frames), "ns/frame")
		})
	}
}
