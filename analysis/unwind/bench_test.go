package unwind

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// freshSample is s with its files loaded again (empty caches), the
// tables' cache budget set to used.
func freshSample(t *testing.T, s *sample, used int64) *sample {
	t.Helper()
	fresh := *s
	fresh.maps = nil
	tables := map[*Table]*Table{}
	for _, m := range s.maps {
		nt := tables[m.t]
		if nt == nil {
			var err error
			if nt, _, err = loadFile(m.path); err != nil {
				t.Fatal(err)
			}
			nt.cached.Store(used)
			tables[m.t] = nt
		}
		c := *m
		c.t = nt
		fresh.maps = append(fresh.maps, &c)
	}
	return &fresh
}

// TestCacheFull: with the cache budget spent, rows are computed per
// lookup: the same unwind, nothing kept, nothing allocated.
func TestCacheFull(t *testing.T) {
	s := liveSample(t, true, "qsort")
	want, wstop := Unwind(s.find, s.regs, s.st, nil, 64)
	full := freshSample(t, s, maxCache)
	find := full.find
	out := make([]uint64, 0, 64)
	out, stop := Unwind(find, full.regs, full.st, out, 64)
	if stop != wstop || fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("cache full: %x (%v), want %x (%v)", out, stop, want, wstop)
	}
	for _, m := range full.maps {
		for i := range m.t.fdes {
			if m.t.fdes[i].rows.Load() != nil {
				t.Fatalf("%s: rows kept with the cache full", m.path)
			}
		}
	}
	if a := testing.AllocsPerRun(100, func() { out, _ = Unwind(find, full.regs, full.st, out[:0], 64) }); a != 0 {
		t.Errorf("cache full: %v allocations per unwind, want 0", a)
	}
}

// TestConcurrent unwinds from several goroutines on cold tables (run
// with -race).
func TestConcurrent(t *testing.T) {
	s := liveSample(t, false, "qsort")
	want, _ := Unwind(s.find, s.regs, s.st, nil, 64)
	cold := freshSample(t, s, 0)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				got, _ := Unwind(cold.find, cold.regs, cold.st, nil, 64)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					errs <- fmt.Sprintf("%x, want %x", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// loadLibs are real libraries of this machine whose CFI BenchmarkLoad
// reads: libc, libstdc++ and a large one.
var loadLibs = []string{
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
}

// BenchmarkLoad loads the CFI of each of loadLibs (from memory; a library
// not installed is skipped). cpu-ns/op is the process's CPU time per load
// (garbage collection included), steadier than ns/op on a busy machine.
func BenchmarkLoad(b *testing.B) {
	for _, path := range loadLibs {
		b.Run(filepath.Base(path), func(b *testing.B) {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Skipf("skipped: %v", err)
			}
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				t, err := Load(bytes.NewReader(data), int64(len(data)))
				if err != nil || len(t.fdes) == 0 {
					b.Fatalf("%s: %v", path, err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
