package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"perfinsp/internal/testenv"

	"golang.org/x/sys/unix"
)

// needGCC skips the test when gcc is missing, except under CI=true where
// that is a failure.
func needGCC(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Missing(tb, "gcc is needed (CI=true): %v", err)
	}
}

// progC is the test program: main -> a -> b -> leaf spinning (the
// calls to b and a end their functions); with an
// argument main -> qsort (libc, through the PLT) -> ... -> cmp spinning.
// It writes "r" when it spins.
const progC = `#include <stdlib.h>
#include <unistd.h>

volatile int flag;

__attribute__((noinline)) void leaf(void) {
	write(1, "r", 1);
	while (!flag)
		;
}
/* b does not return: a's call to b (and main's to a) ends its function,
   the return address is past its FDE. */
__attribute__((noinline, noreturn)) void b(void) {
	leaf();
	exit(0);
}
__attribute__((noinline)) void a(void) { b(); }

__attribute__((noinline)) int cmp(const void *x, const void *y) {
	static int once;
	if (!once) {
		once = 1;
		write(1, "r", 1);
	}
	while (!flag)
		;
	return *(const int *)x - *(const int *)y;
}

int main(int argc, char **argv) {
	(void)argv;
	if (argc > 1) {
		int v[2] = {2, 1};
		qsort(v, 2, sizeof v[0], cmp);
		return v[0];
	}
	a();
	return 0;
}
`

// buildProg compiles progC without frame pointers, as a PIE or not, in
// dir (a new temporary directory of tb's when "").
func buildProg(tb testing.TB, pie bool, dir string) string {
	tb.Helper()
	needGCC(tb)
	if dir == "" {
		dir = tb.TempDir()
	}
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(progC), 0o644); err != nil {
		tb.Fatal(err)
	}
	exe := filepath.Join(dir, "prog")
	if !pie {
		exe += "-nopie"
	}
	args := []string{"-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-o", exe, src}
	if pie {
		args = append([]string{"-fPIE", "-pie"}, args...)
	} else {
		args = append([]string{"-fno-PIE", "-no-pie"}, args...)
	}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		tb.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return exe
}

// mapping is one file mapping of the sampled process, its Table and
// symbols.
type mapping struct {
	start, end, off uint64
	path            string
	t               *Table
	syms            []elf.Symbol // functions, sorted by Value
}

// sample is a stack sample of a live process.
type sample struct {
	regs Regs
	st   Stack
	maps []*mapping // sorted by start
}

// find is the sample's Finder.
func (s *sample) find(pc uint64) (*Table, uint64, bool) {
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].end > pc })
	if i == len(s.maps) || pc < s.maps[i].start {
		return nil, 0, false
	}
	m := s.maps[i]
	return m.t, pc - m.start + m.off, true
}

// name names pc, a return address (named by pc-1) unless first.
func (s *sample) name(pc uint64, first bool) string {
	if !first {
		pc--
	}
	t, off, ok := s.find(pc)
	if !ok {
		return fmt.Sprintf("%#x", pc)
	}
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].end > pc })
	m := s.maps[i]
	v, ok := t.vaddr(off)
	if !ok {
		return fmt.Sprintf("%s+%#x", filepath.Base(m.path), off)
	}
	j := sort.Search(len(m.syms), func(j int) bool { return m.syms[j].Value > v }) - 1
	if j < 0 || v >= m.syms[j].Value+m.syms[j].Size {
		return fmt.Sprintf("%s+%#x", filepath.Base(m.path), v)
	}
	return m.syms[j].Name
}

// names names the PCs of an unwind.
func (s *sample) names(pcs []uint64) []string {
	var n []string
	for i, pc := range pcs {
		n = append(n, s.name(pc, i == 0))
	}
	return n
}

// inLibc says whether pc (a return address) is in libc.so.
func (s *sample) inLibc(pc uint64) bool {
	pc--
	i := sort.Search(len(s.maps), func(i int) bool { return s.maps[i].end > pc })
	return i < len(s.maps) && pc >= s.maps[i].start && strings.HasPrefix(filepath.Base(s.maps[i].path), "libc.so")
}

// fpWalk is a frame-pointer walk of the sample.
func (s *sample) fpWalk(max int) []uint64 {
	pcs := []uint64{s.regs.R[RIP]}
	fp := s.regs.R[RBP]
	for len(pcs) < max {
		ra, ok1 := s.st.read(fp + 8)
		next, ok2 := s.st.read(fp)
		if !ok1 || !ok2 || ra == 0 {
			break
		}
		pcs = append(pcs, ra)
		if next <= fp {
			break
		}
		fp = next
	}
	return pcs
}

// loadFile loads a file's Table and function symbols.
func loadFile(path string) (*Table, []elf.Symbol, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	t, err := Load(f, fi.Size())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, nil, err
	}
	var syms []elf.Symbol
	s1, _ := ef.Symbols()
	s2, _ := ef.DynamicSymbols()
	for _, s := range append(s1, s2...) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			syms = append(syms, s)
		}
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].Value < syms[j].Value })
	return t, syms, nil
}

// readMaps reads the file mappings of pid and loads each file once.
func readMaps(pid int) ([]*mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	type loaded struct {
		t    *Table
		syms []elf.Symbol
	}
	files := map[string]loaded{}
	var maps []*mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		l, ok := files[f[5]]
		if !ok {
			t, syms, err := loadFile(f[5])
			if err != nil {
				return nil, err
			}
			l = loaded{t, syms}
			files[f[5]] = l
		}
		maps = append(maps, &mapping{start: start, end: end, off: off, path: f[5], t: l.t, syms: l.syms})
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].start < maps[j].start })
	return maps, sc.Err()
}

// addrRange is the executable mappings of one file in a process.
type addrRange [][2]uint64

func (r addrRange) contains(a uint64) bool {
	for _, m := range r {
		if a >= m[0] && a < m[1] {
			return true
		}
	}
	return false
}

// ownText is where exe's code is mapped in pid.
func ownText(tb testing.TB, pid int, exe string) addrRange {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		tb.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(exe)
	if err != nil {
		tb.Fatal(err)
	}
	var r addrRange
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "x") || f[5] != want {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		r = append(r, [2]uint64{start, end})
	}
	if len(r) == 0 {
		tb.Fatalf("%s is not mapped executable in process %d", want, pid)
	}
	return r
}

// stackCopy is the size of the stack copy, as a perf sample's.
const stackCopy = 8 << 10

// capture runs exe (with args), stops it with ptrace once it spins and
// takes its registers, 8 KiB of stack at SP and its mappings.
func capture(tb testing.TB, exe string, args ...string) *sample {
	tb.Helper()
	cmd := exec.Command(exe, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var b [1]byte
	if _, err := io.ReadFull(out, b[:]); err != nil {
		tb.Fatalf("waiting for the test program to spin: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(pid); err != nil {
		tb.Skipf("ptrace not permitted here, skipped: PTRACE_SEIZE: %v", err)
	}
	// The program wrote its byte just before its spin loop: stop it until
	// it is caught in its own code (not still in write's return path).
	text := ownText(tb, pid, exe)
	var pr unix.PtraceRegs
	for deadline := time.Now().Add(time.Minute); ; {
		if err := unix.PtraceInterrupt(pid); err != nil {
			tb.Fatalf("PTRACE_INTERRUPT: %v", err)
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
			tb.Fatalf("waiting for the ptrace stop: %v (status %#x)", err, ws)
		}
		if err := unix.PtraceGetRegs(pid, &pr); err != nil {
			tb.Fatalf("PTRACE_GETREGS: %v", err)
		}
		if text.contains(pr.Rip) {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the test program never stopped in its own code (last at %#x)", pr.Rip)
		}
		if err := unix.PtraceCont(pid, 0); err != nil {
			tb.Fatalf("PTRACE_CONT: %v", err)
		}
	}
	s := &sample{}
	s.regs.R = [NumRegs]uint64{
		RAX: pr.Rax, RDX: pr.Rdx, RCX: pr.Rcx, RBX: pr.Rbx, RSI: pr.Rsi, RDI: pr.Rdi,
		RBP: pr.Rbp, RSP: pr.Rsp, R8: pr.R8, R9: pr.R9, R10: pr.R10, R11: pr.R11,
		R12: pr.R12, R13: pr.R13, R14: pr.R14, R15: pr.R15, RIP: pr.Rip,
	}
	s.regs.Valid = 1<<NumRegs - 1
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer mem.Close()
	// Up to 8 KiB: the stack may end sooner.
	data := make([]byte, stackCopy)
	n := 0
	for n < len(data) {
		k, err := mem.ReadAt(data[n:], int64(pr.Rsp)+int64(n))
		n += k
		if err != nil || k == 0 {
			break
		}
	}
	if n < 64 {
		tb.Fatalf("read %d bytes of stack at %#x", n, pr.Rsp)
	}
	s.st = Stack{Addr: pr.Rsp, Data: data[:n]}
	if s.maps, err = readMaps(pid); err != nil {
		tb.Fatal(err)
	}
	return s
}

var (
	samplesMu sync.Mutex
	samples   = map[string]*sample{}
	// sharedDir holds the live samples' programs for the whole run (the
	// samples are shared by tests; TestCacheFull loads their files again).
	sharedDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "unwind-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sharedDir = dir
	code := testenv.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// liveSample returns a sample of the test program (built once per
// shape), spinning in leaf ("direct") or in qsort's comparator ("qsort").
func liveSample(tb testing.TB, pie bool, shape string) *sample {
	tb.Helper()
	key := fmt.Sprint(pie, shape)
	samplesMu.Lock()
	defer samplesMu.Unlock()
	if s := samples[key]; s != nil {
		return s
	}
	exe := buildProg(tb, pie, sharedDir)
	var args []string
	if shape == "qsort" {
		args = []string{"qsort"}
	}
	spin := map[string]string{"direct": "leaf", "qsort": "cmp"}[shape]
	// "r" is written before the spin: the stop may still be in write.
	for try := 0; ; try++ {
		s := capture(tb, exe, args...)
		if n := s.name(s.regs.R[RIP], true); n != spin {
			if try < 20 {
				continue
			}
			tb.Fatalf("the test program was stopped in %s, not in %s", n, spin)
		}
		samples[key] = s
		return s
	}
}

func TestRealProcess(t *testing.T) {
	for _, pie := range []bool{true, false} {
		for _, shape := range []string{"direct", "qsort"} {
			name := "nopie-" + shape
			if pie {
				name = "pie-" + shape
			}
			t.Run(name, func(t *testing.T) {
				s := liveSample(t, pie, shape)
				pcs, stop := Unwind(s.find, s.regs, s.st, nil, 64)
				names := s.names(pcs)
				t.Logf("CFI: %v (%v)", names, stop)
				fp := s.names(s.fpWalk(64))
				t.Logf("frame pointers: %v", fp)
				if stop != StopEnd || names[len(names)-1] != "_start" {
					t.Errorf("unwind ended with %v at %s, want the end at _start", stop, names[len(names)-1])
				}
				var want []string
				if shape == "direct" {
					want = []string{"leaf", "b", "a", "main"}
					if len(names) < 4 || strings.Join(names[:4], ",") != strings.Join(want, ",") {
						t.Errorf("chain %v, want %v first", names, want)
					}
				} else {
					want = []string{"cmp", "main"}
					// cmp, libc frames (qsort's), main.
					m := -1
					for i, n := range names {
						if n == "main" {
							m = i
							break
						}
					}
					if len(names) < 3 || names[0] != "cmp" || m < 2 {
						t.Fatalf("chain %v, want cmp, libc frames, main", names)
					}
					for i := 1; i < m; i++ {
						if !s.inLibc(pcs[i]) {
							t.Errorf("frame %d (%s) between cmp and main is not in libc", i, names[i])
						}
					}
				}
				if contains(fp, want) {
					t.Errorf("the frame-pointer walk gives %v too: the test proves nothing", fp)
				}
			})
		}
	}
}

// contains says whether the names have want in order (not necessarily
// adjacent).
func contains(names, want []string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && n == want[i] {
			i++
		}
	}
	return i == len(want)
}
