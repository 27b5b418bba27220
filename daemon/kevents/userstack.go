package kevents

import (
	"bytes"
	"fmt"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/analysis/unwind"
	"perfinsp/internal/procmaps"
)

// User stacks unwound by call-frame information (swtrace enable callstack
// --unwind dwarf): each sample brings the user registers and a copy of the
// top of the user stack (PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER);
// the daemon unwinds it with the .eh_frame of the files mapped where the
// frames' PCs are, and writes the same UNWIND record as a frame-pointer
// stack (PCs only: the trace format and post do not change).
//
// Mappings per process: a process first sampled is read from
// /proc/PID/maps; the session's MMAP2 records add to it, an exec starts it
// anew (the new program's mappings follow as MMAP2 records), a fork copies
// the parent's, and an exited process is forgotten a few seconds later (its
// last samples may still be in another CPU's ring). Files are opened as the
// process mapped them (/proc/PID/map_files), or by path only when anyone
// may read the file and it is the same file (device and inode): the daemon
// runs as root and opens nothing a user chose for it. Each file's table is
// loaded once per session (by device and inode: libc once for every
// process). A sample whose unwinding finds no call-frame information before
// the outermost frame keeps the kernel's frame-pointer walk when that is
// longer. Tables load on a goroutine of their own (a large library takes
// tens of milliseconds, and a drain held that long loses samples: 8 KB a
// sample at 10 kHz fills a CPU's ring in 100 ms); a sample that needs a
// table still loading waits for it in its CPU's queue (pending.go).

// perfRegsABI64 is PERF_SAMPLE_REGS_ABI_64: the sample's user registers
// are a 64-bit task's.
const perfRegsABI64 = 2

// perf_event user register mask: AX BX CX DX SI DI BP SP IP and R8-R15
// (PERF_REG_X86_*: bits 0-8 and 16-23).
const userRegsMask = 0x1ff | 0xff<<16

// dwarfOfPerfReg maps the sampled registers, in mask order, to DWARF
// numbers.
var dwarfOfPerfReg = [...]int{unwind.RAX, unwind.RBX, unwind.RCX, unwind.RDX, unwind.RSI, unwind.RDI, unwind.RBP, unwind.RSP, unwind.RIP,
	8, 9, 10, 11, 12, 13, 14, 15}

// maxUnwindFiles bounds the tables kept per session (a file past it is
// unwound by frame pointers).
const maxUnwindFiles = 4096

type fileID struct {
	major, minor uint32
	ino          uint64
}

// vdsoID stands for the [vdso] mapping: not a file; the kernel maps one
// image into every 64-bit process, the daemon's own (procmaps.SelfVDSO).
var vdsoID = fileID{major: ^uint32(0), minor: ^uint32(0)}

type userMap struct {
	start, end, off uint64
	id              fileID
	path            string
}

type procMaps struct {
	maps   []userMap // sorted by start, not overlapping
	exited time.Time // zero while the process lives
	read   time.Time // when /proc/PID/maps was last read
}

// UnwindStats counts how the user part of sampled stacks was unwound.
type UnwindStats struct {
	Samples   uint64        // samples with user registers and stack
	ToEnd     uint64        // unwound by call-frame information to the outermost frame
	Partial   uint64        // unwound part of the way (no information further, or the copy ended)
	FramePtrs uint64        // the frame-pointer walk was longer and kept
	Frames    uint64        // user frames written
	Time      time.Duration // spent unwinding (the daemon's CPU)
	LoadTime  time.Duration // spent loading tables (in the background)
	Early     uint64        // user stacks written after waiting in the queue (for a table still loading, or behind one that did)
	Cut       uint64        // of those, written before the table was there (the wait or the queue's size bound), marked truncated
	Waiting   int           // stacks waiting now
	Files     int           // files whose tables were loaded
	NoInfo    int           // files without usable call-frame information
}

type userUnwinder struct {
	mu     sync.Mutex
	procs  map[uint32]*procMaps
	tables map[fileID]*unwind.Table // nil: tried, no table
	stats  UnwindStats
	out    []uint64

	vdso    *unwind.Table   // the vDSO's (nil: could not be read)
	loading map[fileID]bool // queued to the loader
	loadQ   chan loadReq
	load    func(pid uint32, m *userMap) (*unwind.Table, error) // loadTable; tests replace it
	early   bool                                                // the unwind in progress met a loading file

	// for the Finder of the unwind in progress (under mu)
	cur *procMaps
	pid uint32
}

// loadReq asks the loader for the table of m's file, mapped by pid.
type loadReq struct {
	pid uint32
	m   userMap
}

func newUserUnwinder() *userUnwinder {
	u := &userUnwinder{procs: map[uint32]*procMaps{}, tables: map[fileID]*unwind.Table{},
		loading: map[fileID]bool{}, loadQ: make(chan loadReq, 256), load: loadTable}
	if img, err := procmaps.SelfVDSO(); err == nil {
		u.vdso, _ = unwind.Load(bytes.NewReader(img), int64(len(img)))
	}
	// Two loaders: one large file (a Go binary's compressed
	// .debug_frame, libLLVM) does not hold up the others.
	for i := 0; i < 2; i++ {
		go u.loader(u.loadQ)
	}
	return u
}

// loader loads the queued files' tables until close.
func (u *userUnwinder) loader(q chan loadReq) {
	for req := range q {
		u.mu.Lock()
		closed := u.loadQ == nil
		u.mu.Unlock()
		if closed {
			return // what is still queued is not loaded
		}
		start := time.Now()
		t, err := u.load(req.pid, &req.m)
		d := time.Since(start)
		u.mu.Lock()
		u.stats.LoadTime += d
		if err != nil {
			t = nil
			u.stats.NoInfo++
		} else {
			u.stats.Files++
		}
		u.tables[req.m.id] = t
		delete(u.loading, req.m.id)
		u.mu.Unlock()
	}
}

// close stops the loaders once the loads under way end (tables queued and
// not loaded are not loaded). It does not wait for them: an open can block
// (a file on a user's FUSE mount), and close runs when tracing stops.
func (u *userUnwinder) close() {
	u.mu.Lock()
	q := u.loadQ
	u.loadQ = nil
	u.mu.Unlock()
	if q != nil {
		close(q)
	}
}

// Stats returns the counts so far.
func (u *userUnwinder) Stats() UnwindStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stats
}

// proc returns pid's mappings, read from /proc the first time (nil when
// the process is gone and none are known).
func (u *userUnwinder) proc(pid uint32) *procMaps {
	if p, ok := u.procs[pid]; ok {
		return p
	}
	p := &procMaps{}
	if !p.reread(pid) {
		return nil
	}
	u.procs[pid] = p
	u.forgetExited()
	u.prefetch(pid, p)
	return p
}

// reread reads pid's mappings from /proc again (a sample's pc in none of
// them: the rings are drained one CPU after the other, so a sample can be
// read before the exec or mmap records of another CPU that precede it),
// at most every 50 ms; false when the process is gone or it was too soon.
func (p *procMaps) reread(pid uint32) bool {
	if !p.exited.IsZero() || time.Since(p.read) < 50*time.Millisecond {
		return false
	}
	p.read = time.Now()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/maps")
	if err != nil {
		return false
	}
	maps := p.maps[:0:0]
	_ = procmaps.Executable(b, func(m procmaps.Mapping) {
		id := fileID{m.Major, m.Minor, m.Inode}
		switch {
		case m.Path == "[vdso]":
			id = vdsoID
		case m.Inode == 0 || m.Path == "" || m.Path[0] != '/':
			return
		}
		maps = append(maps, userMap{start: m.Start, end: m.End, off: m.Offset, id: id, path: m.Path})
	})
	sort.Slice(maps, func(i, j int) bool { return maps[i].start < maps[j].start })
	p.maps = maps
	return true
}

// forgetExited drops processes that exited more than a few seconds ago.
func (u *userUnwinder) forgetExited() {
	now := time.Now()
	for pid, p := range u.procs {
		if !p.exited.IsZero() && now.Sub(p.exited) > 5*time.Second {
			delete(u.procs, pid)
		}
	}
}

// mmap adds an executable file mapping of pid (an MMAP2 record).
func (u *userUnwinder) mmap(pid uint32, m userMap) {
	u.mu.Lock()
	defer u.mu.Unlock()
	p, ok := u.procs[pid]
	if !ok {
		// Not sampled yet: /proc is read at its first sample (and has
		// this mapping).
		return
	}
	kept := p.maps[:0:0]
	for _, o := range p.maps {
		if o.end <= m.start || o.start >= m.end {
			kept = append(kept, o)
		}
	}
	i := sort.Search(len(kept), func(i int) bool { return kept[i].start > m.start })
	kept = append(kept, userMap{})
	copy(kept[i+1:], kept[i:])
	kept[i] = m
	p.maps = kept
	// Its table starts loading now, before the process's samples need it
	// (most come later: a program maps its libraries, then runs).
	u.table(pid, &kept[i])
}

// prefetch queues the tables of every file pid maps.
func (u *userUnwinder) prefetch(pid uint32, p *procMaps) {
	for i := range p.maps {
		u.table(pid, &p.maps[i])
	}
}

// exec starts pid's mappings anew (the new program's MMAP2 records follow).
func (u *userUnwinder) exec(pid uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.procs[pid] = &procMaps{}
}

// fork gives a new process its parent's mappings.
func (u *userUnwinder) fork(ppid, pid uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p, ok := u.procs[ppid]; ok {
		u.procs[pid] = &procMaps{maps: append([]userMap(nil), p.maps...)}
	}
}

// exit marks pid gone (forgotten a few seconds later).
func (u *userUnwinder) exit(pid uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p, ok := u.procs[pid]; ok {
		p.exited = time.Now()
	}
}

// table returns the call-frame table of m's file (nil if it has none or
// cannot be opened safely).
func (u *userUnwinder) table(pid uint32, m *userMap) *unwind.Table {
	if m.id == vdsoID {
		return u.vdso
	}
	if t, ok := u.tables[m.id]; ok {
		return t
	}
	if u.loading[m.id] {
		u.early = true
		return nil
	}
	if len(u.tables)+len(u.loading) >= maxUnwindFiles || u.loadQ == nil {
		return nil
	}
	select {
	case u.loadQ <- loadReq{pid: pid, m: *m}:
		u.loading[m.id] = true
		u.early = true
	default: // the loader is behind: asked again when the sample is retried
		u.early = true
	}
	return nil
}

// loadTable opens m's file the way the process mapped it, else by path if
// anyone may read it and it is the same file, and loads its table.
func loadTable(pid uint32, m *userMap) (*unwind.Table, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end))
	if err != nil {
		// No symbolic link anywhere in the path (a directory link
		// could lead a root open to a device node), no blocking open.
		fd, err := unix.Openat2(unix.AT_FDCWD, m.path, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil, err
		}
		f = os.NewFile(uintptr(fd), m.path)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != m.id.ino || unix.Major(st.Dev) != m.id.major || unix.Minor(st.Dev) != m.id.minor {
		return nil, fmt.Errorf("%s: not the file mapped", m.path)
	}
	if st.Mode&0o004 == 0 && f.Name() == m.path {
		return nil, fmt.Errorf("%s: not readable by all and not reachable as mapped", m.path)
	}
	return unwind.Load(f, st.Size)
}

// find is the unwinder's Finder for the process being unwound.
func (u *userUnwinder) find(pc uint64) (*unwind.Table, uint64, bool) {
	p := u.cur
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].end > pc })
	if i == len(p.maps) || pc < p.maps[i].start {
		if !p.reread(u.pid) {
			return nil, 0, false
		}
		u.prefetch(u.pid, p)
		i = sort.Search(len(p.maps), func(i int) bool { return p.maps[i].end > pc })
		if i == len(p.maps) || pc < p.maps[i].start {
			return nil, 0, false
		}
	}
	m := &p.maps[i]
	t := u.table(u.pid, m)
	if t == nil {
		return nil, 0, false
	}
	return t, pc - m.start + m.off, true
}

// unwindSample appends the user frames of a sample (regs and stack copy
// parsed from b, the sample's bytes after its callchain) to pcs, or the
// frame-pointer walk fp when that is longer than what the call-frame
// information gave. It returns the new pcs, whether the stack is cut (the
// copy ended, max was reached, or force wrote it without a table still
// loading), and false when the sample has no user registers (a kernel
// thread): then pcs is unchanged. cfi is false when the frame-pointer walk
// was kept. wait is true, and nothing counted, when a table the unwinding
// needs is loading and not force. *pm is the process's mappings the
// sample is unwound with: nil, it is set to the process's current ones
// (a sample retried later keeps those of its time, whatever exec came
// since).
func (u *userUnwinder) unwindSample(pid uint32, b []byte, pcs, fp []uint64, max int, force bool, pm **procMaps) (out []uint64, cut, cfi, ok, wait bool) {
	var regs unwind.Regs
	if len(b) < 8 {
		return pcs, false, false, false, false
	}
	abi := le64(b)
	b = b[8:]
	if abi != perfRegsABI64 {
		// none (a kernel thread) or a 32-bit task: its frames are
		// not x86-64's (the frame-pointer walk stays)
		return pcs, false, false, false, false
	}
	n := bits.OnesCount64(userRegsMask)
	if len(b) < 8*n+8 {
		return pcs, false, false, false, false
	}
	for i := 0; i < n; i++ {
		d := dwarfOfPerfReg[i]
		regs.R[d] = le64(b[8*i:])
		regs.Valid |= 1 << d
	}
	b = b[8*n:]
	size := le64(b)
	b = b[8:]
	var st unwind.Stack
	if size > 0 && uint64(len(b)) >= size+8 {
		dyn := le64(b[size:])
		st = unwind.Stack{Addr: regs.R[unwind.RSP], Data: b[:min(size, dyn)]}
	}
	if max <= 0 {
		return pcs, true, false, true, false
	}
	start := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	p := *pm
	if p == nil {
		if p = u.proc(pid); p == nil {
			p = &procMaps{}
		}
		*pm = p
	}
	u.cur, u.pid, u.early = p, pid, false
	frames, stop := unwind.Unwind(u.find, regs, st, u.out[:0], max)
	u.out = frames
	u.cur = nil
	if u.early && !force {
		u.stats.Time += time.Since(start)
		return pcs, false, false, true, true
	}
	u.stats.Samples++
	truncated := stop == unwind.StopDepth || stop == unwind.StopStack
	cfi = true
	if u.early {
		u.stats.Cut++
		truncated = true
	}
	switch {
	case stop == unwind.StopEnd:
		u.stats.ToEnd++
	case len(fp) > len(frames):
		u.stats.FramePtrs++
		frames, truncated, cfi = fp, len(fp) >= max || u.early, false
	default:
		u.stats.Partial++
	}
	if len(frames) > max {
		frames, truncated = frames[:max], true
	}
	u.stats.Frames += uint64(len(frames))
	u.stats.Time += time.Since(start)
	return append(pcs, frames...), truncated, cfi, true, false
}

// waiting counts a sample queued for a table (d 1) or written (d -1);
// user: the one written was a user stack (unwound and counted in
// Samples), which waited: Early. (A kernel thread's sample queued behind
// one that waits is no user stack: counted, Early was above Samples.)
func (u *userUnwinder) waiting(d int, user bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stats.Waiting += d
	if d < 0 && user {
		u.stats.Early++
	}
}

// String is the summary swtrace prints at off.
func (st UnwindStats) String() string {
	if st.Samples == 0 {
		return "no user stack was sampled (--unwind dwarf)"
	}
	pct := func(n uint64) float64 { return 100 * float64(n) / float64(st.Samples) }
	return fmt.Sprintf("%d user stacks unwound by call-frame information (--unwind dwarf): %.1f %% to the outermost frame, %.1f %% part of the way, %.1f %% kept the frame-pointer walk (longer), %.1f %% waited for a table loading (%d written cut: the wait's bounds); %.1f frames a stack; %d files' tables loaded (%.3f s, in the background), %d without call-frame information; %.3f s spent unwinding, %.1f µs a stack",
		st.Samples, pct(st.ToEnd), pct(st.Partial), pct(st.FramePtrs), pct(st.Early), st.Cut, float64(st.Frames)/float64(st.Samples), st.Files, st.LoadTime.Seconds(), st.NoInfo,
		st.Time.Seconds(), float64(st.Time.Nanoseconds())/1e3/float64(st.Samples))
}
