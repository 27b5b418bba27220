package hugeheap

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vmaFlags returns the VmFlags of the mapping holding addr (from
// /proc/self/smaps).
func vmaFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, _ := strings.Cut(fields[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimPrefix(line, "VmFlags:")
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

// TestReserveAdvisesTheHeap: after Reserve, a large allocation lies in
// memory advised for huge pages (VmFlags "hg"); a program's heap does not
// have it otherwise (THP "madvise" mode, where this matters). In a fresh
// process of its own (the test binary again): Reserve changes the heap
// for good.
func TestReserveAdvisesTheHeap(t *testing.T) {
	mode, err := selected(thpEnabled)
	if err != nil || mode != "madvise" {
		t.Skipf("transparent huge pages are %q here (%v): Reserve only acts in madvise mode", mode, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserveInFreshProcess$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "HUGEHEAP_FRESH=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestReserveInFreshProcess") {
		t.Fatalf("in a fresh process: %v\n%s", err, out)
	}
}

// TestReserveInFreshProcess is TestReserveAdvisesTheHeap's child.
func TestReserveInFreshProcess(t *testing.T) {
	if os.Getenv("HUGEHEAP_FRESH") != "1" {
		t.Skip("run by TestReserveAdvisesTheHeap in a process of its own")
	}
	before := make([]byte, 8<<20)
	if fl := vmaFlags(t, uintptr(unsafe.Pointer(&before[0]))); strings.Contains(fl, " hg") {
		t.Fatalf("the heap is advised for huge pages before Reserve (VmFlags%s): the check below proves nothing", fl)
	}
	// (before stays allocated: freed, its space could take part of the
	// allocation below)
	debug.SetGCPercent(123)
	runtime.GC() // none under way: the count below is Reserve's
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	gcs := st.NumGC
	if n, why := Reserve(64 << 20); n != 64<<20 || why != "" {
		t.Fatalf("Reserve prepared %d bytes (%s), want 64 MB", n, why)
	}
	runtime.ReadMemStats(&st)
	if p := debug.SetGCPercent(100); p != 123 || st.NumGC != gcs+1 {
		t.Errorf("after Reserve: collector at %d %%, want 123 as before; %d collections, want 1 (the one that frees it)", p, st.NumGC-gcs)
	}
	b := make([]byte, 16<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if fl := vmaFlags(t, uintptr(unsafe.Pointer(&b[len(b)/2]))); !strings.Contains(fl, " hg") {
		t.Errorf("a 16 MB allocation after Reserve is not in memory advised for huge pages (VmFlags%s)", fl)
	}
	runtime.KeepAlive(before)
}

// TestReserveSkips: nothing is done, and the reason said, where huge
// pages are always or never given, under strict overcommit, when turned
// off, or for a size under two huge pages.
func TestReserveSkips(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldT, oldO := thpEnabled, overcommit
	defer func() { thpEnabled, overcommit = oldT, oldO }()
	overcommit = write("oc0", "0\n")
	for _, c := range []struct {
		thp, oc, env string
		n            int
		want         string
	}{
		{"[always] madvise never\n", "0\n", "", 64 << 20, "always"},
		{"always madvise [never]\n", "0\n", "", 64 << 20, "never"},
		{"always [madvise] never\n", "2\n", "", 64 << 20, "strict overcommit"},
		{"always [madvise] never\n", "0\n", "0", 64 << 20, "PERFINSP_HUGEPAGES=0"},
		{"always [madvise] never\n", "0\n", "", 1 << 20, "less than two huge pages"},
		{"garbage\n", "0\n", "", 64 << 20, "no [choice]"},
	} {
		thpEnabled = write("thp", c.thp)
		overcommit = write("oc", c.oc)
		t.Setenv("PERFINSP_HUGEPAGES", c.env)
		if n, got := Reserve(c.n); n != 0 || !strings.Contains(got, c.want) {
			t.Errorf("THP %q, overcommit %q, PERFINSP_HUGEPAGES=%q, %d bytes: %d bytes, %q, want none and %q",
				strings.TrimSpace(c.thp), strings.TrimSpace(c.oc), c.env, c.n, n, got, c.want)
		}
	}
}

// populateBelow maps in every page of the mapping below an address (up
// to lowMax), which mappingStart finds in /proc/self/maps: a fresh
// anonymous mapping has no page resident before and all after.
func TestPopulateBelow(t *testing.T) {
	const size = 4 << 20
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	base := uintptr(unsafe.Pointer(&b[0]))
	if lo, ok := mappingStart(base + size - 1); !ok || lo > base {
		t.Fatalf("mappingStart(%#x) = %#x, %v; want at most %#x", base+size-1, lo, ok, base)
	}
	resident := func() int {
		vec := make([]byte, size/os.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, base, size, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if n := resident(); n != 0 {
		t.Fatalf("%d pages resident in a fresh mapping", n)
	}
	populateBelow(base + size)
	if n, want := resident(), size/os.Getpagesize(); n != want {
		t.Fatalf("%d pages resident after populateBelow, want %d (MADV_POPULATE_WRITE needs Linux 5.14)", n, want)
	}
}
