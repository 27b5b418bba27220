package kmodbackend

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/kmodbackend/internal/abigen"
)

// The generated ABI files are what the header and abi_defs.go give today:
// regenerate them into memory (cgo -godefs and the C compiler, as
// `make kmod-abi` does) and compare byte for byte.
func TestGeneratedABIIsCurrent(t *testing.T) {
	g := abigen.New(".", filepath.Join("..", "..", "kmod", "uapi"))
	if _, err := exec.LookPath(g.CC); err != nil {
		testenv.Missing(t, "the C compiler %s is needed to check the generated ABI (apt-get install gcc): %v", g.CC, err)
	}
	files, err := g.Generate()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want := files[name]
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: %v (run `make kmod-abi`)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: kmod/uapi/pitrace.h or abi_defs.go changed since it was generated; run `make kmod-abi` (go generate ./libperfutil/kmodbackend)\nfirst difference:\n%s", name, firstDiff(got, want))
		}
	}
}

// firstDiff shows the first line where the file on disk and the
// regenerated one differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  file:        %s\n  regenerated: %s", i+1, a, b)
		}
	}
	return "(only line endings)"
}
