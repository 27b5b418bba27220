package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"perfinsp/analysis/a2n"
	"perfinsp/format/trace"
	"perfinsp/internal/procscan"
	"perfinsp/internal/untrusted"
	"perfinsp/libperfutil/events"
)

// Func is one function of the target: the file and file offset of its
// first instruction (where a uprobe goes) and its name.
type Func struct {
	Path string `json:"module"`
	Off  uint64 `json:"offset"`
	Name string `json:"name"`
	// Size is the function's length in bytes (its symbol's or .eh_frame
	// range's; 0: not known): its exits are found in it.
	Size uint64 `json:"size,omitempty"`
	// NoProbe says why the function cannot be instrumented ("" if it can).
	NoProbe string `json:"not_instrumentable,omitempty"`
}

func (f Func) key() string { return f.Path + "\x00" + strconv.FormatUint(f.Off, 16) }

type segment struct {
	start, size, off uint64
	path             string
}

// procMap names the addresses of one process: its executable mappings as
// procscan.Describe reports them, symbols from a2n.
type procMap struct {
	pid   int
	segs  []segment
	cache *a2n.Cache
	memo  map[uint64]Func
}

func newProcMap(pid int, cache *a2n.Cache) (*procMap, error) {
	m := &procMap{pid: pid, cache: cache, memo: map[uint64]Func{}}
	return m, m.reload()
}

// reload rereads the mappings (after a dlopen or an unknown address).
func (m *procMap) reload() error {
	var segs []segment
	err := procscan.Describe(m.pid, 0, func(minor uint32, f []uint64, str string) {
		if minor == trace.MTESegment && len(f) >= 4 {
			segs = append(segs, segment{start: f[1], size: f[2], off: f[3], path: str})
		}
	})
	if errors.Is(err, fs.ErrNotExist) {
		// gone (reaped) between its start and this read
		return fmt.Errorf("process %d %w: nothing to sample", m.pid, errExited)
	}
	if err != nil {
		return fmt.Errorf("read the mappings of process %d: %w", m.pid, err)
	}
	if len(segs) == 0 {
		return noMappings(m.pid)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].start < segs[j].start })
	m.segs = segs
	return nil
}

// lookup names the function holding addr.
func (m *procMap) lookup(addr uint64) Func {
	if f, ok := m.memo[addr]; ok {
		return f
	}
	f, found := m.find(addr)
	if !found {
		if m.reload() == nil {
			f, _ = m.find(addr)
		}
	}
	m.memo[addr] = f
	return f
}

func (m *procMap) find(addr uint64) (Func, bool) {
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].start > addr }) - 1
	if i < 0 || addr >= m.segs[i].start+m.segs[i].size {
		return Func{Name: fmt.Sprintf("[unknown %#x]", addr), NoProbe: "address outside every executable mapping"}, false
	}
	s := m.segs[i]
	if s.path == "" || strings.HasPrefix(s.path, "[") || strings.HasPrefix(s.path, "//anon") || strings.HasPrefix(s.path, "/memfd:") {
		name := s.path
		if name == "" {
			name = "[anon]"
		}
		// One row per mapping: its addresses have no names here.
		return Func{Name: fmt.Sprintf("%s@%#x", name, s.start),
			NoProbe: "anonymous or special memory (JIT code?): no file for a uprobe"}, true
	}
	fileOff := addr - s.start + s.off
	mod := m.cache.Module(s.path)
	if mod.Err != nil {
		return Func{Path: s.path, Off: fileOff, Name: fmt.Sprintf("%s+%#x", baseName(s.path), fileOff),
			NoProbe: "module not readable: " + mod.Err.Error()}, true
	}
	sym, va, ok := mod.Symbol(fileOff)
	if !ok || va < sym.Addr {
		return Func{Path: s.path, Off: fileOff, Name: fmt.Sprintf("%s+%#x", baseName(s.path), fileOff),
			NoProbe: "no symbol or .eh_frame range covers this address"}, true
	}
	f := Func{Path: s.path, Off: fileOff - (va - sym.Addr), Name: sym.Name, Size: sym.Size}
	if isGo(s.path) {
		f.NoProbe = noProbeGo
	}
	return f, true
}

// noProbeGo says why Go code is not instrumented: Go's runtime walks,
// copies and checks its goroutines' stacks and moves goroutines between
// threads in the middle of a call, so a probe there is either a hazard to
// the program (a return probe's return address kills it) or gives pairs
// that do not hold (an exit on another thread than its entry).
const noProbeGo = "Go code: sampled only, never probed (Go's runtime moves goroutine stacks and goroutines between threads)"

var goFiles sync.Map // path -> bool

// isGo reports whether the ELF file at path was built by Go: it has a
// .go.buildinfo section, as Go executables and c-shared libraries do, or
// a runtime.main symbol (a toolchain that writes no build info). A file
// that cannot be read safely is not taken for Go: it is not instrumented
// anyway (no symbols are read from it either).
func isGo(path string) bool {
	if v, ok := goFiles.Load(path); ok {
		return v.(bool)
	}
	is := false
	if f, _, err := untrusted.Open(path); err == nil {
		if ef, err := elf.NewFile(f); err == nil {
			is = ef.Section(".go.buildinfo") != nil || hasSymbol(ef, "runtime.main")
			ef.Close()
		}
		f.Close()
	}
	goFiles.Store(path, is)
	return is
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// threadsOf lists the threads of pid (events.ThreadsOf).
func threadsOf(pid int) ([]int, error) {
	units, err := events.ThreadsOf(pid)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(units))
	for _, u := range units {
		out = append(out, u.TID)
	}
	return out, nil
}

// perfFDs counts the perf_event fds this process holds open.
func perfFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// fileOffset maps addr to its file and file offset (no symbol needed).
func (m *procMap) fileOffset(addr uint64) (string, uint64, bool) {
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].start > addr }) - 1
	if i < 0 || addr >= m.segs[i].start+m.segs[i].size || !strings.HasPrefix(m.segs[i].path, "/") {
		return "", 0, false
	}
	return m.segs[i].path, addr - m.segs[i].start + m.segs[i].off, true
}

// noMappings says why process pid shows no executable mapping: it exited
// (gone, or a zombie not yet reaped), it is another user's, or neither.
// errExited: the process ended (or is a zombie) before its mappings were
// read.
var errExited = errors.New("exited before hotspot could read its mappings")

func noMappings(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return fmt.Errorf("process %d %w: nothing to sample", pid, errExited)
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X' || exiting(stat[i+2:])) {
		return fmt.Errorf("process %d %w: nothing to sample", pid, errExited)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("process %d is uid %d's: run hotspot as that user or as root", pid, st.Uid)
	}
	return fmt.Errorf("process %d: no executable mapping readable", pid)
}

// exiting says whether the fields of /proc/PID/stat after the command's
// name (state first) have PF_EXITING in the flags: the process is between
// giving its memory back (no mappings) and becoming a zombie.
func exiting(fields []byte) bool {
	f := bytes.Fields(fields)
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(string(f[6]), 10, 64)
	return err == nil && flags&0x4 != 0 // PF_EXITING
}

// hasSymbol says whether ef's symbol table names a symbol name.
func hasSymbol(ef *elf.File, name string) bool {
	syms, _ := ef.Symbols()
	for _, sym := range syms {
		if sym.Name == name {
			return true
		}
	}
	return false
}
