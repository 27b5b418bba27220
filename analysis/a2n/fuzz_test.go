package a2n

import (
	"bytes"
	"debug/elf"
	"strings"
	"testing"

	"perfinsp/internal/procmaps"
)

// The parsers of untrusted A2N inputs never panic and return only usable
// symbols. `make fuzz` runs each briefly; `go test` runs the seeds.

func FuzzParsePerfMap(f *testing.F) {
	f.Add([]byte("7f0000001000 40 Interpreted LHot;::spin\n7f0000002000 0x20 LHot;::other\nbad line\n"))
	f.Add([]byte("0 0 zero\nffffffffffffffff ffffffffffffffff wrap\n\n \n"))
	f.Add([]byte("1000 10 " + strings.Repeat("x", 300) + "\n1000 10 after_long_name\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, s := range ParsePerfMap(b) {
			if s.Size == 0 {
				t.Fatalf("zero-size entry %+v", s)
			}
			if strings.ContainsAny(s.Name, "\n") {
				t.Fatalf("name spans lines: %q", s.Name)
			}
		}
	})
}

func FuzzParseJitdump(f *testing.F) {
	f.Add(jitdumpSeed())
	f.Add(jitdumpSeed()[:60])
	f.Add([]byte("DTiJ\x00\x00\x00\x01\x00\x00\x00\x28"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, s := range ParseJitdump(b) {
			if strings.IndexByte(s.Name, 0) >= 0 {
				t.Fatalf("name holds a NUL: %q", s.Name)
			}
		}
	})
}

// FuzzModule parses arbitrary bytes as an ELF module (symbols, PLT,
// .eh_frame, .gnu_debugdata) and looks addresses up.
func FuzzModule(f *testing.F) {
	if img, err := procmaps.SelfVDSO(); err == nil {
		f.Add(img) // a small real ELF with .dynsym and .eh_frame
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return
		}
		m := &Module{Path: "fuzz"}
		m.fromELF(ef, false, "")
		for _, p := range m.loads {
			for _, off := range []uint64{p.Off, p.Off + p.Filesz/2, p.Off + p.Filesz - 1} {
				m.Symbol(off)
			}
		}
	})
}

func jitdumpSeed() []byte {
	var b []byte
	le := func(v uint64, n int) {
		for i := 0; i < n; i++ {
			b = append(b, byte(v>>(8*i)))
		}
	}
	le(0x4A695444, 4)
	le(1, 4)
	le(40, 4)
	le(62, 4)
	le(66, 4)
	le(0, 4)
	le(0, 8)
	le(0, 8)
	name := "jitted_fn\x00"
	le(0, 4)
	le(uint64(56+len(name)), 4)
	le(5, 8)
	le(66, 4)
	le(66, 4)
	le(0x9000, 8)
	le(0x9000, 8)
	le(0x30, 8)
	le(1, 8)
	b = append(b, name...)
	return b
}
