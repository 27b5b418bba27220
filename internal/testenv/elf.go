package testenv

import (
	"debug/elf"
	"encoding/hex"
	"testing"
)

// ELF opens the ELF file at path for the rest of the test (closed at its
// end) and gives its function symbols with an address (the static table,
// else the dynamic one), in the file's order. A file that does not open
// or has no symbols fails the test.
func ELF(tb testing.TB, path string) (*elf.File, []elf.Symbol) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	syms, err := f.Symbols()
	if err != nil {
		if syms, err = f.DynamicSymbols(); err != nil {
			tb.Fatalf("%s: no symbols: %v", path, err)
		}
	}
	var out []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			out = append(out, s)
		}
	}
	return f, out
}

// FuncRange is the address range of the function symbol name of the ELF
// file at path; the test fails if it has none.
func FuncRange(tb testing.TB, path, name string) (lo, hi uint64) {
	tb.Helper()
	_, syms := ELF(tb, path)
	for _, s := range syms {
		if s.Name == name {
			return s.Value, s.Value + s.Size
		}
	}
	tb.Fatalf("%s has no function %s", path, name)
	return 0, 0
}

// BuildID is the GNU build id of the ELF file at path, in hex; the test
// fails if it has none.
func BuildID(tb testing.TB, path string) string {
	tb.Helper()
	f, _ := ELF(tb, path)
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		tb.Fatalf("%s has no build id", path)
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		tb.Fatalf("%s: build id note: %v", path, err)
	}
	return hex.EncodeToString(b[16:])
}
