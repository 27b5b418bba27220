package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// realFiles are the libraries whose .eh_frame TestAgainstDelve reads:
// libc and libstdc++ (on every Debian system: apt needs them) and a large
// C++ library, LLVM's, else GCC's cc1 (a build dependency).
func realFiles(t *testing.T) []string {
	ci := os.Getenv("CI") == "true"
	var out []string
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		if _, err := os.Stat(p); err != nil {
			if ci {
				t.Errorf("%v (a Debian system has it)", err)
			} else {
				t.Logf("skipped: %v", err)
			}
			continue
		}
		out = append(out, p)
	}
	llvm, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/libLLVM-*.so.1")
	cc1, _ := filepath.Glob("/usr/lib/gcc/x86_64-linux-gnu/*/cc1")
	switch {
	case len(llvm) > 0:
		out = append(out, llvm[len(llvm)-1]) // the newest
	case len(cc1) > 0:
		out = append(out, cc1[len(cc1)-1])
	case ci:
		t.Error("neither libLLVM nor GCC's cc1 is installed (apt-get install gcc)")
	default:
		t.Log("skipped the large library: neither libLLVM nor GCC's cc1 is installed")
	}
	return out
}

// TestAgainstDelve: for every FDE of real libraries' .eh_frame and of a
// Go program's .debug_frame, the ranges, instructions and CIE fields read
// here equal those of delve's parser (github.com/go-delve/delve/pkg/dwarf/frame).
func TestAgainstDelve(t *testing.T) {
	files := realFiles(t)
	if prog, err := goProgram(t); err != nil {
		t.Errorf("building a Go program for its .debug_frame: %v", err)
	} else {
		files = append(files, prog)
	}
	if len(files) == 0 {
		t.Skip("skipped: none of the files this test reads is installed")
	}
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		eh := true
		sec := f.Section(".eh_frame")
		if sec == nil {
			eh, sec = false, f.Section(".debug_frame")
		}
		if sec == nil {
			t.Fatalf("%s: no .eh_frame or .debug_frame", path)
		}
		data, err := sec.Data()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		addr := sec.Addr
		if !eh {
			addr = 0
		}
		want, err := frame.Parse(data, binary.LittleEndian, 0, 8, addr)
		if err != nil {
			t.Fatalf("%s: delve: %v", path, err)
		}
		sort.SliceStable(want, func(i, j int) bool { return want[i].Begin() < want[j].Begin() })
		got, err := Parse(Section{Data: data, Addr: addr, EH: eh, PtrSize: 8, Order: binary.LittleEndian})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d FDEs, delve %d", path, len(got), len(want))
		}
		bad := 0
		for i := range got {
			g, w := &got[i], want[i]
			c, wc := g.CIE, w.CIE
			if g.Begin != w.Begin() || g.Begin+g.Size != w.End() || !bytes.Equal(g.Ins, w.Instructions) ||
				!bytes.Equal(c.Initial, wc.InitialInstructions) || c.CodeAlign != wc.CodeAlignmentFactor ||
				c.DataAlign != wc.DataAlignmentFactor || c.RA != wc.ReturnAddressRegister ||
				c.Augmentation != wc.Augmentation || c.Signal != (eh && strings.Contains(wc.Augmentation, "S")) {
				if bad++; bad <= 5 {
					t.Errorf("%s: FDE %d: [%#x, %#x) %x, CIE %+v; delve [%#x, %#x) %x, CIE %+v", path, i,
						g.Begin, g.Begin+g.Size, g.Ins, *c, w.Begin(), w.End(), w.Instructions, *wc)
				}
			}
		}
		t.Logf("%s: %s: %d FDEs, %d differ from delve's", path, sec.Name, len(got), bad)
	}
}

// goProgram builds a small Go program (a .debug_frame, no .eh_frame).
func goProgram(t *testing.T) (string, error) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	return bin, nil
}
