package a2n

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const splitSrc = `#include <stdio.h>
__attribute__((noinline)) int work_a(int x) { return x * 3 + 1; }
__attribute__((noinline)) int work_b(int x) { return work_a(x) ^ 5; }
__attribute__((noinline)) int work_c(int x) { int s = 0; for (int i = 0; i < x; i++) s += work_b(i); return s; }
int main(int argc, char **argv) { printf("%d\n", work_c(argc)); return 0; }
`

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// splitDebug splits prog as people split their own programs: the
// symbols and DWARF into debug (objcopy --only-keep-debug), prog stripped
// and linked to it by name and CRC (--add-gnu-debuglink).
func splitDebug(t *testing.T, prog, debug string) {
	t.Helper()
	run(t, "objcopy", "--only-keep-debug", prog, debug)
	run(t, "strip", "-s", prog)
	run(t, "objcopy", "--add-gnu-debuglink="+debug, prog)
}

// A program whose debug file is found by its .gnu_debuglink, beside it or
// in its .debug directory, is named from that file (symbols and source
// lines) as the unsplit program is; a debug file of another build with
// the same name is refused (its names would be wrong) with a warning, also
// when the table cache holds the module as named from the right one.
func TestDebugLinkFiles(t *testing.T) {
	withDebugRoot(t, t.TempDir())
	for _, buildID := range []string{"none", "sha1"} {
		for _, sub := range []string{"", ".debug"} {
			t.Run(buildID+"/"+sub, func(t *testing.T) {
				dir := t.TempDir()
				src := filepath.Join(t.TempDir(), "prog.c")
				if err := os.WriteFile(src, []byte(splitSrc), 0o644); err != nil {
					t.Fatal(err)
				}
				prog := filepath.Join(dir, "prog")
				run(t, "gcc", "-O1", "-g", "-Wl,--build-id="+buildID, "-o", prog, src)
				funcs := codeFuncs(t, prog, "work_", "main*")
				want := map[uint64]string{}
				plain := (&Cache{}).Module(prog)
				for a := range funcs {
					s, _ := plain.SymbolAt(a)
					want[a] = s.Name
				}
				if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
				debug := filepath.Join(dir, sub, "prog.debug")
				splitDebug(t, prog, filepath.Join(dir, "prog.debug"))
				if sub != "" {
					if err := os.Rename(filepath.Join(dir, "prog.debug"), debug); err != nil {
						t.Fatal(err)
					}
				}
				cache := t.TempDir()
				for run := 0; run < 2; run++ {
					m := (&Cache{Dir: cache}).Module(prog)
					if m.Source != "debug file "+debug || m.Warning != "" {
						t.Fatalf("run %d: names from %q (want the debug file %s), warning %q", run, m.Source, debug, m.Warning)
					}
					for a, name := range want {
						if s, ok := m.SymbolAt(a); !ok || s.Name != name {
							t.Fatalf("run %d: %#x named %q from the debug file, %q unsplit", run, a, s.Name, name)
						}
						if f, l, ok := m.Line(a); !ok || !strings.HasSuffix(f, "prog.c") || l == 0 {
							t.Fatalf("run %d: %#x (%s): no source line from the debug file (%q %d %v)", run, a, want[a], f, l, ok)
						}
					}
				}
				// another build's debug file under the same name
				other := filepath.Join(t.TempDir(), "prog")
				run(t, "gcc", "-O0", "-g", "-Wl,--build-id="+buildID, "-o", other, src)
				run(t, "objcopy", "--only-keep-debug", other, debug)
				for run := 0; run < 2; run++ {
					m := (&Cache{Dir: cache}).Module(prog)
					if strings.HasPrefix(m.Source, "debug file") || !strings.Contains(m.Warning, "not of this build") {
						t.Fatalf("run %d: another build's debug file: names from %q, warning %q", run, m.Source, m.Warning)
					}
				}
			})
		}
	}
}

// A module's .gnu_debuglink names a file by a name its owner chose, which
// post (and pitraced's continuous naming, as root) opens beside it: a FIFO
// by that name is not opened for reading (that would block until a writer
// came) but ignored with a warning, and the module is read without it.
func TestDebugLinkToFIFOIgnored(t *testing.T) {
	withDebugRoot(t, t.TempDir())
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "prog.c")
	if err := os.WriteFile(src, []byte(splitSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	run(t, "gcc", "-O1", "-g", "-o", prog, src)
	debug := filepath.Join(dir, "prog.debug")
	splitDebug(t, prog, debug)
	if err := os.Remove(debug); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(debug, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Module, 1)
	go func() { done <- (&Cache{}).Module(prog) }()
	select {
	case m := <-done:
		if m.Err != nil || !strings.Contains(m.Warning, debug) {
			t.Fatalf("module %v, warning %q: want it read, the FIFO named in a warning", m.Err, m.Warning)
		}
	case <-time.After(time.Minute):
		t.Fatal("reading the module blocked on the FIFO its debug link names")
	}
}
