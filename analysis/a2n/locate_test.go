package a2n

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"perfinsp/format/trace"
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

// A Cursor's Module is Locate's module Loc (its module and file offset)
// wherever Locate gives one, and nothing elsewhere: modules, anonymous
// memory, [stack], [vdso], gaps, addresses in and out of order; a process
// with JIT loads, or none known, goes to Locate.
func TestCursorAsLocate(t *testing.T) {
	r := New(nil)
	seg := func(pid, start, size, off uint64, path string) {
		r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{pid, start, size, off, 5}, Str: path})
	}
	seg(7, 0x400000, 0x3000, 0, "/bin/prog")
	seg(7, 0x403000, 0x2000, 0x3000, "/bin/prog")
	seg(7, 0x600000, 0x1000, 0, "//anon")
	seg(7, 0x7f0000000000, 0x4000, 0x1000, "/lib/libc.so.6")
	seg(7, 0x7ffe00000000, 0x2000, 0, "[stack]")
	seg(7, 0x7fff00000000, 0x2000, 0, "[vdso]")
	seg(8, 0x400000, 0x3000, 0, "/bin/jitted")
	r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{8, 8, 0x500000, 0x100}, Str: "jit_fn"})
	var addrs []uint64
	for _, base := range []uint64{0x3ff000, 0x400000, 0x402ff8, 0x404ff0, 0x600000, 0x7f0000000000, 0x7ffe00000000, 0x7fff00000000} {
		for d := uint64(0); d < 0x6000; d += 0x7f0 {
			addrs = append(addrs, base+d)
		}
	}
	check := func(pid uint32, order []uint64) int {
		c := r.Cursor(pid)
		modules := 0
		for _, a := range order {
			l := r.Locate(pid, a, false)
			path, off, ok := c.Module(a)
			want := l.Module() != "" && pid != 8
			if ok != want || ok && (path != l.Module() || off != l.FileOffset()) {
				t.Fatalf("pid %d %#x: cursor %q %#x %v, Locate %q %#x", pid, a, path, off, ok, l.Module(), l.FileOffset())
			}
			if ok {
				modules++
			}
		}
		return modules
	}
	rev := append([]uint64(nil), addrs...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if n := check(7, addrs); n < 20 || check(7, rev) != n {
		t.Fatalf("%d addresses in modules", n)
	}
	check(8, addrs)                                 // JIT loads: none
	check(9, addrs)                                 // unknown process: none
	seg(7, 0x400000, 0x3000, 0x10000, "/bin/other") // a remap: a new cursor sees it
	c := r.Cursor(7)
	if path, off, ok := c.Module(0x400010); !ok || path != "/bin/other" || off != 0x10010 {
		t.Fatalf("after a remap: %q %#x %v", path, off, ok)
	}
}
