package a2n

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"perfinsp/libperfutil/trace"
)

// LocateKernel names a kernel address as Locate does, without the process
// (it reads none: it may run while records are applied).
func TestLocateKernelAsLocate(t *testing.T) {
	ks := []byte("ffffffff81000000 T _stext\nffffffff81000100 T do_work\nffffffff81000200 t helper\nffffffffc0001000 t mod_fn\t[mymod]\n")
	r := New(ks)
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTEProcess, Fixed: []uint64{7, 1}, Str: "prog"})
	for _, addr := range []uint64{0xffffffff81000150, 0xffffffff81000250, 0xffffffffc0001010, 0xffffffffc0002000, 0x1000} {
		want := r.Locate(7, addr, true)
		got := r.LocateKernel(addr)
		if want.Final().Process != "prog" {
			t.Fatalf("%#x: Locate's process %q, want prog", addr, want.Final().Process)
		}
		w := want.Final()
		w.Process = ""
		if got.Final() != w || got.Module() != "" {
			t.Fatalf("%#x: LocateKernel %+v, Locate %+v", addr, got.Final(), w)
		}
	}
}

// Locates of different processes on goroutines of their own (each a
// process's anonymous memory, named by perf maps past the directory's
// listing) name as one goroutine does (run with -race: the perf map
// directory's state is shared).
func TestLocateProcessesAtOnce(t *testing.T) {
	dir := t.TempDir()
	const procs = 2 * (perfMapOpens + 8)
	for pid := 100; pid < 100+procs; pid += 3 {
		m := fmt.Sprintf("7f0000001000 40 fn_of_%d\n", pid)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("perf-%d.map", pid)), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resolver := func() *Resolver {
		r := New(nil)
		r.PerfMapDir = dir
		for pid := uint64(100); pid < 100+procs; pid++ {
			r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{pid, 0x7f0000000000, 0x10000, 0, 7}, Str: "//anon"})
		}
		return r
	}
	one, two := resolver(), resolver()
	want := map[uint32]Result{}
	for pid := uint32(100); pid < 100+procs; pid++ {
		l := one.Locate(pid, 0x7f0000001010, false)
		want[pid] = l.Final()
	}
	got := make([]map[uint32]Result, 2)
	var wg sync.WaitGroup
	for half := range 2 {
		got[half] = map[uint32]Result{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pid := uint32(100 + half); pid < 100+procs; pid += 2 {
				l := two.Locate(pid, 0x7f0000001010, false)
				got[half][pid] = l.Final()
			}
		}()
	}
	wg.Wait()
	named := 0
	for pid, w := range want {
		g := got[(pid-100)%2][pid]
		if g != w {
			t.Errorf("pid %d: %+v at once, %+v on one goroutine", pid, g, w)
		}
		if w.Symbol == fmt.Sprintf("fn_of_%d", pid) {
			named++
		}
	}
	if named != (procs+2)/3 {
		t.Fatalf("%d processes named by their perf maps, want %d", named, (procs+2)/3)
	}
}
