package a2n

import (
	"debug/elf"
	"syscall"
	"testing"
)

// benchLibs are real modules of this machine: libc and libpython are
// stripped (.dynsym only) distribution libraries, python3 has .symtab.
var benchLibs = []string{
	"/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
	"/usr/lib/x86_64-linux-gnu/liblzma.so.5",
}

// BenchmarkLoadModule is the cost of parsing a module's name tables once
// (post pays it for every module a tick hits).
func BenchmarkLoadModule(b *testing.B) {
	for _, path := range benchLibs {
		b.Run(baseName(path), func(b *testing.B) {
			if m := loadModule(path, ""); m.Err != nil {
				b.Skipf("skipped: %v", m.Err)
			}
			for i := 0; i < b.N; i++ {
				loadModule(path, "")
			}
		})
	}
}

// BenchmarkLoadModuleCached is the same module read from the table
// cache (post's second and later runs).
func BenchmarkLoadModuleCached(b *testing.B) {
	dir := b.TempDir()
	for _, path := range benchLibs {
		b.Run(baseName(path), func(b *testing.B) {
			if m := loadModule(path, dir); m.Err != nil {
				b.Skipf("skipped: %v", m.Err)
			}
			if m := loadModule(path, dir); m.tab.c == nil {
				b.Fatalf("%s: not read from the cache", path)
			}
			for i := 0; i < b.N; i++ {
				loadModule(path, dir)
			}
		})
	}
}

// BenchmarkSymbol is one lookup in a parsed module (post does one per
// distinct (thread, address)).
func BenchmarkSymbol(b *testing.B) {
	m := loadModule(benchLibs[0], "")
	if m.Err != nil || len(m.loads) == 0 {
		b.Skipf("skipped: %v", m.Err)
	}
	text := m.loads[len(m.loads)/2]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Symbol(text.Off + uint64(i*64)%text.Filesz)
	}
}

// BenchmarkFDERanges is the cost of reading a stripped library's function
// ranges from its .eh_frame (cpu-ns/op: the process's CPU time per read,
// steadier than ns/op on a busy machine).
func BenchmarkFDERanges(b *testing.B) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1"} {
		b.Run(baseName(path), func(b *testing.B) {
			f, err := elf.Open(path)
			if err != nil {
				b.Skipf("skipped: %v", err)
			}
			defer f.Close()
			if len(fdeRanges(f)) == 0 {
				b.Fatalf("%s: no FDE ranges", path)
			}
			b.ReportAllocs()
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for b.Loop() {
				fdeRanges(f)
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
