package a2n

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// withDebugData builds the test program stripped, with the xz file xzPath
// as its .gnu_debugdata, and returns its path.
func withDebugData(t *testing.T, xzPath string) string {
	t.Helper()
	_, prog := builtSrc(t, "testdata/funcs.c")
	out := stripped(t, prog)
	if b, err := exec.Command("objcopy", "--add-section", ".gnu_debugdata="+xzPath, out).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	return out
}

// xzOfZeros makes an xz file (one block, index sizes only) of n zero bytes.
func xzOfZeros(t *testing.T, n int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "zeros")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, n); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("xz", "-0", "-T1", path).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v\n%s", err, b)
	}
	return path + ".xz"
}

// TestDebugDataBombRefusedUnread: a .gnu_debugdata whose xz index declares
// 200 MB (a 30 KB section) is refused from its index, with nothing
// decompressed (a few MB allocated, well under a second), the warning
// says so, and the refusal is remembered for the file: a hard link to it
// gets the same refusal without its section being looked at again.
func TestDebugDataBombRefusedUnread(t *testing.T) {
	for _, tool := range []string{"objcopy", "xz", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			needTool(t, tool, "builds the xz bomb of the test")
		}
	}
	bomb := withDebugData(t, xzOfZeros(t, 200<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	m := loadModule(bomb, "")
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%v, %d KB allocated: %s", took, alloc>>10, m.Warning)
	if m.Err != nil || !strings.Contains(m.Warning, "xz index declares 209715200 bytes, more than") {
		t.Fatalf("module %v, warning %q", m.Err, m.Warning)
	}
	if alloc > 16<<20 {
		t.Fatalf("%d MB allocated refusing the bomb: it was decompressed", alloc>>20)
	}
	fi, err := os.Stat(bomb)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := debugDataRefused.Load(string(fileIdent(fi))); !ok {
		t.Fatal("the refusal is not remembered for the file")
	}
	link := filepath.Join(t.TempDir(), "another-name")
	if err := os.Link(bomb, link); err != nil {
		t.Fatal(err)
	}
	if m2 := loadModule(link, ""); m2.Warning != m.Warning {
		t.Fatalf("the same file by another name: warning %q", m2.Warning)
	}
}

// TestDebugDataLyingIndexRefused: an index declaring a byte less than its
// block decompresses to (its CRC made right) is refused when the
// decompression passes the declared size; a truthful one of the same
// data is used.
func TestDebugDataLyingIndexRefused(t *testing.T) {
	for _, tool := range []string{"objcopy", "xz", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			needTool(t, tool, "builds the xz data of the test")
		}
	}
	const n = 1 << 20
	good := xzOfZeros(t, n)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if size, err := xzDeclaredSize(strings.NewReader(string(b)), int64(len(b))); err != nil || size != n {
		t.Fatalf("declared size %d, %v; want %d", size, err, n)
	}
	// The index: after the blocks, before the 12-byte footer.
	idxLen := (int(binary.LittleEndian.Uint32(b[len(b)-8:])) + 1) * 4
	idx := b[len(b)-12-idxLen : len(b)-12]
	var want [8]byte
	enc := binary.PutUvarint(want[:], n)
	i := strings.Index(string(idx), string(want[:enc]))
	if i < 0 {
		t.Fatalf("index % x does not hold the size", idx)
	}
	binary.PutUvarint(idx[i:], n-1) // (same length: 3 bytes)
	binary.LittleEndian.PutUint32(idx[len(idx)-4:], crc32.ChecksumIEEE(idx[:len(idx)-4]))
	liar := filepath.Join(t.TempDir(), "liar.xz")
	if err := os.WriteFile(liar, b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := loadModule(withDebugData(t, liar), "")
	if !strings.Contains(m.Warning, "decompresses to more than the 1048575 bytes its xz index declares") {
		t.Fatalf("lying index: warning %q", m.Warning)
	}
	// (1 MB of zeros is no ELF: a truthful index gets as far as parsing it)
	m = loadModule(withDebugData(t, good), "")
	if !strings.Contains(m.Warning, ".gnu_debugdata") || strings.Contains(m.Warning, "declare") {
		t.Fatalf("truthful index: warning %q", m.Warning)
	}
}
