package a2n

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const goSrc = "package main\n\nimport (\"fmt\"; \"sort\")\n\n//go:noinline\nfunc spin(n int) int { s := 0; for i := 0; i < n; i++ { s += i * i }; return s }\n\nfunc main() { a := []int{3, 1, 2}; sort.Ints(a); fmt.Println(spin(10), a) }\n"

// cgoSrc has C code, linked by the external linker before Go's.
const cgoSrc = "package main\n\n/*\nstatic int cwork(int n) { int s = 0; for (int i = 0; i < n; i++) s += i ^ s; return s; }\n*/\nimport \"C\"\nimport \"fmt\"\n\n//go:noinline\nfunc spin(n int) int { s := 0; for i := 0; i < n; i++ { s += i * i }; return s }\n\nfunc main() { fmt.Println(spin(10), C.cwork(10)) }\n"

// goBuild builds a small Go program with the extra go build flags.
func goBuild(t *testing.T, dir, name string, flags ...string) string {
	return goBuildSrc(t, dir, name, goSrc, flags...)
}

// goBuildSrc builds src (cgo when it imports "C") with the go build flags.
func goBuildSrc(t *testing.T, dir, name, srcText string, flags ...string) string {
	t.Helper()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(srcText), 0o644); err != nil {
		t.Fatal(err)
	}
	cgo := "CGO_ENABLED=0"
	if strings.Contains(srcText, `import "C"`) {
		cgo = "CGO_ENABLED=1"
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, src)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", cgo)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, b)
	}
	return out
}

// A Go binary built with -ldflags=-s -w has no .symtab and no DWARF (and,
// without cgo, no .eh_frame); its functions are named from .gopclntab, as the unstripped
// build's .symtab names them (ABI wrappers' ".abi0" suffix aside), at
// every address of every function (the offset from the function's entry).
//
// With cgo the external linker puts C start-up code before Go's text, so
// the functions (offsets from runtime.text) are placed by the runtime's
// moduledata, not from .text's start; PIE or not.
func TestStrippedGoNamedFromPclntab(t *testing.T) {
	for _, c := range []struct {
		name, src string
		flags     []string
	}{
		{"go", goSrc, nil},
		{"cgo", cgoSrc, nil},
		{"cgo-pie", cgoSrc, []string{"-buildmode=pie"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.src == cgoSrc {
				if _, err := exec.LookPath("gcc"); err != nil {
					needTool(t, "gcc", "cgo builds with it")
				}
			}
			testStrippedGoNamed(t, c.src, c.flags)
		})
	}
}

func testStrippedGoNamed(t *testing.T, src string, flags []string) {
	withDebugRoot(t, t.TempDir())
	dir := t.TempDir()
	plain := goBuildSrc(t, dir, "goplain", src, append([]string{"-trimpath"}, flags...)...)
	strippedGo := goBuildSrc(t, dir, "gostripped", src, append([]string{"-trimpath", "-ldflags=-s -w"}, flags...)...)
	if f, err := elf.Open(strippedGo); err != nil {
		t.Fatal(err)
	} else {
		for _, s := range []string{".symtab", ".debug_info"} {
			if f.Section(s) != nil {
				t.Fatalf("%s kept %s: not the stripped build this test is about", strippedGo, s)
			}
		}
		f.Close()
	}
	// The two builds' code is the same: only the symbol and debug sections differ.
	funcs := codeFuncs(t, plain, "main.", "runtime.", "sort.", "fmt.")
	// parsed, then stored in the table cache and read back from it
	cache := t.TempDir()
	for run := 0; run < 3; run++ {
		c := &Cache{}
		if run > 0 {
			c.Dir = cache
		}
		m := c.Module(strippedGo)
		if !m.Stripped || !strings.Contains(m.Source, ".gopclntab") {
			t.Fatalf("run %d: stripped Go binary: stripped %v, names from %q", run, m.Stripped, m.Source)
		}
		checked := 0
		for start, s := range funcs {
			want := strings.TrimSuffix(s.Name, ".abi0")
			for _, va := range []uint64{start, start + s.Size/2, start + s.Size - 1} {
				got, ok := m.SymbolAt(va)
				if !ok || got.Name != want || got.Addr != start {
					t.Fatalf("run %d: %#x (%s+%#x): stripped build names it %q at %#x (ok %v)", run, va, want, va-start, got.Name, got.Addr, ok)
				}
			}
			checked++
		}
		if checked < 500 {
			t.Fatalf("only %d functions checked", checked)
		}
	}
}

// The source lines of a Go binary without DWARF come from its .gopclntab:
// at every address of the program's own functions, the file and line the
// DWARF of the same build gives.
func TestStrippedGoLinesFromPclntab(t *testing.T) {
	withDebugRoot(t, t.TempDir())
	dir := t.TempDir()
	plain := goBuild(t, dir, "goplain", "-trimpath")
	strippedGo := goBuild(t, dir, "gostripped", "-trimpath", "-ldflags=-s -w")
	funcs := codeFuncs(t, plain, "main.", "fmt.", "strconv.")
	dw, m := (&Cache{}).Module(plain), (&Cache{}).Module(strippedGo)
	checked := 0
	for start, s := range funcs {
		for va := start; va < start+s.Size; va++ {
			wf, wl, wok := dw.Line(va)
			if !wok {
				continue
			}
			f, l, ok := m.Line(va)
			if !ok || f != wf || l != wl {
				t.Fatalf("%s+%#x: %s:%d (%v) from .gopclntab, %s:%d from DWARF", s.Name, va-start, f, l, ok, wf, wl)
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("only %d addresses with a line", checked)
	}
}

// A .gopclntab whose header declares more functions than its size can
// hold (a crafted file) is not given to debug/gosym, which would allocate
// a Func and a Sym for each: the module is read without those names, with
// little memory.
func TestCraftedPclntabCount(t *testing.T) {
	dir := t.TempDir()
	strippedGo := goBuild(t, dir, "gostripped", "-trimpath", "-ldflags=-s -w")
	b, err := os.ReadFile(strippedGo)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(strippedGo)
	if err != nil {
		t.Fatal(err)
	}
	sec := f.Section(".gopclntab")
	f.Close()
	if sec == nil || b[sec.Offset+7] != 8 {
		t.Fatalf("no 64-bit .gopclntab in %s", strippedGo)
	}
	// as many functions as the functab (after the header's offsets) can
	// hold: debug/gosym slices it without complaint
	tab := b[sec.Offset : sec.Offset+sec.Size]
	functab := binary.LittleEndian.Uint64(tab[8+7*8:]) // ver118+: the 8th word is the functab's offset
	n := (sec.Size-functab)/8 - 1
	binary.LittleEndian.PutUint64(tab[8:], n)
	crafted := filepath.Join(dir, "crafted")
	if err := os.WriteFile(crafted, b, 0o755); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := (&Cache{}).Module(crafted)
	runtime.ReadMemStats(&after)
	if strings.Contains(m.Source, ".gopclntab") {
		t.Fatalf("a table declaring %d functions in %d bytes was read (names from %s)", n, sec.Size, m.Source)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*sec.Size {
		t.Fatalf("reading a table declaring %d functions in %d bytes allocated %d bytes", n, sec.Size, grew)
	}
}
